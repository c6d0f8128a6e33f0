"""The session store's pieces: restricted unpickler, camelCase fast path, time specs, store API."""

from __future__ import annotations

import asyncio
import io
import pickle
import pickletools
import tracemalloc
from pathlib import Path
from typing import Any

import pytest
from google.adk.events.event_actions import EventActions
from hypothesis import given, settings
from hypothesis import strategies as st
from sessions_helpers import APP, adk_events, build, sqlite_url

from veadk_mem import events as ev
from veadk_mem.adkjson import printed_event
from veadk_mem.config import VmemSettings
from veadk_mem.errors import BadInput, NotFound, StoreError
from veadk_mem.sessions.safepickle import decode_actions, encode_actions
from veadk_mem.sessions.store import DeleteReport, SessionFilter, SessionKey, SessionStore, split_state
from veadk_mem.sessions.timespec import parse_duration, parse_time
from veadk_mem.sessions.url import given_db_url, session_db_url, sqlite_file, to_async_url

# --- restricted unpickler ---------------------------------------------------------------


class _System:
    def __reduce__(self) -> Any:
        import os

        return (os.system, ("echo pwned > /tmp/vmem-pickle-marker",))


class _Eval:
    def __reduce__(self) -> Any:
        return (eval, ("__import__('os').system('echo pwned > /tmp/vmem-pickle-marker')",))


class _Subprocess:
    def __reduce__(self) -> Any:
        import subprocess

        return (subprocess.check_call, (["touch", "/tmp/vmem-pickle-marker"],))


@pytest.mark.parametrize("payload", [_System(), _Eval(), _Subprocess()])
@pytest.mark.parametrize("protocol", [0, 2, 4, 5])
def test_crafted_pickles_are_refused_and_never_run(payload: Any, protocol: int) -> None:
    marker = Path("/tmp/vmem-pickle-marker")
    marker.unlink(missing_ok=True)
    data = pickle.dumps({"state_delta": {"x": payload}}, protocol=protocol)
    with pytest.raises(pickle.UnpicklingError, match="refusing to load"):
        decode_actions(data)
    assert not marker.exists()


def test_hand_written_opcodes_cannot_reach_callables() -> None:
    inst = b"(S'ls'\nios\nsystem\n."  # INST opcode, protocol 0
    with pytest.raises(pickle.UnpicklingError):
        decode_actions(inst)
    bomb = b"\x80\x04c__builtin__\nbytes\n\x8a\x05\x00\x00\x00\x00\x01\x85R."  # bytes(2**32) through a fix-import name
    with pytest.raises(pickle.UnpicklingError):
        decode_actions(bomb)
    stub_call = b"\x80\x04cgoogle.adk.x\n_private\n."
    with pytest.raises(pickle.UnpicklingError):
        decode_actions(stub_call)
    with pytest.raises(pickle.UnpicklingError, match="undecodable"):
        decode_actions(b"\x80\x04\x95")


def test_real_event_actions_decode_to_plain_data() -> None:
    from google.adk.auth.auth_tool import AuthConfig  # noqa: F401  (a nested model ADK can pickle)

    actions = EventActions(state_delta={"a": {"b": [1, 2]}, "when": "x"}, escalate=True, transfer_to_agent="helper")
    for protocol in (2, 4, 5):
        plain = decode_actions(pickle.dumps(actions, protocol=protocol))
        assert plain["state_delta"] == {"a": {"b": [1, 2]}, "when": "x"}
        assert plain["escalate"] is True and plain["transfer_to_agent"] == "helper"
        assert EventActions.model_validate({k: v for k, v in plain.items() if v is not None}) == actions


def test_encoded_actions_only_name_event_actions() -> None:
    data = encode_actions({"state_delta": {"k": {1, 2}}, "artifact_delta": {}})
    globals_named = [
        arg for op, arg, _ in pickletools.genops(io.BytesIO(data)) if op.name in ("GLOBAL", "STACK_GLOBAL")
    ]
    assert globals_named == ["google.adk.events.event_actions EventActions"]
    decoded = decode_actions(data)
    assert decoded["state_delta"] == {"k": [1, 2]} and decoded["artifact_delta"] == {}
    # Every other EventActions field is stored with its default: an old ADK drops a missing one.
    assert decoded["requested_auth_configs"] == {} and decoded["transfer_to_agent"] is None


# --- camelCase fast path ----------------------------------------------------------------


def test_camel_event_matches_the_models_on_adk_events() -> None:
    for event in adk_events(12):
        raw = event.model_dump(mode="json", exclude_none=True)
        assert printed_event(raw) == ev.Event.model_validate(raw).to_dict()
        camel = event.model_dump(mode="json", exclude_none=True, by_alias=True)
        assert printed_event(camel) == ev.Event.model_validate(camel).to_dict()


_json = st.recursive(
    st.none() | st.booleans() | st.integers(-5, 5) | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.sampled_from(["a_b", "c", "dE"]), inner, max_size=3),
    max_leaves=8,
)
_part = st.fixed_dictionaries(
    {},
    optional={
        "text": st.text(max_size=8),
        "thought": st.booleans(),
        "function_call": st.fixed_dictionaries(
            {"name": st.text(max_size=4)}, optional={"args": st.dictionaries(st.text(max_size=3), _json, max_size=2)}
        ),
        "inline_data": st.fixed_dictionaries({"mime_type": st.just("image/png"), "data": st.just("AAEC")}),
        "video_metadata": _json,
    },
)


@settings(max_examples=150, deadline=None)
@given(
    st.fixed_dictionaries(
        {"id": st.text(max_size=4)},
        optional={
            "author": st.text(max_size=4),
            "timestamp": st.floats(0, 2e9),
            "content": st.fixed_dictionaries(
                {"role": st.sampled_from(["user", "model"]), "parts": st.lists(_part, max_size=3)}
            ),
            "actions": st.fixed_dictionaries(
                {},
                optional={
                    "state_delta": st.dictionaries(st.text(max_size=3), _json, max_size=3),
                    "skip_summarization": st.booleans() | st.none(),
                },
            ),
            "custom_metadata": st.dictionaries(st.text(max_size=3), _json, max_size=2),
            "usage_metadata": _json,
            "error_code": st.none() | st.text(max_size=3),
        },
    )
)
def test_camel_event_matches_the_models_on_any_event(raw: dict[str, Any]) -> None:
    assert printed_event(raw) == ev.Event.model_validate(raw).to_dict()


# --- small parsers ------------------------------------------------------------------------


def test_time_specs() -> None:
    assert parse_duration("30d") == 30 * 86400 and parse_duration("90m") == 5400 and parse_duration("2w") == 14 * 86400
    assert parse_time("2026-11-01") == 1793491200.0
    assert parse_time("2026-11-01T08:00+08:00") == 1793491200.0
    assert parse_time("2026-11-01T00:00:00Z") == 1793491200.0
    assert parse_time("1h", now=10_000.0) == 6400.0
    with pytest.raises(BadInput, match="--older-than"):
        parse_duration("soon")


def test_urls() -> None:
    assert to_async_url("/tmp/a.db") == "sqlite+aiosqlite:////tmp/a.db"
    assert to_async_url("postgresql://u:p%40ss@h/db") == "postgresql+asyncpg://u:p%40ss@h/db"
    assert to_async_url("mysql+pymysql://u@h/db") == "mysql+aiomysql://u@h/db"
    with pytest.raises(BadInput) as info:
        to_async_url("mysql://u:p@ss@h/db")
    assert info.value.hint and "%40" in info.value.hint
    with pytest.raises(BadInput, match="the user or password contains an unencoded '@'"):
        to_async_url("mysql://u:p@ss:word@h/db")  # SQLAlchemy alone would read 'word@h' as the port
    with pytest.raises(BadInput, match="unsupported database 'post-gres'"):
        to_async_url("post-gres://h/db")
    with pytest.raises(BadInput, match=r"^postgresql://u:\*\*\*\*@h:x/db: invalid database URL \(ValueError\)$"):
        to_async_url("postgresql+asyncpg://u:pw@h:x/db")
    assert sqlite_file(to_async_url("sqlite:///:memory:")) is None
    assert sqlite_file(to_async_url("/tmp/a%41 b.db")) == "/tmp/a%41 b.db"  # the file named, not /tmp/aA b.db


def test_urls_built_from_config() -> None:
    cfg = VmemSettings.model_validate(
        {
            "short_term_memory": {"backend": "postgresql"},
            "database": {"postgresql": {"user": "me", "password": "p@ss:word", "database": "adk db", "port": 5433}},
        }
    )
    url = session_db_url(cfg)
    assert url == "postgresql+asyncpg://me:p%40ss%3Aword@127.0.0.1:5433/adk db"
    assert given_db_url(cfg, url) == "postgresql://me:p%40ss%3Aword@127.0.0.1:5433/adk db"
    cfg = VmemSettings.model_validate(
        {"short_term_memory": {"backend": "mysql"}, "database": {"mysql": {"database": "adk"}}}
    )
    assert session_db_url(cfg) == "mysql+aiomysql://127.0.0.1:3306/adk?charset=utf8mb4"


def test_split_state() -> None:
    assert split_state({"a": 1, "app:b": 2, "user:c": 3, "temp:d": 4}) == ({"b": 2}, {"c": 3}, {"a": 1})


# --- the store API ------------------------------------------------------------------------


@pytest.fixture
def adk_db(tmp_path: Path) -> str:
    url = sqlite_url(tmp_path / "adk.db")
    build(url, {("alice", "s1"): 6, ("alice", "s2"): 2, ("bob", "s3"): 4})
    return url


def test_store_api_for_other_commands(adk_db: str) -> None:
    async def go() -> None:
        async with SessionStore(adk_db) as store:
            seen = {(s.user_id, s.id): len(s.events) async for s in store.iter_sessions(SessionFilter(app=APP))}
            assert seen == {("alice", "s1"): 6, ("alice", "s2"): 2, ("bob", "s3"): 4}
            only = [s.id async for s in store.iter_sessions(SessionFilter(user="bob"))]
            assert only == ["s3"]
            with pytest.raises(NotFound):
                await store.get_session(APP, "alice", "missing")
            plan = await store.delete_sessions(SessionFilter(user="alice"), purge_state=True, dry_run=True)
            assert plan.dry_run and plan.events == 8 and plan.user_states == [(APP, "alice")] and plan.app_states == []
            assert (await store.list_sessions(count_only=True)).total == 3
            done = await store.delete_sessions(SessionFilter(user="alice"), purge_state=True)
            assert done.events == 8 and len(done.sessions) == 2
            assert (await store.list_sessions(count_only=True)).total == 1
            assert await store.delete_sessions(
                SessionFilter(older_than=10 * 365 * 86400), dry_run=True
            ) == DeleteReport(sessions=[], events=0, dry_run=True)
            old = await store.delete_sessions(SessionFilter(app=APP, older_than=86400), dry_run=True)
            assert [s.id for s in old.sessions] == ["s3"]  # its events are from September 2026
            done = await store.delete_sessions([SessionKey(APP, "bob", "s3")], purge_state=True)
            assert done.app_states == [APP] and done.user_states == [(APP, "bob")]

    asyncio.run(go())


def test_a_long_session_streams_in_bounded_memory(tmp_path: Path) -> None:
    url = sqlite_url(tmp_path / "long.db")
    n = 20_000
    text = "lorem ipsum " * 40
    session = ev.Session(
        id="long",
        app_name=APP,
        user_id="u",
        events=[
            ev.Event(
                id=f"e{i:06d}",
                author="user",
                timestamp=1.7e9 + i,
                content=ev.Content(role="user", parts=[ev.Part(text=text)]),
            )
            for i in range(n)
        ],
    )

    async def go() -> None:
        async with SessionStore(url, create=True) as store:
            await store.import_records([session])
        async with SessionStore(url) as store:
            tracemalloc.start()
            count = 0
            async for piece in store.session_json(APP, "u", "long"):
                count += piece.count('"author"')
            _, peak = tracemalloc.get_traced_memory()
            tracemalloc.stop()
            assert count == n
            assert peak < 8 * 1024 * 1024, peak  # the events alone are ~10 MB of JSON
            last = [e.id async for e in store.iter_events(APP, "u", "long", last=3)]
            assert last == [f"e{i:06d}" for i in range(n - 3, n)]

    asyncio.run(go())


# --- reads beside a writer ------------------------------------------------------------


def test_a_writer_left_open_is_rolled_back_when_its_connection_returns(tmp_path: Path) -> None:
    url = sqlite_url(tmp_path / "adk.db")
    build(url, {("alice", "s1"): 2})

    async def go() -> None:
        async with SessionStore(url) as store:
            async with store.db.engine.connect() as conn:
                raw = (await conn.get_raw_connection()).driver_connection
                await raw.execute("BEGIN IMMEDIATE")
                await raw.execute("DELETE FROM events")
                assert raw.in_transaction
            # the pool's reset hook rolled the open transaction back: nothing deleted, no lock held
            assert len((await store.get_session(APP, "alice", "s1")).events) == 2
            report = await store.delete_sessions([SessionKey(APP, "alice", "s1")])
            assert report.events == 2

    asyncio.run(go())


def test_reads_wait_on_a_locked_sqlite_file_then_fail_cleanly(tmp_path: Path) -> None:
    import sqlite3
    import time

    path = tmp_path / "adk.db"
    build(sqlite_url(path), {("alice", "s1"): 3})

    async def go() -> None:
        async with SessionStore(sqlite_url(path), busy_timeout=0.3) as store:
            await store.get_session(APP, "alice", "s1")  # statements cached, connection pooled
            holder = sqlite3.connect(path, isolation_level=None)
            holder.execute("BEGIN EXCLUSIVE")  # an agent committing: readers must wait
            try:
                for read in (
                    lambda: store.get_session(APP, "alice", "s1"),
                    lambda: store.list_sessions(SessionFilter(app=APP)),
                ):
                    started = time.monotonic()
                    with pytest.raises(StoreError, match="database is locked by another writer"):
                        await read()
                    assert time.monotonic() - started >= 0.3
            finally:
                holder.execute("ROLLBACK")
                holder.close()
            assert len((await store.get_session(APP, "alice", "s1")).events) == 3

    asyncio.run(go())


def test_importing_the_store_leaves_its_parts_unimported() -> None:
    """The read, export, delete and import parts are made, their modules imported, on first use:
    `session stats` (which reads through the engine alone) does not pay for the import machinery."""
    import subprocess
    import sys

    code = (
        "import sys, veadk_mem.sessions.store as s; "
        "print(' '.join(sorted(m for m in sys.modules if m.startswith('veadk_mem.sessions.'))))"
    )
    root = Path(__file__).resolve().parents[1]
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=root)
    loaded = set(out.stdout.split())
    parts = ("read_queries", "session_reads", "pages", "export", "deletes", "stored_rows", "state_purge")
    for part in (*parts, "long_delete", "writes", "limits", "upgrade", "validate", "codec", "statements"):
        assert f"veadk_mem.sessions.{part}" not in loaded, sorted(loaded)
    assert "veadk_mem.sessions.engine" in loaded
