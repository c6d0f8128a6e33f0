"""The openviking backend: contract tests of vmem through the real openviking-sdk client.

The client talks HTTP to `tests/openviking_server.py`, a local server following
OpenViking 0.5.2's envelopes and access rules.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import re
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from openviking_server import OpenvikingServer
from typer.testing import CliRunner

from veadk_mem.cli.app import app
from veadk_mem.config import load_settings
from veadk_mem.errors import BadInput, StoreError

pytestmark = pytest.mark.contract

KEY, USER = "ov-account-key-5678", "alice"
EXAMPLES = Path(__file__).resolve().parents[1] / "docs" / "examples" / "sessions"
SESSION = EXAMPLES / "ltm_demo-session-1.json"
ALLERGY = "Note this: I'm allergic to peanuts and I'm vegetarian."
REPLY = "Noted! I'll remember that you're allergic to peanuts and that you follow a vegetarian diet."


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch) -> Iterator[OpenvikingServer]:
    """A fresh fake OpenViking server, configured as the long-term memory; retries wait 10 ms."""
    from veadk_mem.ltm.backends import openviking

    monkeypatch.setattr(openviking.OpenvikingBackend, "retry_delays", (0.01, 0.01, 0.01))
    monkeypatch.setattr(openviking.OpenvikingBackend, "poll_interval", 0.01)
    monkeypatch.setattr(openviking, "_user_warned", False)
    monkeypatch.setenv("LONG_TERM_MEMORY_BACKEND", "openviking")
    monkeypatch.setenv("DATABASE_OPENVIKING_API_KEY", KEY)
    monkeypatch.setenv("DATABASE_OPENVIKING_USER_ID", USER)
    monkeypatch.setenv("OPENVIKING_CONFIG_FILE", "/nonexistent")  # the SDK's own config file stays out
    with OpenvikingServer({KEY: USER}) as srv:
        monkeypatch.setenv("DATABASE_OPENVIKING_URL", srv.url)
        yield srv


def invoke(runner: CliRunner, *args: str) -> tuple[int, str, str]:
    result = runner.invoke(app, list(args))
    assert KEY not in result.stdout + result.stderr
    assert "Traceback" not in result.stderr
    return result.exit_code, result.stdout, result.stderr


def veadk_name(app_name: str, user: str, peer: str, session: str) -> str:
    """VeADK's OpenViking session id, written out again from its definition."""

    def part(raw: str, fallback: str) -> str:
        clean = re.sub(r"[^A-Za-z0-9_.@-]+", "_", raw).strip("._-") or fallback
        return f"{clean[:48]}_{hashlib.sha256(raw.encode()).hexdigest()[:12]}"

    return "__".join(["veadk", part(app_name, "app"), part(user, "user"), part(peer, "peer"), part(session, "session")])


def test_save_makes_veadks_session_in_one_batch_then_search_finds_the_memory(
    runner: CliRunner, server: OpenvikingServer
) -> None:
    code, out, err = invoke(runner, "--json", "ltm", "save", str(SESSION))
    assert code == 0, err
    assert json.loads(out)["totals"]["saved"] == 2  # user and assistant, as VeADK keeps for openviking
    name = veadk_name("ltm_demo", USER, "user-42", "session-1")
    assert server.requests("POST", "/api/v1/sessions")[0][2] == {"session_id": name}
    [batch] = server.requests("POST", f"/api/v1/sessions/{name}/messages/batch")
    assert batch[2]["messages"] == [
        {"role": "user", "content": ALLERGY, "peer_id": "user-42"},
        {"role": "assistant", "content": REPLY, "peer_id": "user-42"},
    ]
    assert server.requests("POST", f"/api/v1/sessions/{name}/commit")[0][2] == {"keep_recent_count": 0}
    assert len([r for r in server.requests("GET") if r[1].startswith("/api/v1/tasks/")]) == 2  # polled to the end
    assert "waiting for the server to extract memories from 1 session(s)" in err

    code, out, err = invoke(runner, "--json", "ltm", "search", "peanuts vegetarian", "-u", "user-42")
    assert code == 0, err
    [entry] = json.loads(out)
    assert entry["content"]["parts"][0]["text"] == ALLERGY
    assert entry["custom_metadata"]["origin"]["uri"].startswith("viking://user/alice/peers/user-42/memories/")
    [find] = server.requests("POST", "/api/v1/search/find")
    assert find[2] == {
        "query": "peanuts vegetarian",
        "target_uri": "viking://user/alice/peers/user-42/memories",
        "limit": 5,
        "context_type": "memory",
    }
    assert find[3]["x-openviking-actor-peer"] == "user-42"


def test_a_replay_sends_nothing_the_session_holds(runner: CliRunner, server: OpenvikingServer) -> None:
    code, _, _ = invoke(runner, "ltm", "save", str(SESSION))
    assert code == 0
    code, out, _ = invoke(runner, "--json", "ltm", "save", str(SESSION))
    totals = json.loads(out)["totals"]
    assert code == 0 and totals["saved"] == 0 and totals["duplicates"] == 2
    assert len([r for r in server.requests("POST") if r[1].endswith("/messages/batch")]) == 1
    assert len(server.state.memories) == 1


def test_a_failed_extraction_is_reported(runner: CliRunner, server: OpenvikingServer) -> None:
    server.state.task_error = "llm returned {}"
    code, _, err = invoke(runner, "ltm", "save", str(SESSION))
    assert code == 1
    assert "OpenViking could not extract memories from session session-1: llm returned {}" in err


def test_memory_policy_from_the_environment(
    runner: CliRunner, server: OpenvikingServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    policy = {"self": {"enabled": False}, "peer": {"enabled": True}, "memory_types": ["events"]}
    monkeypatch.setenv("DATABASE_OPENVIKING_MEMORY_POLICY", json.dumps(policy))
    code, _, err = invoke(runner, "ltm", "save", str(SESSION))
    assert code == 0, err
    assert server.requests("POST", "/api/v1/sessions")[0][2]["memory_policy"] == policy
    monkeypatch.setenv("DATABASE_OPENVIKING_MEMORY_POLICY", "{self: off}")
    code, _, err = invoke(runner, "ltm", "search", "x", "-u", "user-42")
    assert code == 2 and "DATABASE_OPENVIKING_MEMORY_POLICY ([database.openviking] memory_policy): invalid JSON" in err


def test_search_keeps_one_hit_per_uri_with_the_best_score(runner: CliRunner, server: OpenvikingServer) -> None:
    invoke(runner, "ltm", "save", str(SESSION))
    server.state.duplicate_hits = True
    _, out, _ = invoke(runner, "--json", "ltm", "search", "peanuts", "-u", "user-42")
    [entry] = json.loads(out)
    # the server answered the memory twice, 0.5556 and 0.4556: one entry, the better score
    assert entry["custom_metadata"]["score"] == round(0.5 + 1 / 18, 4)


def test_access_denied_is_an_error_naming_the_user_variable(
    runner: CliRunner, server: OpenvikingServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DATABASE_OPENVIKING_USER_ID", "bob")  # not the user the key belongs to
    code, out, err = invoke(runner, "ltm", "search", "peanuts", "-u", "user-42")
    assert code == 1 and out == ""  # never an empty result shown as success
    assert (
        "refused the API key (HTTP 403) while searching: Access denied for viking://user/bob/peers/user-42/memories"
        in err
    )
    assert "check DATABASE_OPENVIKING_USER_ID" in err


def test_no_user_id_warns_and_lands_under_default(
    runner: CliRunner, server: OpenvikingServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("DATABASE_OPENVIKING_USER_ID")
    code, _, err = invoke(runner, "ltm", "search", "peanuts", "-u", "user-42")
    assert (
        "DATABASE_OPENVIKING_USER_ID is not set: memories are read and written under OpenViking user 'default'" in err
    )
    assert code == 1 and "Access denied for viking://user/default/peers/user-42/memories" in err


def test_list_and_delete(runner: CliRunner, server: OpenvikingServer) -> None:
    invoke(runner, "ltm", "save", str(EXAMPLES))
    code, out, _ = invoke(runner, "--json", "ltm", "list", "-u", "user-42")
    entries = json.loads(out)
    assert code == 0 and len(entries) >= 2
    assert all(e["id"].startswith("viking://user/alice/peers/user-42/memories/") for e in entries)
    code, out, err = invoke(runner, "--json", "ltm", "delete", "-u", "user-42", "--id", entries[0]["id"], "--yes")
    assert code == 0, err
    assert json.loads(out)["deleted"] == 1
    assert entries[0]["id"] not in server.state.memories
    assert server.requests("DELETE", "/api/v1/fs")[0][2]["uri"] == entries[0]["id"]


def test_forget_removes_the_peers_memories(
    runner: CliRunner, server: OpenvikingServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SHORT_TERM_MEMORY_BACKEND", "local")  # no session database
    invoke(runner, "ltm", "save", str(EXAMPLES))
    mine = [uri for uri in server.state.memories if "/peers/user-42/" in uri]
    others = [uri for uri in server.state.memories if "/peers/user-42/" not in uri]
    code, out, err = invoke(runner, "--json", "forget", "user-42", "--yes")
    assert code == 0, err
    assert json.loads(out)["deleted"]["memories"] == len(mine) > 0
    assert sorted(server.state.memories) == sorted(others)


def test_a_rejected_key_names_the_variable(runner: CliRunner, server: OpenvikingServer) -> None:
    server.state.keys = {"another": USER}
    code, _, err = invoke(runner, "ltm", "search", "peanuts", "-u", "user-42")
    assert code == 1 and "refused the API key (HTTP 401) while searching" in err
    assert "check DATABASE_OPENVIKING_API_KEY" in err


def test_a_malformed_reply_is_one_line(runner: CliRunner, server: OpenvikingServer) -> None:
    server.malformed("/api/v1/search/find")
    code, _, err = invoke(runner, "ltm", "search", "peanuts", "-u", "user-42")
    assert code == 1 and len(err.strip().splitlines()) == 2  # the error and its hint
    assert "sent a malformed reply while searching" in err


def test_an_unreachable_server_names_the_url_variable(runner: CliRunner, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LONG_TERM_MEMORY_BACKEND", "openviking")
    monkeypatch.setenv("DATABASE_OPENVIKING_API_KEY", KEY)
    monkeypatch.setenv("DATABASE_OPENVIKING_USER_ID", USER)
    monkeypatch.setenv("DATABASE_OPENVIKING_URL", "http://127.0.0.1:9")
    from veadk_mem.ltm.backends import openviking

    monkeypatch.setattr(openviking.OpenvikingBackend, "retry_delays", (0.01,))  # refused is retried, briefly
    code, _, err = invoke(runner, "ltm", "search", "peanuts", "-u", "user-42")
    assert code == 1 and "cannot reach OpenViking at http://127.0.0.1:9" in err
    assert "DATABASE_OPENVIKING_URL" in err


def test_missing_settings_are_bad_input(runner: CliRunner, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LONG_TERM_MEMORY_BACKEND", "openviking")
    code, _, err = invoke(runner, "ltm", "search", "peanuts", "-u", "user-42")
    assert code == 2 and "no OpenViking URL: set DATABASE_OPENVIKING_URL" in err
    monkeypatch.setenv("DATABASE_OPENVIKING_URL", "http://127.0.0.1:9")
    code, _, err = invoke(runner, "ltm", "search", "peanuts", "-u", "user-42")
    assert code == 2 and "set DATABASE_OPENVIKING_API_KEY" in err
    monkeypatch.setenv("DATABASE_OPENVIKING_USER_ID", "../etc")
    code, _, err = invoke(runner, "ltm", "search", "peanuts", "-u", "user-42")
    assert code == 2 and "DATABASE_OPENVIKING_USER_ID '../etc' cannot be an OpenViking path segment" in err


def test_a_missing_sdk_names_the_extra(runner: CliRunner, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LONG_TERM_MEMORY_BACKEND", "openviking")
    monkeypatch.setenv("DATABASE_OPENVIKING_URL", "http://127.0.0.1:9")
    monkeypatch.setenv("DATABASE_OPENVIKING_API_KEY", KEY)
    monkeypatch.setitem(sys.modules, "openviking_sdk", None)
    code, _, err = invoke(runner, "ltm", "search", "peanuts", "-u", "user-42")
    assert code == 4 and "openviking-sdk is not installed" in err and "veadk-mem[openviking]" in err


def _backend() -> object:
    from veadk_mem.ltm.backends.openviking import OpenvikingBackend

    return OpenvikingBackend("ltm_demo", settings=load_settings().settings)


def test_health_checks_the_server_key_and_user(server: OpenvikingServer, monkeypatch: pytest.MonkeyPatch) -> None:
    async def check() -> object:
        backend = _backend()
        try:
            return await backend.health("user-42")  # type: ignore[attr-defined]
        finally:
            await backend.close()  # type: ignore[attr-defined]

    health = asyncio.run(check())
    assert health.target == server.url and health.memories == 0  # type: ignore[attr-defined]
    assert "OpenViking user: alice" in health.notes and KEY not in repr(health)  # type: ignore[attr-defined]
    monkeypatch.setenv("DATABASE_OPENVIKING_USER_ID", "bob")
    with pytest.raises(StoreError) as caught:
        asyncio.run(check())
    assert "check DATABASE_OPENVIKING_USER_ID" in caught.value.message
    monkeypatch.delenv("DATABASE_OPENVIKING_URL")
    with pytest.raises(BadInput):
        asyncio.run(check())
