"""Erasure that follows a session into memory, and `vmem ltm show` (#42 items 2 and 3).

Sessions are written by the real google-adk (`DatabaseSessionService`) into sqlite, PostgreSQL
and MariaDB; memories are saved by `vmem ltm save --from-store` (with provenance) and, for the
memories an agent saves itself, as records that name no session (what VeADK's stores hold).
The VeADK-written case, through VeADK 1.1.19's own backends, is tests/test_erasure_veadk.py.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from google.adk.events import Event
from google.adk.sessions import DatabaseSessionService
from google.genai import types
from typer.testing import CliRunner

from veadk_mem.cli.app import app
from veadk_mem.config import load_settings
from veadk_mem.ltm.base import MemoryRecord, content_hash
from veadk_mem.ltm.facade import LongTermMemory

APP = "shop"
T0 = 1_790_000_000.0


def user_string(text: str) -> str:
    """The memory string VeADK's default policy makes of a user's text event (google-genai's field order)."""
    return json.dumps({"parts": [{"text": text}], "role": "user"}, ensure_ascii=False)


def adk_write(url: str, sessions: dict[tuple[str, str], list[str]], app_name: str = APP) -> None:
    """Sessions {(user, id): texts} through ADK's own service: a user event per text, each followed by a reply."""

    async def go() -> None:
        service = DatabaseSessionService(url)
        try:
            for (user, sid), texts in sessions.items():
                session = await service.create_session(app_name=app_name, user_id=user, session_id=sid)
                for n, text in enumerate(texts):
                    said = types.Content(role="user", parts=[types.Part(text=text)])
                    reply = types.Content(role="model", parts=[types.Part(text=f"noted ({n})")])
                    await service.append_event(
                        session, Event(author="user", invocation_id=f"i{n}", content=said, timestamp=T0 + 2 * n)
                    )
                    await service.append_event(
                        session, Event(author="agent", invocation_id=f"i{n}", content=reply, timestamp=T0 + 2 * n + 1)
                    )
        finally:
            await service.close()

    asyncio.run(go())


def adk_sessions(url: str, user: str, app_name: str = APP) -> list[str]:
    async def go() -> list[str]:
        service = DatabaseSessionService(url)
        try:
            listed = await service.list_sessions(app_name=app_name, user_id=user)
            return sorted(s.id for s in listed.sessions)
        finally:
            await service.close()

    return asyncio.run(go())


@pytest.fixture(params=["sqlite", "postgresql", "mysql"])
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """An empty session database of each kind ADK supports."""
    if request.param == "sqlite":
        return f"sqlite+aiosqlite:///{tmp_path / 'sessions.db'}"
    return str(request.getfixturevalue("pg_url" if request.param == "postgresql" else "mysql_url"))


@pytest.fixture
def env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    values = {
        "LONG_TERM_MEMORY_BACKEND": "local",
        "LONG_TERM_MEMORY_LOCAL_PATH": str(tmp_path / "ltm.db"),
        "MODEL_EMBEDDING_PROVIDER": "hash",
    }
    for k, v in values.items():
        monkeypatch.setenv(k, v)
    return values


def cli(*args: str, input: str | None = None) -> tuple[int, str, str]:
    result = CliRunner().invoke(app, list(args), input=input)
    return result.exit_code, result.stdout, result.stderr


def save_from_store(db: str, user: str, sid: str, policy: str = "default") -> None:
    code, _, err = cli("ltm", "save", "--from-store", APP, user, sid, "--db-url", db, "--policy", policy)
    assert code == 0, err


def facade() -> LongTermMemory:
    return LongTermMemory.from_settings(load_settings().settings)


def agent_saved(user: str, texts: list[str], index: str = APP) -> list[str]:
    """Memories as an agent saves them: the policy's strings, no session named, no provenance."""

    async def go() -> list[str]:
        async with facade() as ltm:
            records = [MemoryRecord(text=user_string(t), user_id=user) for t in texts]
            return await ltm.save_records(user, records, index)

    return asyncio.run(go())


def memories(user: str, index: str = APP) -> list[dict[str, Any]]:
    async def go() -> list[dict[str, Any]]:
        async with facade() as ltm:
            return await ltm.list_memories(app_name=index, user_id=user)

    return asyncio.run(go())


def texts_of(entries: list[dict[str, Any]]) -> list[str]:
    return sorted(e["content"]["parts"][0]["text"] for e in entries)


# --- vmem ltm show -----------------------------------------------------------------------


def test_show_names_the_session_event_and_why(tmp_path: Path, env: dict[str, str]) -> None:
    db = f"sqlite+aiosqlite:///{tmp_path / 's.db'}"
    adk_write(db, {("ana", "s1"): ["I am allergic to peanuts", "my city is Lisbon"]})
    save_from_store(db, "ana", "s1")
    [entry] = [e for e in memories("ana") if "peanuts" in e["content"]["parts"][0]["text"]]
    code, out, err = cli("ltm", "show", entry["id"], "--user", "ana", "--db-url", db, "--json")
    assert code == 0, err
    shown = json.loads(out)
    assert shown["id"] == entry["id"] and shown["matched_by"] == "provenance"
    assert shown["source"]["session_id"] == "s1" and shown["source"]["policy"] == "default"
    [event] = shown["events"]
    assert event["event_id"] == shown["source"]["event_ids"][0] and event["author"] == "user"
    assert event["decision"] == "saved" and event["same_text"] is True
    assert "role user" in event["reason"]
    assert shown["session_database"]["read"] is True
    # for people: the fields, the event, the reason
    code, out, err = cli("ltm", "show", entry["id"], "-u", "ana", "--db-url", db)
    assert code == 0, err
    assert "I am allergic to peanuts" in out and "ana/s1" in out and "saved" in out


def test_show_without_provenance_matches_by_content_hash(tmp_path: Path, env: dict[str, str]) -> None:
    db = f"sqlite+aiosqlite:///{tmp_path / 's.db'}"
    adk_write(db, {("bo", "s7"): ["I keep bees"], ("bo", "s8"): ["something else"]})
    [memory_id] = agent_saved("bo", ["I keep bees"])
    code, out, err = cli("ltm", "show", memory_id, "-u", "bo", "--db-url", db, "--json")
    assert code == 0, err
    shown = json.loads(out)
    assert shown["source"] is None and shown["matched_by"] == "content hash"
    assert [(e["session_id"], e["decision"], e["same_text"]) for e in shown["events"]] == [("s7", "saved", True)]
    code, out, _ = cli("ltm", "show", memory_id, "-u", "bo", "--db-url", db)
    assert "not recorded; matched by content hash: s7/" in out


def test_show_without_a_session_database_says_source_not_recorded(env: dict[str, str], tmp_path: Path) -> None:
    [memory_id] = agent_saved("cy", ["I sing"])
    code, out, err = cli("ltm", "show", memory_id, "--db-url", str(tmp_path / "none.db"), "--json")
    assert code == 0, err  # without --user: the local store can look in every user's memories
    shown = json.loads(out)
    assert shown["user_id"] == "cy" and shown["events"] == [] and shown["matched_by"] is None
    assert shown["session_database"]["read"] is False
    code, out, _ = cli("ltm", "show", memory_id, "--db-url", str(tmp_path / "none.db"))
    assert "not recorded" in out


def test_show_of_an_unknown_id_is_exit_3(env: dict[str, str]) -> None:
    agent_saved("cy", ["I sing"])
    code, _, err = cli("ltm", "show", "no-such-id", "-u", "cy")
    assert code == 3 and "no-such-id" in err
    code, _, err = cli("ltm", "show", "no-such-id")
    assert code == 3


# --- erasure -----------------------------------------------------------------------------


def test_delete_with_memories_erases_vmem_and_agent_memories_and_verifies(db_url: str, env: dict[str, str]) -> None:
    adk_write(
        db_url,
        {
            ("dee", "gone"): ["I was born in Porto", "my bank is Acme"],
            ("dee", "stays"): ["I play chess"],
        },
    )
    save_from_store(db_url, "dee", "gone")
    save_from_store(db_url, "dee", "stays")
    agent_saved("dee", ["my bank is Acme"])  # the same string again: one memory (dedupe by hash)
    agent_saved("dee", ["I was born in Porto", "an unrelated memory"], index="other_app")  # another app's index
    before = memories("dee")
    assert len(before) == 3

    code, out, err = cli(
        "session", "delete", APP, "dee", "gone", "--with-memories", "--db-url", db_url, "--dry-run", "--json"
    )
    assert code == 0, err
    plan = json.loads(out)
    assert plan["dry_run"] is True and plan["deleted"] is None
    assert sorted(m["text"] for m in plan["memories"]) == ["I was born in Porto", "my bank is Acme"]
    assert {m["matched_by"] for m in plan["memories"]} == {"provenance"}
    assert [s["id"] for s in plan["sessions"]["sessions"]] == ["gone"] and plan["sessions"]["event_count"] == 4
    assert len(memories("dee")) == 3 and adk_sessions(db_url, "dee") == ["gone", "stays"]  # a dry run changes nothing

    code, out, err = cli(
        "session", "delete", APP, "dee", "gone", "--with-memories", "--db-url", db_url, "--yes", "--json"
    )
    assert code == 0, err
    receipt = json.loads(out)
    assert receipt["deleted"] == {"sessions": 1, "memories": 2}
    assert receipt["verification"]["clean"] is True and receipt["verification"]["checked"] == 2
    assert texts_of(memories("dee")) == ["I play chess"]
    assert texts_of(memories("dee", "other_app")) == ["I was born in Porto", "an unrelated memory"]  # not this app's
    assert adk_sessions(db_url, "dee") == ["stays"]  # ADK itself no longer finds the session


def test_an_agent_saved_memory_is_found_by_content_hash(tmp_path: Path, env: dict[str, str]) -> None:
    db = f"sqlite+aiosqlite:///{tmp_path / 's.db'}"
    adk_write(db, {("eve", "s1"): ["I am vegan", "my sister is Kim"], ("eve", "s2"): ["I ski"]})
    agent_saved("eve", ["I am vegan", "my sister is Kim", "I ski"])
    code, out, err = cli("forget", "eve", "--session", "s1", "--db-url", db, "--yes", "--json")
    assert code == 0, err
    receipt = json.loads(out)
    assert {m["matched_by"] for m in receipt["memories"]} == {"content hash"}
    assert {m["events"][0] for m in receipt["memories"]} <= {e for m in receipt["memories"] for e in m["events"]}
    assert receipt["deleted"] == {"sessions": 1, "memories": 2} and receipt["verification"]["clean"]
    assert texts_of(memories("eve")) == ["I ski"]
    assert adk_sessions(db, "eve") == ["s2"]


def test_a_string_another_session_also_made_is_kept_until_both_go(tmp_path: Path, env: dict[str, str]) -> None:
    db = f"sqlite+aiosqlite:///{tmp_path / 's.db'}"
    adk_write(db, {("fay", "a"): ["I like tea", "only in a"], ("fay", "b"): ["I like tea"]})
    save_from_store(db, "fay", "a")
    save_from_store(db, "fay", "b")  # "I like tea" is already there: saved once, provenance names session a
    assert texts_of(memories("fay")) == ["I like tea", "only in a"]
    code, out, err = cli("session", "delete", APP, "fay", "a", "--with-memories", "--db-url", db, "-y", "--json")
    assert code == 0, err
    receipt = json.loads(out)
    assert [m["text"] for m in receipt["memories"]] == ["only in a"]
    [kept] = receipt["kept"]
    assert kept["text"] == "I like tea" and "shop/fay/b" in kept["kept"]
    assert texts_of(memories("fay")) == ["I like tea"]
    code, out, err = cli("session", "delete", APP, "fay", "b", "--with-memories", "--db-url", db, "-y", "--json")
    assert code == 0, err
    assert json.loads(out)["deleted"]["memories"] == 1 and memories("fay") == []


def test_delete_with_memories_by_filter_and_every_preset(tmp_path: Path, env: dict[str, str]) -> None:
    db = f"sqlite+aiosqlite:///{tmp_path / 's.db'}"
    adk_write(db, {("gus", "old1"): ["old fact one"], ("gus", "old2"): ["old fact two"]})
    save_from_store(db, "gus", "old1", policy="all")  # the agent's replies kept too, with the author in the string
    agent_saved("gus", ["old fact two"])
    code, out, err = cli(
        "session", "delete", "--app", APP, "--user", "gus", "--with-memories", "--db-url", db, "--dry-run", "--json"
    )
    assert code == 0, err
    found = sorted(m["text"] for m in json.loads(out)["memories"])
    assert found == ["noted (0)", "old fact one", "old fact two"]  # old1's by provenance, old2's by hash
    code, out, err = cli(
        "session", "delete", "--app", APP, "--older-than", "1d", "--with-memories", "--policy", "all-presets",
        "--db-url", db, "-y", "--json",
    )  # fmt: skip
    assert code == 0, err
    receipt = json.loads(out)
    assert set(receipt["policies"]) >= {"default", "all"}
    assert receipt["deleted"] == {"sessions": 2, "memories": 3} and memories("gus") == []


def test_an_unknown_session_id_deletes_nothing_anywhere(tmp_path: Path, env: dict[str, str]) -> None:
    db = f"sqlite+aiosqlite:///{tmp_path / 's.db'}"
    adk_write(db, {("hal", "s1"): ["I fly kites"]})
    save_from_store(db, "hal", "s1")
    code, _, err = cli("session", "delete", APP, "hal", "s1", "nope", "--with-memories", "--db-url", db, "-y")
    assert code == 3 and "nope" in err
    code, _, err = cli("forget", "hal", "--session", "nope", "--db-url", db, "-y")
    assert code == 3 and "nope" in err
    assert len(memories("hal")) == 1 and adk_sessions(db, "hal") == ["s1"]


def test_an_unreachable_long_term_store_deletes_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed when the block ends: nothing listens there
    db = f"sqlite+aiosqlite:///{tmp_path / 's.db'}"
    adk_write(db, {("ivy", "s1"): ["I draw"]})
    monkeypatch.setenv("LONG_TERM_MEMORY_BACKEND", "redis")
    monkeypatch.setenv("DATABASE_REDIS_URL", f"redis://127.0.0.1:{port}/0")
    monkeypatch.setenv("MODEL_EMBEDDING_PROVIDER", "hash")
    code, out, err = cli("session", "delete", APP, "ivy", "s1", "--with-memories", "--db-url", db, "-y")
    assert code == 1 and len(err.strip().splitlines()) <= 2, err
    assert out == "" and adk_sessions(db, "ivy") == ["s1"]


def test_a_memory_still_there_after_the_delete_fails_the_verification(
    tmp_path: Path, env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from veadk_mem.ltm.backends.local import LocalBackend

    db = f"sqlite+aiosqlite:///{tmp_path / 's.db'}"
    adk_write(db, {("jo", "s1"): ["I code", "I read"]})
    save_from_store(db, "jo", "s1")
    real = LocalBackend.delete_memories

    async def loses_one(self: LocalBackend, user_id: str, ids: list[str]) -> int:
        return await real(self, user_id, ids[1:])  # a store that drops one delete on the floor

    monkeypatch.setattr(LocalBackend, "delete_memories", loses_one)
    code, out, err = cli("session", "delete", APP, "jo", "s1", "--with-memories", "--db-url", db, "-y", "--json")
    assert code == 1
    receipt = json.loads(out)
    assert receipt["verification"]["clean"] is False
    [left] = receipt["verification"]["left"]
    assert left["found_by"] in ("listing", "search") and left["id"] in {m["id"] for m in receipt["memories"]}
    assert "still there after the delete" in err


def test_forget_session_needs_the_app_when_the_id_is_in_two(tmp_path: Path, env: dict[str, str]) -> None:
    db = f"sqlite+aiosqlite:///{tmp_path / 's.db'}"
    adk_write(db, {("kai", "s1"): ["one"]})
    adk_write(db, {("kai", "s1"): ["two"]}, app_name="other")
    code, _, err = cli("forget", "kai", "--session", "s1", "--db-url", db, "-y")
    assert code == 2 and "--app" in err
    code, out, err = cli("forget", "kai", "--session", "s1", "--app", "other", "--db-url", db, "--dry-run")
    assert code == 0, err
    assert "dry run: nothing deleted" in err and "s1" in out


def test_the_tos_context_backend_cannot_erase_exit_4(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from veadk_mem.ltm.backends.tos_context import TosContextBackend
    from veadk_mem.ltm.base import Capability

    assert Capability.DELETE not in TosContextBackend.capabilities
    db = f"sqlite+aiosqlite:///{tmp_path / 's.db'}"
    adk_write(db, {("lu", "s1"): ["I swim"]})
    monkeypatch.setenv("LONG_TERM_MEMORY_BACKEND", "tos_context")
    code, _, err = cli("session", "delete", APP, "lu", "s1", "--with-memories", "--db-url", db, "-y")
    assert code == 4 and "tos_context" in err
    assert adk_sessions(db, "lu") == ["s1"]


def test_the_memory_hash_is_the_policy_string(tmp_path: Path) -> None:
    """The strings erasure recomputes are `policy test`'s, byte for byte (so they are VeADK's)."""
    from veadk_mem.events import parse_session
    from veadk_mem.policy import memory_strings, resolve_policy

    body = {"id": "s", "appName": APP, "userId": "u", "events": [
        {"id": "e1", "author": "user", "content": {"role": "user", "parts": [{"text": "héllo ☃"}]}},
    ]}  # fmt: skip
    [memory] = memory_strings(parse_session(body, "t").events, resolve_policy("default"))
    assert content_hash(memory) == content_hash(user_string("héllo ☃"))


# --- session prune --with-memories (#43 item 3) ---------------------------------------------


def test_prune_without_with_memories_leaves_memories(
    tmp_path: Path, env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    db = f"sqlite+aiosqlite:///{tmp_path / 's.db'}"
    adk_write(db, {("max", "old"): ["I own a boat"]})  # events (and so the session) from T0: months ago
    save_from_store(db, "max", "old")
    monkeypatch.setenv("VMEM_RETENTION_MAX_AGE", "30d")
    code, out, err = cli("session", "prune", "--db-url", db, "-y", "--json")
    assert code == 0, err
    assert json.loads(out)["deleted"]["sessions"] == 1 and "memories" not in json.loads(out)
    assert texts_of(memories("max")) == ["I own a boat"]


def test_prune_with_memories_takes_those_of_pruned_sessions(
    tmp_path: Path, env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    db = f"sqlite+aiosqlite:///{tmp_path / 's.db'}"
    adk_write(db, {("ned", "old"): ["I own a boat", "my dog is Rex"]})
    save_from_store(db, "ned", "old")
    agent_saved("ned", ["I keep my own memory"])  # made by no session: stays
    monkeypatch.setenv("VMEM_RETENTION_MAX_AGE", "30d")
    code, out, err = cli("session", "prune", "--with-memories", "--db-url", db, "--dry-run", "--json")
    assert code == 0, err
    plan = json.loads(out)
    assert plan["dry_run"] is True and sorted(m["text"] for m in plan["memories"]["memories"]) == [
        "I own a boat",
        "my dog is Rex",
    ]
    assert len(memories("ned")) == 3
    code, out, err = cli("session", "prune", "--with-memories", "--db-url", db, "-y", "--json")
    assert code == 0, err
    done = json.loads(out)
    assert done["deleted"]["sessions"] == 1 and done["memories"]["deleted"]["memories"] == 2
    assert done["memories"]["verification"]["clean"] is True
    assert texts_of(memories("ned")) == ["I keep my own memory"]


def test_prune_with_memories_takes_those_of_trimmed_events_only(
    tmp_path: Path, env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    db = f"sqlite+aiosqlite:///{tmp_path / 's.db'}"
    adk_write(db, {("oli", "long"): ["first thing", "second thing", "third thing"]})  # 6 events, 3 invocations
    adk_write(db, {("oli", "other"): ["second thing"]}, app_name="elsewhere")  # another app: does not count
    save_from_store(db, "oli", "long")
    agent_saved("oli", ["third thing"], index="shop")  # already there (same hash): nothing new
    monkeypatch.setenv("VMEM_RETENTION_KEEP_LAST_EVENTS", "2")
    code, out, err = cli("session", "prune", "--with-memories", "--app", APP, "--db-url", db, "-y", "--json")
    assert code == 0, err
    done = json.loads(out)
    assert done["trimmed"] == {"sessions": 1, "events": 4}
    assert sorted(m["text"] for m in done["memories"]["memories"]) == ["first thing", "second thing"]
    assert done["memories"]["verification"]["clean"] is True
    assert texts_of(memories("oli")) == ["third thing"]  # the kept invocation's memory stays


def test_an_erasure_writes_its_receipt_into_the_history(tmp_path: Path, env: dict[str, str]) -> None:
    db = f"sqlite+aiosqlite:///{tmp_path / 's.db'}"
    adk_write(db, {("pia", "s1"): ["I knit"]})
    save_from_store(db, "pia", "s1")
    code, out, err = cli("forget", "pia", "--session", "s1", "--db-url", db, "-y", "--json")
    assert code == 0, err
    code, out, err = cli("history", "--json")
    assert code == 0, err
    [entry] = [e for e in json.loads(out) if e["command"] == "forget --session"]
    code, out, err = cli("history", "show", str(entry["n"] if "n" in entry else entry["id"]), "--json")
    assert code == 0, err
    receipt = json.loads(out)["receipt"]
    assert receipt["deleted"] == {"sessions": 1, "memories": 1} and receipt["verification"]["clean"] is True
    assert receipt["sessions"]["ids"] == ["shop/pia/s1"] and receipt["memories_total"] == 1


def test_the_history_keeps_no_erased_text_and_caps_the_receipt(
    tmp_path: Path, env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The history is append-only: an erased memory's text stored there could never be erased."""
    import sqlite3

    from veadk_mem.ops import erasure
    from veadk_mem.ops.history import history_path

    monkeypatch.setattr(erasure, "MAX_IDS", 2, raising=False)
    db = f"sqlite+aiosqlite:///{tmp_path / 's.db'}"
    secrets = ["my passport is X123", "my PIN is 4711", "I live at 5 Elm St"]
    adk_write(db, {("quin", "s1"): secrets})
    save_from_store(db, "quin", "s1")
    code, out, err = cli("forget", "quin", "--session", "s1", "--db-url", db, "-y", "--json")
    assert code == 0, err
    assert sorted(m["text"] for m in json.loads(out)["memories"]) == sorted(secrets)  # the operator sees them
    with sqlite3.connect(history_path(load_settings().settings.history)) as conn:
        stored = "\n".join(str(row) for row in conn.execute("SELECT * FROM changes"))
    for text in secrets:
        assert text not in stored and json.dumps(text)[1:-1] not in stored
    code, out, err = cli("history", "--json")
    assert code == 0, err
    [entry] = [e for e in json.loads(out) if e["command"] == "forget --session"]
    assert "receipt" not in entry  # the listing does not read receipts
    receipt = json.loads(cli("history", "show", str(entry["n"]), "--json")[1])["receipt"]
    assert len(receipt["memories"]) == 2 and receipt["memories_total"] == 3
    assert all(set(m) >= {"id", "content_hash", "index"} and "text" not in m for m in receipt["memories"])
    assert {m["content_hash"] for m in receipt["memories"]} <= {content_hash(user_string(t)) for t in secrets}


# --- review of #42: a memory another app's staying session makes -------------------------------


def test_a_memory_whose_source_is_a_staying_session_of_another_app_stays(
    tmp_path: Path, env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """With `long_term_memory.index` set every app shares one index: the memory saved from appA/sA
    (its provenance says so) is not appB/sB's to take, though appB/sB makes the same string."""
    monkeypatch.setenv("LONG_TERM_MEMORY_INDEX", "shared")
    db = f"sqlite+aiosqlite:///{tmp_path / 's.db'}"
    adk_write(db, {("u1", "sA"): ["I like green tea"]}, app_name="appA")
    adk_write(db, {("u1", "sB"): ["I like green tea"]}, app_name="appB")
    for app_name, sid in (("appA", "sA"), ("appB", "sB")):
        code, _, err = cli("ltm", "save", "--from-store", app_name, "u1", sid, "--db-url", db)
        assert code == 0, err
    assert len(memories("u1", "shared")) == 1  # saved once, from appA/sA (the first to make it)
    code, out, err = cli("session", "delete", "appB", "u1", "sB", "--with-memories", "--db-url", db, "-y", "--json")
    assert code == 0, err
    receipt = json.loads(out)
    assert receipt["memories"] == [] and receipt["deleted"] == {"sessions": 1, "memories": 0}
    [kept] = receipt["kept"]
    assert "appA/u1/sA" in kept["kept"]
    assert texts_of(memories("u1", "shared")) == ["I like green tea"]


def test_an_agent_saved_memory_another_app_in_the_shared_index_makes_is_kept(
    tmp_path: Path, env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """No recorded source: matched by content hash, and kept because appA/sA, which stays and
    whose app saves into the same shared index, makes the same string."""
    monkeypatch.setenv("LONG_TERM_MEMORY_INDEX", "shared")
    db = f"sqlite+aiosqlite:///{tmp_path / 's.db'}"
    adk_write(db, {("u1", "sA"): ["I like green tea"]}, app_name="appA")
    adk_write(db, {("u1", "sB"): ["I like green tea", "only in B"]}, app_name="appB")
    agent_saved("u1", ["I like green tea", "only in B"], index="shared")
    code, out, err = cli("forget", "u1", "--session", "sB", "--db-url", db, "-y", "--json")
    assert code == 0, err
    receipt = json.loads(out)
    assert [m["text"] for m in receipt["memories"]] == ["only in B"]
    [kept] = receipt["kept"]
    assert kept["text"] == "I like green tea" and "appA/u1/sA" in kept["kept"]
    assert texts_of(memories("u1", "shared")) == ["I like green tea"]


def adk_append(url: str, user: str, sid: str, text: str, at: float) -> None:
    """An agent resuming a session: one more user event through ADK's own service, from a thread of
    its own (the caller may be inside vmem's event loop, as a confirm callback is)."""

    async def go() -> None:
        service = DatabaseSessionService(url)
        try:
            session = await service.get_session(app_name=APP, user_id=user, session_id=sid)
            assert session is not None
            said = types.Content(role="user", parts=[types.Part(text=text)])
            event = Event(author="user", invocation_id="resumed", content=said, timestamp=at)
            await service.append_event(session, event)
        finally:
            await service.close()

    import threading

    worker = threading.Thread(target=lambda: asyncio.run(go()))
    worker.start()
    worker.join()


def test_a_session_resumed_while_the_question_waits_keeps_its_memories(tmp_path: Path, env: dict[str, str]) -> None:
    """The re-checking delete keeps a session an agent updated since the plan: its memories stay too
    (they went first, and the session that makes them was left)."""
    from veadk_mem.ops.erasure import erase
    from veadk_mem.sessions.records import SessionFilter
    from veadk_mem.sessions.store import SessionStore

    db = f"sqlite+aiosqlite:///{tmp_path / 's.db'}"
    adk_write(db, {("rae", "s1"): ["I collect stamps"], ("rae", "s2"): ["I grow figs"]})
    save_from_store(db, "rae", "s1")
    save_from_store(db, "rae", "s2")

    def resumed(_report: Any) -> None:
        adk_append(db, "rae", "s1", "back again", T0 + 100)

    async def go() -> Any:
        async with SessionStore(db) as store, facade() as ltm:
            flt = SessionFilter(app=APP, user="rae", older_than=86_400)
            return await erase(store, ltm, flt=flt, confirm=resumed)

    report = asyncio.run(go())
    assert [k.id for k in report.sessions.skipped] == ["s1"] and report.deleted_sessions == 1
    assert report.deleted_memories == 1 and [m.record.id for m in report.memories] != []
    [kept] = report.kept
    assert "shop/rae/s1" in kept.kept and "I collect stamps" in kept.record.text
    assert texts_of(memories("rae")) == ["I collect stamps"] and adk_sessions(db, "rae") == ["s1"]
    assert report.verification is not None and report.verification.clean


def test_prune_with_memories_keeps_those_of_a_session_resumed_after_the_plan(
    tmp_path: Path, env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from veadk_mem.ops.erasure import prune_erasure
    from veadk_mem.sessions.store import SessionStore

    db = f"sqlite+aiosqlite:///{tmp_path / 's.db'}"
    adk_write(db, {("sam", "s1"): ["I collect stamps"], ("sam", "s2"): ["I grow figs"]})
    save_from_store(db, "sam", "s1")
    save_from_store(db, "sam", "s2")
    monkeypatch.setenv("VMEM_RETENTION_MAX_AGE", "30d")

    def resumed(_plan: Any) -> None:
        adk_append(db, "sam", "s2", "back again", T0 + 100)  # still old: only the re-check sees it

    async def go() -> Any:
        async with SessionStore(db) as store, facade() as ltm:
            return await prune_erasure(store, ltm, load_settings().settings.retention, yes=True, confirm=resumed)

    pruned, report = asyncio.run(go())
    assert [k.id for k in pruned.deleted.skipped] == ["s2"]
    assert report.deleted_memories == 1 and [m.sessions for m in report.kept] == [["s2"]]
    assert texts_of(memories("sam")) == ["I grow figs"] and report.verification.clean


def test_forget_session_finds_a_session_whose_state_cannot_be_decoded(tmp_path: Path, env: dict[str, str]) -> None:
    """The key is looked up by id (a bounded query on the key columns), not among the user's listed
    sessions, which leave out one whose state does not decode: that one is erased all the same."""
    import sqlite3

    path = tmp_path / "s.db"
    db = f"sqlite+aiosqlite:///{path}"
    adk_write(db, {("tia", "bad"): ["I paint"], ("tia", "good"): ["I row"]})
    save_from_store(db, "tia", "bad")
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE sessions SET state = '{not json' WHERE id = 'bad'")
    code, out, err = cli("forget", "tia", "--session", "bad", "--db-url", db, "-y", "--json")
    assert code == 0, err
    receipt = json.loads(out)
    assert receipt["deleted"] == {"sessions": 1, "memories": 1}
    assert adk_sessions(db, "tia") == ["good"] and memories("tia") == []
    code, _, err = cli("forget", "tia", "--session", "bad", "--app", APP, "--db-url", db, "-y")
    assert code == 3 and "bad" in err
    code, _, err = cli("forget", "nobody", "--session", "good", "--db-url", db, "-y")
    assert code == 3 and "good" in err  # another user's session is not this user's


def test_a_session_delete_that_fails_after_the_memories_went_says_so_and_is_recorded(
    tmp_path: Path, env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another writer holds the session database: the memories went first, the session delete then
    fails. The message must not say nothing was changed, and the history records the memories."""
    import sqlite3

    path = tmp_path / "s.db"
    db = f"sqlite+aiosqlite:///{path}"
    adk_write(db, {("uma", "s1"): ["I sail"]})
    save_from_store(db, "uma", "s1")
    monkeypatch.setenv("VMEM_SQLITE_BUSY_TIMEOUT", "0.2")
    holder = sqlite3.connect(path, isolation_level=None)
    try:
        holder.execute("BEGIN IMMEDIATE")  # a writer's lock: reads go on, a delete waits and gives up
        code, _, err = cli("session", "delete", APP, "uma", "s1", "--with-memories", "--db-url", db, "-y")
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert code == 1 and "locked" in err, err
    assert "nothing was changed" not in err and "1 memory" in err
    assert memories("uma") == [] and adk_sessions(db, "uma") == ["s1"]
    code, out, _ = cli("history", "--json")
    [entry] = [e for e in json.loads(out) if e["command"] == "session delete --with-memories"]
    assert entry["outcome"] == "failed" and entry["counts"] == {"memories": 1}
    assert entry["ids"][0].startswith("memory shop/")
