"""Retention as a policy (#43 items 1-2): `[retention]` rules in the config, `vmem retention show`
explaining what each removes now, and `vmem session prune` applying them with session delete's
batched, re-checked deletes. Sessions are written by the real google-adk; sqlite, PostgreSQL, MariaDB."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

import pytest
from sessions_helpers import sqlite_url
from typer.testing import CliRunner

from veadk_mem.cli.app import app
from veadk_mem.cli.charts import human_bytes
from veadk_mem.config import load_settings
from veadk_mem.errors import Interrupted
from veadk_mem.sessions.retention import prune, retention_plan
from veadk_mem.sessions.store import SessionStore

DAY = 86400.0
APP = "ret_app"


def text_event(text: str, ts: float, invocation: str = "inv") -> Any:
    from google.adk.events import Event
    from google.genai import types

    return Event(
        author="user",
        invocation_id=invocation,
        content=types.Content(role="user", parts=[types.Part(text=text)]),
        timestamp=ts,
    )


async def _write(url: str, sessions: list[tuple[str, str, str, float, int]]) -> None:
    """Sessions (app, user, id, age in days, events) written by ADK, each last updated `age` days ago."""
    from google.adk.sessions import DatabaseSessionService

    service = DatabaseSessionService(url)
    now = time.time()
    try:
        for app_name, user, sid, age, n in sessions:
            session = await service.create_session(
                app_name=app_name, user_id=user, session_id=sid, state={"topic": sid, "user:lang": "zh"}
            )
            for i in range(n):
                await service.append_event(session, text_event(f"{sid} {i}", now - age * DAY - (n - i)))
    finally:
        await service.close()


def write(url: str, sessions: list[tuple[str, str, str, float, int]]) -> None:
    asyncio.run(_write(url, sessions))


async def adk_ids(url: str, app_name: str, user: str) -> set[str]:
    from google.adk.sessions import DatabaseSessionService

    service = DatabaseSessionService(url)
    try:
        listed = await service.list_sessions(app_name=app_name, user_id=user)
        return {s.id for s in listed.sessions}
    finally:
        await service.close()


SESSIONS = [
    (APP, "u1", "old", 100, 3),  # max_age 90d removes it
    (APP, "u1", "new1", 1, 2),
    (APP, "u1", "new2", 2, 2),
    (APP, "u1", "new3", 3, 4),  # max_sessions_per_user 2 (the app's rule) removes it
    (APP, "vip_user", "ancient", 400, 1),  # keep_users
    ("ret_vip", "u1", "older", 500, 2),  # keep_apps
    ("ret_other", "u9", "stale", 95, 1),  # the default rule: max_age 90d
]

CONFIG = f"""
[retention]
max_age = "90d"
keep_apps = ["ret_vip"]
keep_users = ["vip_user"]
[retention.apps.{APP}]
max_sessions_per_user = 2
keep_last_events = 1
"""


@pytest.fixture
def db(tmp_path: Path) -> Path:
    path = tmp_path / "ret.db"
    write(sqlite_url(path), SESSIONS)
    return path


@pytest.fixture
def cfg(tmp_path: Path) -> Path:
    path = tmp_path / "ret.toml"
    path.write_text(CONFIG, encoding="utf-8")
    return path


def vmem(runner: CliRunner, *args: str) -> Any:
    return runner.invoke(app, list(args))


# --- item 1: the rules in the config ---------------------------------------------------------


def test_config_show_names_every_retention_key_and_app_rule_with_its_source(
    runner: CliRunner, cfg: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("VMEM_RETENTION_KEEP_LAST_EVENTS", "500")
    result = vmem(runner, "-c", str(cfg), "config", "show", "--json")
    assert result.exit_code == 0, result.output
    shown = json.loads(result.stdout)
    assert shown["retention.max_age"] == {"value": "90d", "source": f"file {cfg}", "env": "VMEM_RETENTION_MAX_AGE"}
    assert shown["retention.keep_last_events"]["value"] == 500
    assert shown["retention.keep_last_events"]["source"] == "env VMEM_RETENTION_KEEP_LAST_EVENTS"
    assert shown["retention.keep_apps"]["value"] == ["ret_vip"]
    assert shown[f"retention.apps.{APP}.max_sessions_per_user"]["value"] == 2
    assert shown[f"retention.apps.{APP}.keep_last_events"]["value"] == 1


def test_an_app_rule_overrides_the_default_key_by_key_and_env_lists_split_on_commas(cfg: Path) -> None:
    settings = load_settings(cfg, environ={"VMEM_RETENTION_KEEP_USERS": "a, b", "VMEM_RETENTION_MAX_AGE": "30d"})
    retention = settings.settings.retention
    own = retention.rule_for(APP)
    assert (own.max_age, own.max_sessions_per_user, own.keep_last_events) == ("30d", 2, 1)
    assert own.keep_users == ["a", "b"]
    assert retention.rule_for("ret_other").max_sessions_per_user is None


@pytest.mark.parametrize(
    ("toml", "message"),
    [
        ("[retention]\nmax_agee = '1d'\n", r"unknown key 'retention.max_agee' \(did you mean 'max_age'\?\)"),
        (
            "[retention.apps.bot]\nkeep_last_event = 5\n",
            r"unknown key 'retention.apps.bot.keep_last_event' \(did you mean 'keep_last_events'\?\)",
        ),
        ("[retention.apps.bot]\nkeep_apps = ['x']\n", r"unknown key 'retention.apps.bot.keep_apps'"),
        ("[retention]\nmax_age = '9 parsecs'\n", r"retention.max_age: expected a duration such as 90d"),
        ("[retention]\nkeep_last_events = -1\n", r"retention.keep_last_events: expected greater than or equal to 0"),
    ],
)
def test_bad_retention_key_or_value_is_exit_2_naming_key_and_file(
    runner: CliRunner, tmp_path: Path, toml: str, message: str
) -> None:
    path = tmp_path / "bad.toml"
    path.write_text(toml, encoding="utf-8")
    result = vmem(runner, "-c", str(path), "config", "show")
    assert result.exit_code == 2
    import re

    assert re.search(message, result.stderr), result.stderr
    assert str(path) in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


# --- item 1: retention show --------------------------------------------------------------------


def test_retention_show_explains_per_app_what_each_rule_removes(runner: CliRunner, cfg: Path, db: Path) -> None:
    result = vmem(runner, "-c", str(cfg), "retention", "show", "--db-url", str(db), "--json")
    assert result.exit_code == 0, result.output
    apps = {a["app_name"]: a for a in json.loads(result.stdout)["apps"]}
    mine = apps[APP]
    assert mine["sessions"] == 5
    assert mine["remove"]["max_age"]["sessions"] == 1 and mine["remove"]["max_age"]["events"] == 3
    assert mine["remove"]["max_sessions_per_user"] == {
        "sessions": 1,
        "events": 4,
        "bytes": mine["remove"]["max_sessions_per_user"]["bytes"],
    }
    assert mine["remove"]["max_sessions_per_user"]["bytes"] > 0
    assert mine["kept_users_sessions"] == 1  # vip_user's 400-day-old session stays
    assert mine["oldest_kept"] < time.time() - 399 * DAY  # ... and is the oldest kept
    trims = mine["keep_last_events"]
    assert trims == {"sessions": 2, "events_at_most": 2, "bytes_at_most": trims["bytes_at_most"]}
    assert trims["bytes_at_most"] > 0  # exactly which bytes: test_retention_show_gives_the_bytes_...
    assert apps["ret_vip"]["excluded"] == "keep_apps" and apps["ret_vip"]["remove_total"]["sessions"] == 0
    assert apps["ret_other"]["remove"]["max_age"]["sessions"] == 1
    table = vmem(runner, "-c", str(cfg), "retention", "show", "--db-url", str(db))
    assert table.exit_code == 0
    assert "3 sessions, 8 events" in table.stderr


# --- item 2: session prune ---------------------------------------------------------------------


def test_prune_removes_what_show_said_and_adk_still_reads_the_rest(runner: CliRunner, cfg: Path, db: Path) -> None:
    url = sqlite_url(db)
    dry = vmem(runner, "-c", str(cfg), "session", "prune", "--db-url", str(db), "--dry-run", "--json")
    assert dry.exit_code == 0, dry.output
    assert json.loads(dry.stdout)["planned"] == {"sessions": 3, "events": 8}
    assert asyncio.run(adk_ids(url, APP, "u1")) == {"old", "new1", "new2", "new3"}  # dry run: nothing gone
    result = vmem(runner, "-c", str(cfg), "session", "prune", "--db-url", str(db), "--yes", "--json")
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["deleted"] == {"sessions": 3, "events": 8} and report["kept_resumed"] == []
    assert report["trimmed"] == {"sessions": 0, "events": 0}  # one invocation each: never split
    assert asyncio.run(adk_ids(url, APP, "u1")) == {"new1", "new2"}
    assert asyncio.run(adk_ids(url, APP, "vip_user")) == {"ancient"}
    assert asyncio.run(adk_ids(url, "ret_vip", "u1")) == {"older"}
    assert asyncio.run(adk_ids(url, "ret_other", "u9")) == set()
    again = vmem(runner, "-c", str(cfg), "session", "prune", "--db-url", str(db), "--yes")
    assert again.exit_code == 0 and "nothing to prune" in again.stderr


def test_prune_app_only_touches_that_app(runner: CliRunner, cfg: Path, db: Path) -> None:
    result = vmem(runner, "-c", str(cfg), "session", "prune", "--app", "ret_other", "--db-url", str(db), "--yes")
    assert result.exit_code == 0, result.output
    assert "pruned 1 session, 1 event" in result.stderr
    assert asyncio.run(adk_ids(sqlite_url(db), APP, "u1")) == {"old", "new1", "new2", "new3"}


def test_prune_without_yes_off_a_terminal_asks_and_deletes_nothing(runner: CliRunner, cfg: Path, db: Path) -> None:
    result = vmem(runner, "-c", str(cfg), "session", "prune", "--db-url", str(db))
    assert result.exit_code == 2 and "pass --yes" in result.stderr
    assert asyncio.run(adk_ids(sqlite_url(db), APP, "u1")) == {"old", "new1", "new2", "new3"}


@pytest.mark.parametrize("rule", ["max_age = '0d'", "max_sessions_per_user = 0", "keep_last_events = 0"])
def test_a_rule_removing_everything_is_refused_unless_the_app_is_named_with_yes(
    runner: CliRunner, tmp_path: Path, db: Path, rule: str
) -> None:
    path = tmp_path / "zero.toml"
    path.write_text(f"[retention.apps.ret_other]\n{rule}\n", encoding="utf-8")
    refused = vmem(runner, "-c", str(path), "session", "prune", "--db-url", str(db), "--yes")
    assert refused.exit_code == 2
    assert "removes every session of the app" in refused.stderr and "--app ret_other --yes" in refused.stderr
    assert asyncio.run(adk_ids(sqlite_url(db), "ret_other", "u9")) == {"stale"}
    named = vmem(runner, "-c", str(path), "session", "prune", "--app", "ret_other", "--db-url", str(db), "--yes")
    assert named.exit_code == 0, named.output
    if not rule.startswith("keep_last_events"):
        assert asyncio.run(adk_ids(sqlite_url(db), "ret_other", "u9")) == set()


def test_a_session_resumed_during_the_prune_is_kept_and_named(cfg: Path, db: Path) -> None:
    """The agent appends to a doomed session after the plan (while the question waits): kept."""
    url = sqlite_url(db)
    settings = load_settings(cfg).settings.retention

    def resume(_plan: Any) -> None:
        import threading

        def agent() -> None:
            async def go() -> None:
                from google.adk.sessions import DatabaseSessionService

                service = DatabaseSessionService(url)
                try:
                    session = await service.get_session(app_name=APP, user_id="u1", session_id="old")
                    assert session is not None
                    await service.append_event(session, text_event("back again", time.time()))
                finally:
                    await service.close()

            asyncio.run(go())

        thread = threading.Thread(target=agent)
        thread.start()
        thread.join()

    async def go() -> Any:
        async with SessionStore(url) as store:
            return await prune(store, settings, yes=True, confirm=resume)

    report = asyncio.run(go())
    assert report.deleted is not None
    assert [str(k) for k in report.deleted.skipped] == [f"{APP}/u1/old"]
    assert report.to_json()["kept_resumed"] == [{"app_name": APP, "user_id": "u1", "id": "old"}]
    assert asyncio.run(adk_ids(url, APP, "u1")) == {"old", "new1", "new2"}


def test_an_interrupted_prune_says_what_it_committed_and_a_rerun_finishes(cfg: Path, db: Path) -> None:
    url = sqlite_url(db)
    settings = load_settings(cfg).settings.retention

    async def interrupted() -> str:
        async with SessionStore(url) as store:
            task = asyncio.ensure_future(prune(store, settings, yes=True, batch=1))
            while store.rows.delete_transactions < 1:
                await asyncio.sleep(0.001)
            task.cancel()
            with pytest.raises(Interrupted) as caught:
                await task
            return caught.value.message

    message = asyncio.run(interrupted())
    assert "interrupted: 1 of 3 session(s)" in message and "run the same command again to finish" in message

    async def rerun() -> Any:
        async with SessionStore(url) as store:
            return await prune(store, settings, yes=True)

    report = asyncio.run(rerun())
    assert report.deleted is not None and len(report.deleted.sessions) == 2
    assert asyncio.run(adk_ids(url, APP, "u1")) == {"new1", "new2"}


@pytest.mark.parametrize("server", ["pg_url", "mysql_url"])
def test_prune_on_servers_deletes_the_planned_sessions(
    request: pytest.FixtureRequest, runner: CliRunner, cfg: Path, server: str
) -> None:
    url = request.getfixturevalue(server)
    write(url, SESSIONS)
    result = vmem(runner, "-c", str(cfg), "session", "prune", "--db-url", url, "--yes", "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["deleted"] == {"sessions": 3, "events": 8}
    assert asyncio.run(adk_ids(url, APP, "u1")) == {"new1", "new2"}
    assert asyncio.run(adk_ids(url, "ret_vip", "u1")) == {"older"}

    async def show() -> Any:
        async with SessionStore(url) as store:
            return await retention_plan(store, load_settings(cfg).settings.retention)

    assert all(a.total().sessions == 0 for a in asyncio.run(show()).apps)


# --- item 3: keep_last_events, trimming that ADK can still resume --------------------------------


def turn(i: int, ts: float) -> list[Any]:
    """One invocation as an agent writes it: the user's text, a tool call, its response, the answer."""
    from google.adk.events import Event, EventActions
    from google.genai import types

    inv = f"inv-{i}"
    call = types.FunctionCall(id=f"c{i}", name="lookup", args={"q": i})
    resp = types.FunctionResponse(id=f"c{i}", name="lookup", response={"r": i})
    return [
        text_event(f"question {i}", ts, inv),
        Event(
            author="agent",
            invocation_id=inv,
            timestamp=ts + 0.1,
            content=types.Content(role="model", parts=[types.Part(function_call=call)]),
        ),
        Event(
            author="agent",
            invocation_id=inv,
            timestamp=ts + 0.2,
            content=types.Content(role="user", parts=[types.Part(function_response=resp)]),
        ),
        Event(
            author="agent",
            invocation_id=inv,
            timestamp=ts + 0.3,
            content=types.Content(role="model", parts=[types.Part(text=f"answer {i}")]),
            actions=EventActions(state_delta={"turn": i, "user:seen": i, "app:total": i}),
        ),
    ]


def compaction(ts: float, start: float) -> Any:
    from google.adk.events import Event, EventActions
    from google.adk.events.event_actions import EventCompaction
    from google.genai import types

    summary = types.Content(role="model", parts=[types.Part(text="summary of turns 0-2")])
    return Event(
        author="user",
        invocation_id="cmp",
        timestamp=ts,
        actions=EventActions(
            compaction=EventCompaction(start_timestamp=start, end_timestamp=ts - 1, compacted_content=summary)
        ),
    )


async def _long_session(url: str, sid: str, with_compaction: bool) -> Any:
    from google.adk.sessions import DatabaseSessionService

    service = DatabaseSessionService(url)
    base = time.time() - 3600
    try:
        session = await service.create_session(app_name="ret_trim", user_id="u1", session_id=sid, state={"k": "v"})
        for i in range(5):
            for event in turn(i, base + i * 10):
                await service.append_event(session, event)
            if i == 2 and with_compaction:
                await service.append_event(session, compaction(base + 25, base))
        return await service.get_session(app_name="ret_trim", user_id="u1", session_id=sid)
    finally:
        await service.close()


@pytest.mark.parametrize("server", ["sqlite", "pg_url", "mysql_url"])
@pytest.mark.parametrize(("with_compaction", "kept"), [(True, 9), (False, 8)])
def test_keep_last_events_trims_what_adk_can_resume(
    request: pytest.FixtureRequest, runner: CliRunner, tmp_path: Path, server: str, with_compaction: bool, kept: int
) -> None:
    """keep 6 of 20 (+1 compaction): the latest compaction and all after it stay (9), or without one,
    the whole invocation of the sixth-newest event (8); ADK loads it with its state and appends."""
    from google.adk.sessions import DatabaseSessionService

    url = sqlite_url(tmp_path / "trim.db") if server == "sqlite" else request.getfixturevalue(server)
    before = asyncio.run(_long_session(url, "long", with_compaction))
    assert len(before.events) == 20 + with_compaction
    cfg = tmp_path / "trim.toml"
    cfg.write_text("[retention.apps.ret_trim]\nkeep_last_events = 6\n", encoding="utf-8")
    result = vmem(runner, "-c", str(cfg), "session", "prune", "--db-url", url, "--yes", "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["trimmed"] == {"sessions": 1, "events": len(before.events) - kept}

    async def resume() -> tuple[Any, Any]:
        service = DatabaseSessionService(url)
        try:
            after = await service.get_session(app_name="ret_trim", user_id="u1", session_id="long")
            assert after is not None
            loaded = after.model_copy(deep=True)  # append_event adds to the object it is given
            await service.append_event(after, text_event("next turn", time.time(), "inv-next"))
            again = await service.get_session(app_name="ret_trim", user_id="u1", session_id="long")
            return loaded, again
        finally:
            await service.close()

    after, again = asyncio.run(resume())
    assert [e.id for e in after.events] == [e.id for e in before.events[-kept:]]
    assert after.state == before.state  # state lives in the session and state rows, not in events
    assert after.events[0].invocation_id == ("cmp" if with_compaction else "inv-3")
    assert [e.content.parts[0].text for e in again.events[-1:]] == ["next turn"]
    assert len(again.events) == kept + 1
    rerun = vmem(runner, "-c", str(cfg), "session", "prune", "--db-url", url, "--yes", "--json")
    assert json.loads(rerun.stdout)["trimmed"]["events"] == 0  # the cut falls in inv-3 or after the compaction
    pruned = len(before.events) - kept
    shown = vmem(runner, "session", "get", "ret_trim", "u1", "long", "--db-url", url)
    assert shown.exit_code == 0, shown.output
    assert f"events   {kept + 1} ({pruned} older events pruned)" in shown.stdout  # the count lives in the database
    as_json = vmem(runner, "session", "get", "ret_trim", "u1", "long", "--db-url", url, "--json")
    assert as_json.exit_code == 0, as_json.output
    assert f"{pruned} older events pruned" in as_json.stderr
    data = json.loads(as_json.stdout)  # still exactly ADK's session JSON: nothing of vmem's added
    assert set(data) == set(again.model_dump(mode="json", by_alias=True, exclude_none=True))
    assert [e["id"] for e in data["events"]] == [e.id for e in again.events]


def test_cut_point_keeps_invocations_whole_and_the_latest_compaction() -> None:
    from veadk_mem.sessions.retention import EventMark, cut_point

    marks = [EventMark(f"e{i}", f"inv{i // 3}", False) for i in range(9)]
    assert cut_point(marks, 9) == 0 and cut_point(marks, 20) == 0
    assert cut_point(marks, 3) == 6  # at an invocation's start
    assert cut_point(marks, 4) == 3  # inside inv1: all of inv1 kept
    assert cut_point(marks, 0) == 9
    with_cmp = [*marks[:4], EventMark("c", "cmp", True), *marks[4:]]
    assert cut_point(with_cmp, 2) == 4  # the compaction and everything after it
    assert cut_point(with_cmp, 8) == 0  # inside inv0 (events 1..2): all of it


# --- item 4: session vacuum ----------------------------------------------------------------------


def _prune_all(runner: CliRunner, tmp_path: Path, url: str) -> None:
    cfg = tmp_path / "all.toml"
    cfg.write_text("[retention]\nmax_age = '1d'\n", encoding="utf-8")
    assert vmem(runner, "-c", str(cfg), "session", "prune", "--db-url", url, "--yes").exit_code == 0


def test_vacuum_sqlite_returns_the_free_pages_a_prune_left(runner: CliRunner, tmp_path: Path) -> None:
    path = tmp_path / "big.db"
    write(sqlite_url(path), [(APP, f"u{i}", f"s{i}", 10, 30) for i in range(20)])
    _prune_all(runner, tmp_path, str(path))
    dry = vmem(runner, "session", "vacuum", "--db-url", str(path), "--dry-run", "--json")
    assert dry.exit_code == 0, dry.output
    planned = json.loads(dry.stdout)
    assert planned["before"][0]["free_bytes"] > 0 and planned["after"] is None
    size = path.stat().st_size
    assert planned["bytes_before"] == size
    result = vmem(runner, "session", "vacuum", "--db-url", str(path), "--json")
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["action"] == "VACUUM" and report["after"][0]["free_bytes"] == 0
    assert report["reclaimed_bytes"] == size - path.stat().st_size > 0


def test_vacuum_sqlite_held_by_another_connection_is_exit_1_and_changes_nothing(
    runner: CliRunner, tmp_path: Path, db: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import sqlite3

    monkeypatch.setenv("VMEM_SQLITE_BUSY_TIMEOUT", "0.2")
    holder = sqlite3.connect(db, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    try:
        result = vmem(runner, "session", "vacuum", "--db-url", str(db))
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert result.exit_code == 1
    assert "locked by another connection" in result.stderr and "nothing was changed" in result.stderr


@pytest.mark.parametrize("server", ["pg_url", "mysql_url"])
def test_vacuum_on_servers(request: pytest.FixtureRequest, runner: CliRunner, tmp_path: Path, server: str) -> None:
    url = request.getfixturevalue(server)
    write(url, [(APP, f"u{i}", f"s{i}", 10, 5) for i in range(5)])
    _prune_all(runner, tmp_path, url)
    if server == "mysql_url":
        refused = vmem(runner, "session", "vacuum", "--db-url", url)
        assert refused.exit_code == 2 and "rebuilds each table" in refused.stderr
    result = vmem(runner, "session", "vacuum", "--db-url", url, "--yes", "--json")
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert {s["name"] for s in report["before"]} == {"sessions", "events", "app_states", "user_states"}
    assert report["after"] is not None and report["action"].startswith(("VACUUM (ANALYZE)", "OPTIMIZE TABLE"))
    assert asyncio.run(adk_ids(url, APP, "u1")) == set()
    write(url, [(APP, "u1", "again", 0, 1)])  # ADK keeps working on the tables
    assert asyncio.run(adk_ids(url, APP, "u1")) == {"again"}


def _event_bytes(url: str, sid: str) -> list[int]:
    """The stored bytes of session `sid`'s events (ret_trim/u1), oldest first, read with plain SQL:
    PostgreSQL's stored size of event_data, the byte length of it on sqlite and MariaDB."""
    from sqlalchemy import create_engine, text

    where = "app_name = 'ret_trim' AND user_id = 'u1' AND session_id = "
    if url.startswith("postgresql"):
        import asyncpg

        async def read() -> list[tuple[Any, ...]]:
            conn = await asyncpg.connect(url.replace("postgresql+asyncpg", "postgresql"))
            try:
                query = f"SELECT timestamp, id, pg_column_size(event_data) FROM events WHERE {where}$1"
                rows = await conn.fetch(query, sid)
                return [tuple(r) for r in rows]
            finally:
                await conn.close()

        rows = asyncio.run(read())
    else:
        size = "LENGTH(CAST(event_data AS BLOB))" if url.startswith("sqlite") else "LENGTH(event_data)"
        engine = create_engine(url.replace("+aiosqlite", "").replace("+aiomysql", "+pymysql"))
        try:
            with engine.connect() as conn:
                query = text(f"SELECT timestamp, id, {size} FROM events WHERE {where}:sid")
                rows = [tuple(r) for r in conn.execute(query, {"sid": sid})]
        finally:
            engine.dispose()
    return [int(b) for _, _, b in sorted(rows)]


@pytest.mark.parametrize("server", ["sqlite", "pg_url", "mysql_url"])
def test_retention_show_gives_the_bytes_keep_last_events_trims_at_most(
    request: pytest.FixtureRequest, runner: CliRunner, tmp_path: Path, server: str
) -> None:
    """bytes_at_most is the stored bytes of exactly the events beyond each session's newest N,
    summed over the app's over-long sessions; a session within N adds nothing."""
    url = sqlite_url(tmp_path / "trim.db") if server == "sqlite" else request.getfixturevalue(server)
    asyncio.run(_long_session(url, "long", False))  # 20 events
    asyncio.run(_long_session(url, "long2", True))  # 21 events, a compaction among them
    write(url, [("ret_trim", "u1", "short", 0, 3), ("ret_else", "u1", "big", 0, 9)])
    cfg = tmp_path / "trim.toml"
    cfg.write_text("[retention.apps.ret_trim]\nkeep_last_events = 6\n", encoding="utf-8")
    result = vmem(runner, "-c", str(cfg), "retention", "show", "--db-url", url, "--json")
    assert result.exit_code == 0, result.output
    apps = {a["app_name"]: a for a in json.loads(result.stdout)["apps"]}
    sizes = {sid: _event_bytes(url, sid) for sid in ("long", "long2")}
    assert all(b > 0 for sid in sizes for b in sizes[sid]) and [len(v) for v in sizes.values()] == [20, 21]
    expected = sum(sum(v[:-6]) for v in sizes.values())
    trims = apps["ret_trim"]["keep_last_events"]
    assert trims == {"sessions": 2, "events_at_most": 14 + 15, "bytes_at_most": expected}
    assert apps["ret_else"]["keep_last_events"]["bytes_at_most"] == 0  # no keep_last_events rule there
    table = vmem(runner, "-c", str(cfg), "retention", "show", "--db-url", url)
    assert table.exit_code == 0, table.output
    assert f"2 sessions to trim, at most 29 older events ({human_bytes(expected)}; " in table.stderr


# --- item 3: "N older events pruned", where it lives and when it goes ------------------------------


def _pruned_rows(url: str) -> list[tuple[Any, ...]]:
    """vmem's pruned-events rows, read with plain SQL ([] when no trim made the table)."""
    from sqlalchemy import create_engine, inspect, text

    if url.startswith("postgresql"):
        import asyncpg

        async def read() -> list[tuple[Any, ...]]:
            conn = await asyncpg.connect(url.replace("postgresql+asyncpg", "postgresql"))
            try:
                if not await conn.fetchval("SELECT to_regclass('vmem_pruned_events') IS NOT NULL"):
                    return []
                return [tuple(r) for r in await conn.fetch("SELECT session_id, events FROM vmem_pruned_events")]
            finally:
                await conn.close()

        return asyncio.run(read())
    engine = create_engine(url.replace("+aiosqlite", "").replace("+aiomysql", "+pymysql"))
    try:
        with engine.connect() as conn:
            if not inspect(conn).has_table("vmem_pruned_events"):
                return []
            return [tuple(r) for r in conn.execute(text("SELECT session_id, events FROM vmem_pruned_events"))]
    finally:
        engine.dispose()


def _get_text(runner: CliRunner, url: str, sid: str) -> str:
    result = vmem(runner, "session", "get", "ret_trim", "u1", sid, "--db-url", url)
    assert result.exit_code == 0, result.output
    return str(result.stdout)


@pytest.mark.parametrize("server", ["sqlite", "pg_url", "mysql_url"])
def test_pruned_count_adds_up_goes_with_the_session_and_is_never_claimed_of_another(
    request: pytest.FixtureRequest, runner: CliRunner, tmp_path: Path, server: str
) -> None:
    """A second trim adds to the count; an import that restores the older events hides it; delete
    removes the row; ADK making the session anew under the same id never shows the old count."""
    url = sqlite_url(tmp_path / "cnt.db") if server == "sqlite" else request.getfixturevalue(server)
    asyncio.run(_long_session(url, "long", False))
    asyncio.run(_long_session(url, "other", False))
    assert _pruned_rows(url) == []  # no trim yet: no table of vmem's in ADK's database
    backup = tmp_path / "backup.jsonl"
    assert vmem(runner, "session", "export", "--app", "ret_trim", "--db-url", url, "-o", str(backup)).exit_code == 0
    assert "older events pruned" not in _get_text(runner, url, "long")
    cfg = tmp_path / "trim.toml"
    for keep, total in ((12, 8), (4, 16)):  # whole invocations of 4 events: 20 -> 12 -> 4
        cfg.write_text(f"[retention.apps.ret_trim]\nkeep_last_events = {keep}\n", encoding="utf-8")
        result = vmem(runner, "-c", str(cfg), "session", "prune", "--db-url", url, "--yes")
        assert result.exit_code == 0, result.output
        assert f"({total} older events pruned)" in _get_text(runner, url, "long")
    assert sorted(_pruned_rows(url)) == [("long", 16), ("other", 16)]
    # an import of the backup restores every event of "other": the count is no longer true
    restore = backup.read_text(encoding="utf-8").splitlines()
    other = [line for line in restore if '"other"' in line]
    (tmp_path / "other.jsonl").write_text("\n".join(other) + "\n", encoding="utf-8")
    imported = vmem(runner, "session", "import", str(tmp_path / "other.jsonl"), "--db-url", url)
    assert imported.exit_code == 0, imported.output
    assert "older events pruned" not in _get_text(runner, url, "other")
    # delete takes the session's row with it
    gone = vmem(runner, "session", "delete", "ret_trim", "u1", "long", "--db-url", url, "--yes")
    assert gone.exit_code == 0, gone.output
    assert [r[0] for r in _pruned_rows(url)] == ["other"]

    async def adk_remakes_other() -> None:
        from google.adk.sessions import DatabaseSessionService

        service = DatabaseSessionService(url)
        try:
            await service.delete_session(app_name="ret_trim", user_id="u1", session_id="other")
            session = await service.create_session(app_name="ret_trim", user_id="u1", session_id="other")
            await service.append_event(session, text_event("fresh start", time.time(), "inv-new"))
        finally:
            await service.close()

    asyncio.run(adk_remakes_other())
    assert "older events pruned" not in _get_text(runner, url, "other")


def test_vacuum_names_the_process_holding_the_sqlite_file(
    runner: CliRunner, tmp_path: Path, db: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another process (an agent) holds the write lock: exit 1, and its pid and command line are named."""
    import subprocess
    import sys

    monkeypatch.setenv("VMEM_SQLITE_BUSY_TIMEOUT", "0.2")
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sqlite3, sys, time\n"
            f"c = sqlite3.connect({str(db)!r}, isolation_level=None)\n"
            "c.execute('BEGIN IMMEDIATE'); print('held', flush=True); time.sleep(60)",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        size = db.stat().st_size
        result = vmem(runner, "session", "vacuum", "--db-url", str(db))
    finally:
        holder.kill()
        holder.wait()
    assert result.exit_code == 1
    assert f"held by pid {holder.pid} (" in result.stderr, result.stderr
    assert "nothing was changed" in result.stderr and db.stat().st_size == size
