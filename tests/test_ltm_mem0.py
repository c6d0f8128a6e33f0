"""The mem0 backend: contract tests of vmem through the real mem0ai 2.x `MemoryClient`.

The client talks HTTP to `tests/mem0_server.py`, a local server answering the endpoints
it calls, keeping what is added and checking auth and body shapes.
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from mem0_server import Mem0Server
from typer.testing import CliRunner

from veadk_mem.cli.app import app
from veadk_mem.config import load_settings
from veadk_mem.errors import BadInput, NotSupported, StoreError
from veadk_mem.ltm.backends.mem0 import Mem0Backend

pytestmark = pytest.mark.contract

KEY = "m0-secret-key-1234"
EXAMPLES = Path(__file__).resolve().parents[1] / "docs" / "examples" / "sessions"
SESSION = EXAMPLES / "ltm_demo-session-1.json"
ALLERGY = "Note this: I'm allergic to peanuts and I'm vegetarian."


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch) -> Iterator[Mem0Server]:
    """A fresh fake Mem0 platform, configured as the long-term memory; retries wait 10 ms."""
    monkeypatch.setattr(Mem0Backend, "retry_delays", (0.01, 0.01, 0.01))
    monkeypatch.setenv("LONG_TERM_MEMORY_BACKEND", "mem0")
    monkeypatch.setenv("DATABASE_MEM0_API_KEY", KEY)
    with Mem0Server(KEY) as srv:
        monkeypatch.setenv("DATABASE_MEM0_BASE_URL", srv.url)
        yield srv


def invoke(runner: CliRunner, *args: str) -> tuple[int, str, str]:
    result = runner.invoke(app, list(args))
    assert KEY not in result.stdout + result.stderr  # never print the key
    assert "Traceback" not in result.stderr
    return result.exit_code, result.stdout, result.stderr


def veadk_add(server: Mem0Server, user: str, text: str) -> None:
    """A memory as VeADK's backend stores it: the event JSON, user_id only, no metadata."""
    server.state.store(user, json.dumps({"parts": [{"text": text}], "role": "user"}), None)


# --- save, search, replay ------------------------------------------------------------


def test_save_adds_one_user_message_per_memory_then_search_finds_it(runner: CliRunner, server: Mem0Server) -> None:
    code, out, err = invoke(runner, "--json", "ltm", "save", str(SESSION))
    assert code == 0, err
    assert json.loads(out)["totals"]["saved"] == 1  # the default policy keeps the user's text
    adds = server.requests("POST", "/v3/memories/add/")
    assert len(adds) == 1
    body = adds[0][2]
    [message] = body["messages"]
    assert message["role"] == "user"
    assert json.loads(message["content"]) == {"role": "user", "parts": [{"text": ALLERGY}]}  # VeADK's string
    assert body["user_id"] == "user-42"
    assert not {"agent_id", "app_id", "run_id"} & set(body)  # VeADK scopes by user alone
    assert body["metadata"]["session_id"] == "session-1" and len(body["metadata"]["content_hash"]) == 64
    assert "infer" not in body  # the platform's inference stays on, as in VeADK

    code, out, err = invoke(runner, "--json", "ltm", "search", "peanuts vegetarian", "-u", "user-42")
    assert code == 0, err
    entries = json.loads(out)
    assert entries[0]["content"]["parts"][0]["text"] == ALLERGY
    assert entries[0]["custom_metadata"]["origin"]["session_id"] == "session-1"
    search = server.requests("POST", "/v3/memories/search/")[0][2]
    assert search == {"query": "peanuts vegetarian", "filters": {"user_id": "user-42"}, "top_k": 5}


def test_replay_is_idempotent_although_the_platform_rewrites_text(runner: CliRunner, server: Mem0Server) -> None:
    server.state.rewrite = lambda text: "User is allergic to peanuts and vegetarian"
    code, out, _ = invoke(runner, "--json", "ltm", "save", str(EXAMPLES))
    first = json.loads(out)["totals"]
    assert code == 0 and first["saved"] > 1
    code, out, _ = invoke(runner, "--json", "ltm", "save", str(EXAMPLES))
    again = json.loads(out)["totals"]
    assert code == 0 and again["saved"] == 0 and again["duplicates"] == first["saved"]
    assert len(server.requests("POST", "/v3/memories/add/")) == first["saved"]


def test_no_infer_stores_the_text_verbatim(runner: CliRunner, server: Mem0Server) -> None:
    server.state.rewrite = lambda text: "rewritten"
    code, _, err = invoke(runner, "ltm", "save", str(SESSION), "--no-infer")
    assert code == 0, err
    assert server.requests("POST", "/v3/memories/add/")[0][2]["infer"] is False
    _, out, _ = invoke(runner, "--json", "ltm", "list", "-u", "user-42")
    assert json.loads(out)[0]["content"]["parts"][0]["text"] == ALLERGY


def test_the_infer_key_in_config(runner: CliRunner, server: Mem0Server, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DATABASE_MEM0_INFER", "false")
    code, _, err = invoke(runner, "ltm", "save", str(SESSION))
    assert code == 0, err
    assert server.requests("POST", "/v3/memories/add/")[0][2]["infer"] is False


def test_what_veadk_stored_is_found_listed_and_not_saved_twice(runner: CliRunner, server: Mem0Server) -> None:
    veadk_add(server, "user-42", ALLERGY)
    veadk_add(server, "user-7", "peanuts are my favourite snack")
    _, out, _ = invoke(runner, "--json", "ltm", "search", "peanuts", "-u", "user-42")
    assert [e["content"]["parts"][0]["text"] for e in json.loads(out)] == [ALLERGY]  # decoded, user-scoped
    _, out, _ = invoke(runner, "ltm", "list", "-u", "user-42")
    assert ALLERGY in out and "{" not in out
    _code, out, _ = invoke(runner, "--json", "ltm", "save", str(SESSION))
    assert json.loads(out)["totals"]["duplicates"] == 1 and not server.requests("POST", "/v3/memories/add/")


def test_an_index_is_said_to_be_ignored_once(
    runner: CliRunner, server: Mem0Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    from veadk_mem.ltm.backends import mem0

    monkeypatch.setattr(mem0, "_index_warned", False)
    veadk_add(server, "user-42", ALLERGY)
    code, _, err = invoke(runner, "ltm", "search", "peanuts", "-u", "user-42", "--app", "support_app")
    assert code == 0
    assert err.count("mem0 does not isolate memories by index: 'support_app'") == 1
    code, _, err = invoke(runner, "ltm", "search", "peanuts", "-u", "user-42", "--app", "support_app")
    assert "isolate" not in err  # once per process


# --- list, delete, forget -------------------------------------------------------------


def test_list_pages_through_everything_newest_first(runner: CliRunner, server: Mem0Server) -> None:
    for i in range(230):
        veadk_add(server, "user-42", f"fact number {i}")
    code, out, _ = invoke(runner, "--json", "ltm", "list", "-u", "user-42")
    texts = [e["content"]["parts"][0]["text"] for e in json.loads(out)]
    assert code == 0 and len(texts) == 230 and texts[0] == "fact number 229"
    assert len(server.requests("POST", "/v3/memories/")) == 3  # pages of 100
    _, out, _ = invoke(runner, "--json", "ltm", "list", "-u", "user-42", "-n", "2")
    assert len(json.loads(out)) == 2


def test_delete_by_id_by_batch_and_all(runner: CliRunner, server: Mem0Server) -> None:
    for text in ("one", "two", "three", "four"):
        veadk_add(server, "user-42", text)
    veadk_add(server, "user-7", "someone else's")
    ids = [m["id"] for m in server.state.of_user("user-42")]
    other = server.state.of_user("user-7")[0]["id"]

    code, _, err = invoke(runner, "ltm", "delete", "-u", "user-42", "--id", ids[0], "--yes")
    assert code == 0, err
    assert server.requests("DELETE", f"/v1/memories/{ids[0]}/")
    code, _, _ = invoke(runner, "ltm", "delete", "-u", "user-42", "--id", ids[1], "--id", ids[2], "--yes")
    batch = server.requests("DELETE", "/v1/batch/")[0][2]["memories"]
    assert code == 0 and sorted(m["memory_id"] for m in batch) == sorted(ids[1:3])
    code, _, _ = invoke(runner, "ltm", "delete", "-u", "user-42", "--id", other, "--yes")
    assert code == 3  # another user's memory is not found, and not deleted
    code, out, _ = invoke(runner, "--json", "ltm", "delete", "-u", "user-42", "--all", "--yes")
    assert code == 0 and json.loads(out)["deleted"] == 1
    assert server.requests("DELETE", "/v1/memories/")[0][2] == {"user_id": "user-42"}
    assert [m["id"] for m in server.state.memories.values()] == [other]


def test_forget_uses_the_user_delete(runner: CliRunner, server: Mem0Server, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SHORT_TERM_MEMORY_BACKEND", "local")  # no session database
    veadk_add(server, "user-42", "one")
    veadk_add(server, "user-42", "two")
    code, out, err = invoke(runner, "--json", "forget", "user-42", "--yes")
    assert code == 0, err
    assert json.loads(out)["deleted"]["memories"] == 2
    assert server.requests("DELETE", "/v1/memories/")[0][2] == {"user_id": "user-42"}
    assert not server.state.memories


# --- failures -------------------------------------------------------------------------


def test_a_rejected_key_is_exit_1_naming_the_variable(runner: CliRunner, server: Mem0Server) -> None:
    server.state.api_key = "another-key"
    code, _, err = invoke(runner, "ltm", "search", "peanuts", "-u", "user-42")
    assert code == 1
    assert "refused the API key (HTTP 401) while connecting" in err.strip().splitlines()[0]
    assert "check DATABASE_MEM0_API_KEY" in err


def test_a_403_on_a_call_names_the_variable_too(runner: CliRunner, server: Mem0Server) -> None:
    server.fail(403, times=1, path="/v3/memories/search/")
    code, _, err = invoke(runner, "ltm", "search", "peanuts", "-u", "user-42")
    assert code == 1 and "HTTP 403" in err and "DATABASE_MEM0_API_KEY" in err


def test_5xx_is_retried_then_reported(runner: CliRunner, server: Mem0Server) -> None:
    server.fail(503, times=10, path="/v3/memories/add/")
    code, out, _err = invoke(runner, "--json", "ltm", "save", str(SESSION))
    assert code == 1
    report = json.loads(out)
    assert report["totals"]["failed"] == 1
    assert "failed (HTTP 503) after 3 retries while saving: scripted failure 503" in report["sessions"][0]["error"]
    assert len(server.requests("POST", "/v3/memories/add/")) == 4


def test_a_malformed_reply_is_one_line(runner: CliRunner, server: Mem0Server) -> None:
    server.malformed("/v3/memories/search/")
    code, _, err = invoke(runner, "ltm", "search", "peanuts", "-u", "user-42")
    assert code == 1
    assert err.strip().splitlines()[0].endswith("sent a malformed reply while searching: the reply is not JSON")
    assert len(err.strip().splitlines()) == 2  # the error and its hint


def test_a_reply_of_the_wrong_shape_is_malformed(runner: CliRunner, server: Mem0Server) -> None:
    server.state.faults.append(hosted_fault(b'{"results": "nope"}', "/v3/memories/search/"))
    code, _, err = invoke(runner, "ltm", "search", "peanuts", "-u", "user-42")
    assert code == 1 and "malformed reply while searching: unexpected dict" in err


def hosted_fault(body: bytes, path: str) -> object:
    from mem0_server import Fault

    return Fault(200, 1, path, body)


def test_an_unreachable_platform_names_the_url_variable(runner: CliRunner, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LONG_TERM_MEMORY_BACKEND", "mem0")
    monkeypatch.setenv("DATABASE_MEM0_API_KEY", KEY)
    monkeypatch.setenv("DATABASE_MEM0_BASE_URL", "http://127.0.0.1:9")  # discard port: refused
    monkeypatch.setattr(Mem0Backend, "retry_delays", (0.01,))  # a refused connection is retried, briefly
    code, _, err = invoke(runner, "ltm", "search", "peanuts", "-u", "user-42")
    assert code == 1 and "cannot reach Mem0 at http://127.0.0.1:9" in err and "DATABASE_MEM0_BASE_URL" in err


def test_no_key_is_bad_input_and_iam_keys_are_not_supported(runner: CliRunner, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LONG_TERM_MEMORY_BACKEND", "mem0")
    code, _, err = invoke(runner, "ltm", "search", "peanuts", "-u", "user-42")
    assert code == 2 and "no Mem0 API key: set DATABASE_MEM0_API_KEY" in err
    monkeypatch.setenv("DATABASE_MEM0_API_KEY_ID", "key-id-1")
    code, _, err = invoke(runner, "ltm", "search", "peanuts", "-u", "user-42")
    assert code == 4 and "Volcengine IAM" in err and "set DATABASE_MEM0_API_KEY" in err


def test_a_missing_sdk_names_the_extra(runner: CliRunner, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LONG_TERM_MEMORY_BACKEND", "mem0")
    monkeypatch.setenv("DATABASE_MEM0_API_KEY", KEY)
    monkeypatch.setitem(sys.modules, "mem0.client.main", None)
    code, _, err = invoke(runner, "ltm", "search", "peanuts", "-u", "user-42")
    assert code == 4 and "mem0ai is not installed" in err and "veadk-mem[mem0]" in err


# --- health (for vmem doctor) ---------------------------------------------------------


def _backend(index: str = "default_app") -> object:
    from veadk_mem.ltm.backends.mem0 import Mem0Backend

    return Mem0Backend(index, settings=load_settings().settings)


def test_health_reports_the_platform_without_the_key(server: Mem0Server) -> None:
    veadk_add(server, "user-42", "one")
    backend = _backend("support_app")
    health = asyncio.run(backend.health("user-42"))  # type: ignore[attr-defined]
    assert health.target == server.url and health.memories == 1 and not health.problems
    notes = " | ".join(health.notes)
    assert "API key: set (DATABASE_MEM0_API_KEY), accepted" in notes and "project proj-test" in notes
    assert "'support_app' is not sent" in notes
    assert KEY not in repr(health)


def test_health_raises_naming_the_variable(server: Mem0Server, monkeypatch: pytest.MonkeyPatch) -> None:
    server.state.api_key = "rotated"
    with pytest.raises(StoreError) as caught:
        asyncio.run(_backend().health())  # type: ignore[attr-defined]
    message = caught.value.message
    assert "refused the API key" in message and message.endswith("check DATABASE_MEM0_API_KEY")
    monkeypatch.delenv("DATABASE_MEM0_API_KEY")
    with pytest.raises(BadInput):
        asyncio.run(_backend().health())  # type: ignore[attr-defined]
    monkeypatch.setenv("DATABASE_MEM0_PROJECT_ID", "p-1")
    with pytest.raises(NotSupported):
        asyncio.run(_backend().health())  # type: ignore[attr-defined]


def test_counting_requests_for_a_session(server: Mem0Server) -> None:
    """What a 20-event session costs: one list (dedupe), one add per kept memory, one ping."""
    from veadk_mem.events import Content, Event, Part, Session
    from veadk_mem.ltm.facade import LongTermMemory

    events = [
        Event(
            id=f"e{i}",
            author="user" if i % 2 == 0 else "agent",
            content=Content(role="user" if i % 2 == 0 else "model", parts=[Part(text=f"message {i}")]),
        )
        for i in range(20)
    ]
    session = Session(id="s-20", app_name="default_app", user_id="user-42", events=events)
    ltm = LongTermMemory.from_settings(load_settings().settings)

    async def go() -> int:
        report = await ltm.add_session_to_memory(session)
        assert report.saved == 10
        requests = ltm.backend_for(None).requests  # type: ignore[attr-defined]
        await ltm.close()
        return int(requests)

    assert asyncio.run(go()) == 1 + 1 + 10


# --- as a target and a source of `ltm import` / `ltm export` (issue 11) ----------------------


def test_local_export_imports_into_mem0_and_exports_back(
    runner: CliRunner, server: Mem0Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Original strings go in (the platform may rewrite them: its inference is its own); a second
    import stores nothing; an export from mem0 lists what the platform holds for the user."""
    local = {"LONG_TERM_MEMORY_BACKEND": "local", "MODEL_EMBEDDING_PROVIDER": "hash"}
    saved = runner.invoke(app, ["ltm", "save", str(SESSION)], env=local)
    assert saved.exit_code == 0, saved.stderr
    backup = tmp_path / "local.jsonl"
    exported = runner.invoke(app, ["ltm", "export", "-u", "user-42", "-o", str(backup)], env=local)
    assert exported.exit_code == 0, exported.stderr
    code, out, err = invoke(runner, "--json", "ltm", "import", str(backup), "--backend", "mem0")
    assert code == 0, err
    assert json.loads(out)["saved"] == 1
    code, out, _ = invoke(runner, "--json", "ltm", "import", str(backup), "--backend", "mem0")
    assert json.loads(out)["saved"] == 0 and json.loads(out)["duplicates"] == 1
    back = tmp_path / "mem0.jsonl"
    code, _, err = invoke(runner, "ltm", "export", "-u", "user-42", "--index", "ltm_demo", "-o", str(back))
    assert code == 0, err
    lines = [json.loads(x) for x in back.read_text().splitlines()]
    assert lines[0]["backend"] == "mem0" and len(lines) == 2
    assert ALLERGY in lines[1]["text"]


def test_provenance_travels_in_the_metadata_and_agent_memories_are_not_recorded(
    runner: CliRunner, server: Mem0Server
) -> None:
    # #42 item 1: what vmem saves carries its source in Mem0's metadata; what VeADK saved has none
    code, _, err = invoke(runner, "ltm", "save", str(SESSION))
    assert code == 0, err
    meta = server.requests("POST", "/v3/memories/add/")[0][2]["metadata"]
    assert meta["session_id"] == "session-1" and meta["policy"] == "default" and meta["user_id"] == "user-42"
    assert json.loads(meta["event_ids"]) and isinstance(meta["saved_at"], float) and meta["vmem_version"]
    veadk_add(server, "user-42", "I like trains")
    code, out, err = invoke(runner, "--json", "ltm", "list", "-u", "user-42")
    assert code == 0, err
    sources = {e["content"]["parts"][0]["text"]: e["source"] for e in json.loads(out)}
    assert sources["I like trains"] is None
    assert sources[ALLERGY]["session_id"] == "session-1" and sources[ALLERGY]["policy"] == "default"
    code, out, _ = invoke(runner, "ltm", "list", "-u", "user-42", "--tsv")
    rows = [line.split("\t") for line in out.splitlines()]
    source_at = rows[0].index("source")
    assert sorted(r[source_at] for r in rows[1:])[-1] == "not recorded"
    assert any(r[source_at].startswith("default: session-1/") for r in rows[1:])


def test_ltm_edit_with_inference_off_replaces_the_memory_and_with_it_on_is_exit_4(
    runner: CliRunner, server: Mem0Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`ltm edit` (#42 item 5): Mem0 keeps text verbatim only with its inference off; then the
    memory is replaced by delete-and-add, else exit 4 saying how to turn it off."""
    code, _, err = invoke(runner, "ltm", "save", str(SESSION), "--no-infer")
    assert code == 0, err
    _, out, _ = invoke(runner, "--json", "ltm", "list", "-u", "user-42")
    old = json.loads(out)[0]
    code, _, err = invoke(runner, "ltm", "edit", old["id"], "-u", "user-42", "--text", "I am allergic to hazelnuts")
    assert code == 4 and "mem0 backend cannot edit" in err and "DATABASE_MEM0_INFER=false" in err
    monkeypatch.setenv("DATABASE_MEM0_INFER", "false")
    code, out, err = invoke(runner, "--json", "ltm", "edit", old["id"], "-u", "user-42", "--text", "hazelnuts")
    assert code == 0, err
    new_id = json.loads(out)["new_id"]
    _, out, _ = invoke(runner, "--json", "ltm", "list", "-u", "user-42")
    listed = {m["id"]: m for m in json.loads(out)}
    assert old["id"] not in listed and listed[new_id]["content"]["parts"][0]["text"] == "hazelnuts"
    assert server.requests("POST", "/v3/memories/add/")[-1][2]["infer"] is False
