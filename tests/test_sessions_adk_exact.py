"""vmem's JSON is ADK's own dump, and a restore gives back the rows ADK wrote (issue 39, item 0).

Real google-adk writes a session holding every event kind it has into sqlite, PostgreSQL and
MariaDB. What vmem prints of it (`get --json`, `get --jsonl`, `export`) must equal, parsed and at
every depth, ADK's `model_dump(mode="json", by_alias=True, exclude_none=True)`; `export | import`
into each database must give back the source's rows (event_data, times, states), and
`session stats` the same totals.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import re
import sys
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from sessions_helpers import adk_service, sqlite_url
from typer.testing import CliRunner

from veadk_mem.adk_schema import ADK_SCHEMA
from veadk_mem.adkjson import mixed_keys, printed_event, stored_event
from veadk_mem.cli.app import app

BENCH = Path(__file__).resolve().parent.parent / "bench"
APP, USER, SID = "exact_app", "u-1", "s-every-kind"


def every_kind_events() -> list[Any]:
    """One event of each kind ADK writes: text, thoughts, tools, usage, grounding, custom metadata,
    state and artifact deltas, transfer, escalation, long-running tools, branches, errors, compaction."""
    from google.adk.events import Event, EventActions
    from google.adk.events.event_actions import EventCompaction
    from google.adk.tools.tool_confirmation import ToolConfirmation
    from google.genai import types

    t0 = 1_790_000_000.125
    usage = types.GenerateContentResponseUsageMetadata(
        prompt_token_count=300,
        candidates_token_count=5,
        total_token_count=317,
        thoughts_token_count=12,
        prompt_tokens_details=[types.ModalityTokenCount(modality=types.MediaModality.TEXT, token_count=300)],
    )
    grounding = types.GroundingMetadata(
        web_search_queries=["peanut free recipes"],
        grounding_chunks=[types.GroundingChunk(web=types.GroundingChunkWeb(uri="https://example.org/a", title="A"))],
        grounding_supports=[
            types.GroundingSupport(
                segment=types.Segment(start_index=0, end_index=4, text="Dal."), grounding_chunk_indices=[0]
            )
        ],
    )
    call = types.FunctionCall(id="fc-1", name="find_recipes", args={"diet_kind": "vegetarian", "maxCount": 3})
    reply = types.FunctionResponse(id="fc-1", name="find_recipes", response={"result_list": ["dal"]})
    return [
        Event(
            id="e1",
            invocation_id="inv-1",
            author="user",
            timestamp=t0,
            content=types.Content(role="user", parts=[types.Part(text="I'm allergic to peanuts — 花生过敏.")]),
        ),
        Event(
            id="e2",
            invocation_id="inv-1",
            author="chef",
            timestamp=t0 + 1,
            branch="root.chef",
            content=types.Content(
                role="model",
                parts=[
                    types.Part(text="thinking about it", thought=True, thought_signature=b"\x00\xffsig"),
                    types.Part(function_call=call),
                ],
            ),
            long_running_tool_ids={"fc-1", "fc-0"},
            usage_metadata=usage,
            model_version="gemini-test-001",
        ),
        Event(
            id="e3",
            invocation_id="inv-1",
            author="chef",
            timestamp=t0 + 2,
            content=types.Content(role="user", parts=[types.Part(function_response=reply)]),
            actions=EventActions(
                state_delta={"user:diet": "vegetarian", "snake_key": {"inner_key": 1}, "app:version": 2},
                artifact_delta={"menu.pdf": 1},
                skip_summarization=True,
                requested_tool_confirmations={"fc-1": ToolConfirmation(hint="ok?", payload={"some_key": 1})},
            ),
        ),
        Event(
            id="e4",
            invocation_id="inv-2",
            author="chef",
            timestamp=t0 + 3,
            content=types.Content(role="model", parts=[types.Part(text="Dal is safe.")]),
            grounding_metadata=grounding,
            finish_reason=types.FinishReason.STOP,
            custom_metadata={"trace_id": "abc", "nested_map": {"deep_key": [1, 2]}},
            actions=EventActions(transfer_to_agent="critic", escalate=True),
        ),
        Event(
            id="e5",
            invocation_id="inv-2",
            author="critic",
            timestamp=t0 + 4,
            error_code="RESOURCE_EXHAUSTED",
            error_message="quota exceeded",
            turn_complete=True,
            interrupted=True,
            usage_metadata=types.GenerateContentResponseUsageMetadata(prompt_token_count=7, total_token_count=7),
        ),
        Event(
            id="e6",
            invocation_id="inv-3",
            author="user",
            timestamp=t0 + 5,
            actions=EventActions(
                compaction=EventCompaction(
                    start_timestamp=t0,
                    end_timestamp=t0 + 4,
                    compacted_content=types.Content(role="model", parts=[types.Part(text="summary")]),
                )
            ),
            input_transcription=types.Transcription(text="what can I eat", finished=True),
        ),
    ]


def write_with_adk(url: str) -> None:
    """The session of every kind, written by ADK's own service (state of all three scopes)."""

    async def go() -> None:
        service = adk_service(url)
        try:
            session = await service.create_session(
                app_name=APP,
                user_id=USER,
                session_id=SID,
                state={"topic": "food", "app:region": "cn", "user:lang": "zh"},
            )
            for event in every_kind_events():
                await service.append_event(session, event)
        finally:
            await service.close()

    asyncio.run(go())


def adk_dump(url: str) -> dict[str, Any]:
    """ADK's own JSON of the session, as its API and `adk run --save_session` print it."""

    async def go() -> dict[str, Any]:
        service = adk_service(url)
        try:
            session = await service.get_session(app_name=APP, user_id=USER, session_id=SID)
            assert session is not None
            dumped: dict[str, Any] = session.model_dump(mode="json", by_alias=True, exclude_none=True)
            return dumped
        finally:
            await service.close()

    return asyncio.run(go())


def vmem(*args: str, input: str | None = None) -> Any:
    result = CliRunner().invoke(app, list(args), input=input)
    assert result.exit_code == 0, result.output
    return result


def rows(url: str) -> dict[str, list[Any]]:
    """Every row of ADK's four tables, values normalised (JSON parsed, times as epoch seconds)."""
    from sqlalchemy import text
    from sqlalchemy.ext.asyncio import create_async_engine

    def norm(value: Any) -> Any:
        if isinstance(value, datetime):
            return round(value.timestamp() if value.tzinfo else (value - datetime(1970, 1, 1)).total_seconds(), 6)
        if isinstance(value, (str, bytes)) and value[:1] in ("{", b"{", "[", b"["):
            return json.loads(value)
        if isinstance(value, str) and re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(\.\d+)?", value):
            return norm(datetime.fromisoformat(value))  # sqlite's DATETIME, as text
        return value

    queries = {
        "sessions": "SELECT app_name, user_id, id, state, create_time, update_time FROM sessions",
        "events": "SELECT id, app_name, user_id, session_id, invocation_id, timestamp, event_data FROM events",
        "app_states": "SELECT app_name, state FROM app_states",
        "user_states": "SELECT app_name, user_id, state FROM user_states",
    }

    async def go() -> dict[str, list[Any]]:
        engine = create_async_engine(url)
        try:
            async with engine.connect() as conn:
                out = {}
                for table, sql in queries.items():
                    found = [tuple(norm(v) for v in row) for row in (await conn.execute(text(sql))).all()]
                    out[table] = sorted(found, key=repr)
                return out
        finally:
            await engine.dispose()

    return asyncio.run(go())


@pytest.fixture(params=["sqlite", "postgres", "mysql"])
def source(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A database of each kind holding the session of every kind, written by ADK."""
    if request.param == "sqlite":
        url = sqlite_url(tmp_path / "adk.db")
    else:
        url = str(request.getfixturevalue("pg_url" if request.param == "postgres" else "mysql_url"))
    write_with_adk(url)
    return url


def test_the_embedded_table_is_the_installed_adks() -> None:
    sys.path.insert(0, str(BENCH))
    try:
        from adk_schema import adk_schema
    finally:
        sys.path.remove(str(BENCH))
    assert adk_schema() == ADK_SCHEMA, "google-adk changed: regenerate veadk_mem/adk_schema.py with bench/adk_schema.py"


def test_printed_json_is_adks_dump_at_every_depth(source: str) -> None:
    theirs = adk_dump(source)
    assert theirs["events"][1]["usageMetadata"]["candidatesTokenCount"] == 5  # the oracle is camelCase inside
    got = json.loads(vmem("--json", "session", "get", APP, USER, SID, "--db-url", source).stdout)
    assert got == theirs
    lines = vmem("session", "get", APP, USER, SID, "--jsonl", "--db-url", source).stdout.splitlines()
    assert [json.loads(line) for line in lines] == theirs["events"]
    exported = [json.loads(line) for line in vmem("session", "export", "--db-url", source).stdout.splitlines()]
    [session] = [line for line in exported if "kind" not in line]
    assert session == theirs


def test_a_restore_gives_back_the_rows_adk_wrote(source: str, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    dump = vmem("session", "export", "--db-url", source).stdout
    before = rows(source)
    targets = {"sqlite": sqlite_url(tmp_path / "restored.db")}
    for name in ("pg_url", "mysql_url"):
        targets[name] = str(request.getfixturevalue(name)) if source.split(":")[0] != name else ""
    stats_before = json.loads(vmem("--json", "session", "stats", "--db-url", source).stdout)["totals"]
    for name, target in targets.items():
        if not target or target == source:
            continue
        vmem("session", "import", "-", "--db-url", target, input=dump)
        after = rows(target)
        assert after == before, f"restored into {name}"
        stats_after = json.loads(vmem("--json", "session", "stats", "--db-url", target).stdout)["totals"]
        if name != "sqlite" or "sqlite" not in source:  # bytes are the database's own measure of its JSON
            stats_after.pop("bytes"), stats_before.pop("bytes", None)
        assert stats_after == stats_before, f"session stats after a restore into {name}"
        # and ADK reads the restored session as the one it wrote
        assert adk_dump(target) == adk_dump(source)


def test_stored_and_printed_shapes_convert_into_each_other() -> None:
    """Any mix of the two shapes becomes each one exactly; free dictionaries keep their keys."""
    from google.adk.events import Event

    for event in every_kind_events():
        stored = event.model_dump(mode="json", exclude_none=True)
        printed = event.model_dump(mode="json", by_alias=True, exclude_none=True)
        assert stored_event(printed) == stored
        assert printed_event(stored) == printed
        assert not mixed_keys(stored)
        assert mixed_keys(printed) == (printed != stored)
        assert Event.model_validate(stored_event(printed)) == event


@pytest.mark.skipif(importlib.util.find_spec("google.adk") is None, reason="google-adk is not installed")
def test_stats_reads_a_restored_session_s_tokens(tmp_path: Path) -> None:
    """The 0-token report of the issue: a restore of a session with usage metadata counts its tokens."""
    source = sqlite_url(tmp_path / "src.db")
    write_with_adk(source)
    target = sqlite_url(tmp_path / "dst.db")
    vmem("session", "import", "-", "--db-url", target, input=vmem("session", "export", "--db-url", source).stdout)
    stats = json.loads(vmem("--json", "session", "stats", "--db-url", target).stdout)["totals"]
    tokens = {k: v for k, v in stats.items() if "token" in k}
    assert tokens and all(v for v in tokens.values()), stats


def _mix(data: dict[str, Any]) -> dict[str, Any]:
    """Event data as vmem 0.1 restored it: some fields under their camelCase alias beside snake_case keys."""
    out = {
        ("usageMetadata" if k == "usage_metadata" else "nodeInfo" if k == "node_info" else k): v
        for k, v in data.items()
    }
    actions = dict(out.get("actions") or {})
    if "requested_auth_configs" in actions:
        actions["requestedAuthConfigs"] = actions.pop("requested_auth_configs")
    out["actions"] = actions
    return out


def _spoil(url: str) -> int:
    """Rewrite every event row of `url` in the mixed shape; how many rows changed."""
    from sqlalchemy import text
    from sqlalchemy.ext.asyncio import create_async_engine

    async def go() -> int:
        engine = create_async_engine(url)
        try:
            async with engine.begin() as conn:
                found = (await conn.execute(text("SELECT id, event_data FROM events"))).all()
                for event_id, value in found:
                    data = value if isinstance(value, dict) else json.loads(value)
                    mixed = json.dumps(_mix(data))
                    cast = "CAST(:d AS JSONB)" if url.startswith("postgresql") else ":d"
                    await conn.execute(
                        text(f"UPDATE events SET event_data = {cast} WHERE id = :i"), {"d": mixed, "i": event_id}
                    )
                return len(found)
        finally:
            await engine.dispose()

    return asyncio.run(go())


def test_upgrade_rewrites_rows_restored_in_the_mixed_shape(source: str, tmp_path: Path) -> None:
    """A database restored by vmem 0.1: `upgrade --dry-run` counts its mixed rows, `upgrade` rewrites
    them in ADK's shape after its verified backup, and `session stats` reads the tokens again."""
    original = rows(source)
    tokens = json.loads(vmem("--json", "session", "stats", "--db-url", source).stdout)["totals"]
    assert _spoil(source) == 6
    assert rows(source) != original
    backup = tmp_path / "backup.jsonl"
    dry = json.loads(
        vmem("--json", "session", "upgrade", "--dry-run", "--backup", str(backup), "--db-url", source).stdout
    )
    assert (dry["status"], dry["mixed_events"], dry["rewritten"]) == ("dry_run", 6, 0)
    assert rows(source) != original and not backup.exists()
    done = vmem("session", "upgrade", "--backup", str(backup), "--db-url", source)
    assert "rewrote 6 events in the shape ADK stores" in done.stderr
    assert rows(source) == original
    assert json.loads(vmem("--json", "session", "stats", "--db-url", source).stdout)["totals"] == tokens
    assert backup.is_file() and sum(1 for line in backup.read_text().splitlines() if '"kind"' not in line) == 1
    again = json.loads(vmem("--json", "session", "upgrade", "--dry-run", "--db-url", source).stdout)
    assert again["mixed_events"] == 0 and again["status"] == "current"


def _v0_with_nan(url: str) -> None:
    """A v0 database (ADK's own v0 tables) holding one event whose pickled state_delta holds NaN and infinity."""
    from google.adk.events import Event, EventActions
    from google.adk.sessions import Session
    from google.adk.sessions.schemas.v0 import Base, StorageEvent, StorageSession
    from sqlalchemy.ext.asyncio import AsyncSession, create_async_engine

    if url.startswith("mysql"):  # as sessions_helpers.build_v0: aiomysql cannot bind bytes under PyMySQL 1.2
        import aiomysql.connection
        import pymysql.converters

        aiomysql.connection.escape_bytes_prefixed = pymysql.converters.escape_bytes  # type: ignore[attr-defined]

    async def go() -> None:
        engine = create_async_engine(url)
        try:
            async with engine.begin() as conn:
                await conn.run_sync(Base.metadata.create_all)
            session = Session(id=SID, app_name=APP, user_id=USER)
            event = Event(
                id="nan-1",
                invocation_id="inv",
                author="agent",
                timestamp=1_790_000_000.5,
                actions=EventActions(state_delta={"ratio": float("nan"), "limit": float("inf"), "ok": 1}),
            )
            async with AsyncSession(engine) as orm:
                orm.add(StorageSession(app_name=APP, user_id=USER, id=SID, state={}))
                await orm.flush()
                orm.add(StorageEvent.from_event(session, event))
                await orm.commit()
        finally:
            await engine.dispose()

    asyncio.run(go())


@pytest.mark.parametrize("kind", ["sqlite", "postgres", "mysql"])
def test_nan_is_written_as_null_by_an_upgrade_of_a_v0_pickle(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """Every write path writes NaN and infinities as null (import refuses them at its check): here the
    upgrade of a pickle holding them, into text (sqlite, MariaDB) and JSONB (PostgreSQL) alike."""
    if kind == "sqlite":
        url = sqlite_url(tmp_path / "v0.db")
    else:
        url = str(request.getfixturevalue("pg_url" if kind == "postgres" else "mysql_url"))
    _v0_with_nan(url)
    vmem("session", "upgrade", "--backup", str(tmp_path / "b.jsonl"), "--db-url", url)
    [(_id, *_rest, data)] = rows(url)["events"]
    assert data["actions"]["state_delta"] == {"ratio": None, "limit": None, "ok": 1}
    assert "NaN" not in json.dumps(data, allow_nan=True) and "Infinity" not in json.dumps(data, allow_nan=True)
    got = json.loads(vmem("--json", "session", "get", APP, USER, SID, "--db-url", url).stdout)
    assert got["events"][0]["actions"]["stateDelta"] == {"ratio": None, "limit": None, "ok": 1}


def test_an_import_refuses_nan_naming_where(tmp_path: Path) -> None:
    line = json.dumps({"id": "s", "appName": "a", "userId": "u", "state": {"x": float("nan")}, "events": []})
    result = CliRunner().invoke(app, ["session", "import", "-", "--db-url", str(tmp_path / "t.db")], input=line)
    assert result.exit_code == 2 and "$.state.x" in result.stderr, result.output
    assert not (tmp_path / "t.db").exists()


def test_a_lone_surrogate_adk_stored_is_printed_and_exported(tmp_path: Path) -> None:
    """Half an emoji in a request body: ADK stores and reads it; vmem prints it as its \\ud83d escape
    (the same string to any JSON reader) and exports the session instead of leaving it out."""
    from google.adk.events import Event
    from google.genai import types

    url = sqlite_url(tmp_path / "surrogate.db")

    async def write() -> None:
        service = adk_service(url)
        try:
            session = await service.create_session(app_name=APP, user_id=USER, session_id=SID, state={"k": "a\ud83d"})
            content = types.Content(role="user", parts=[types.Part(text="half \ud83d an emoji")])
            await service.append_event(session, Event(id="e1", invocation_id="i", author="user", content=content))
        finally:
            await service.close()

    asyncio.run(write())
    got = vmem("--json", "session", "get", APP, USER, SID, "--db-url", url).stdout
    assert "\\ud83d" in got and json.loads(got) == adk_dump(url)
    exported = vmem("session", "export", "--db-url", url)
    sessions = [json.loads(line) for line in exported.stdout.splitlines() if '"kind"' not in line]
    assert [s["events"][0]["content"]["parts"][0]["text"] for s in sessions] == ["half \ud83d an emoji"]
    assert "not exported" not in exported.stderr


def test_forget_and_delete_remove_a_session_holding_a_lone_surrogate(tmp_path: Path) -> None:
    """What ADK stored and reads, vmem can remove (issue 41 item 4): the session was taken for
    damaged, `forget` printed `forgot carol`, exit 0, and left it; `delete` by id said not found."""
    from google.adk.events import Event
    from google.genai import types

    url = sqlite_url(tmp_path / "carol.db")

    async def write() -> None:
        service = adk_service(url)
        try:
            for sid in ("s1", "s2"):
                state = {"card": "4111 1111 1111 1111 \ud83d", "user:name": "carol \udc00"}
                session = await service.create_session(app_name=APP, user_id="carol", session_id=sid, state=state)
                content = types.Content(role="user", parts=[types.Part(text="my card \ud83d")])
                await service.append_event(
                    session, Event(id=f"{sid}-e", invocation_id="i", author="user", content=content)
                )
        finally:
            await service.close()

    asyncio.run(write())
    deleted = CliRunner().invoke(app, ["session", "delete", APP, "carol", "s1", "--yes", "--db-url", url])
    assert deleted.exit_code == 0, deleted.output
    env = {"LONG_TERM_MEMORY_BACKEND": "local"}
    forgot = CliRunner().invoke(app, ["forget", "carol", "--yes", "--db-url", url], env=env)
    assert forgot.exit_code == 0, forgot.output
    left = rows(url)
    assert left["sessions"] == [] and left["events"] == [] and left["user_states"] == [], left
