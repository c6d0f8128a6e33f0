"""Issue 9: nothing lost, nothing leaked. Each test here failed on the code before the fix."""

from __future__ import annotations

import asyncio
import gc
import json
from pathlib import Path
from typing import Any

import pytest
from sessions_helpers import APP, adk_service, build, sqlite_url
from typer.testing import CliRunner

from veadk_mem.cli.app import app
from veadk_mem.sessions.store import SessionFilter, SessionStore


def vmem(runner: CliRunner, *args: str, input: str | bytes | None = None) -> Any:
    return runner.invoke(app, list(args), input=input)


def _session(sid: str, *, user: str = "u", app_name: str = "a", n: int = 1, t: float = 1_790_000_000.0) -> dict:
    events = [
        {
            "id": f"{sid.strip() or 'x'}-{i}",
            "author": "user",
            "invocationId": "inv",
            "timestamp": t + i,
            "content": {"role": "user", "parts": [{"text": f"hi {i}"}]},
        }
        for i in range(n)
    ]
    return {"id": sid, "appName": app_name, "userId": user, "state": {}, "events": events, "lastUpdateTime": t + n}


def _write(path: Path, records: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


def _ids(url: str) -> list[str]:
    async def go() -> list[str]:
        async with SessionStore(url) as store:
            return sorted(s.id for s in await store.list_sessions())

    return asyncio.run(go())


# --- 1. MariaDB's collation must never merge sessions --------------------------------------


def test_ids_equal_under_mariadb_collation_are_refused_before_writing(
    runner: CliRunner, mysql_url: str, tmp_path: Path
) -> None:
    dump = _write(tmp_path / "d.jsonl", [_session("Order-1"), _session("order-1"), _session("order-1 ")])
    result = vmem(runner, "session", "import", str(dump), "--db-url", mysql_url)
    assert result.exit_code == 2, result.output
    assert "'a/u/Order-1' (" in result.stderr and "'a/u/order-1 '" in result.stderr and "line 3" in result.stderr
    # and against what is stored: one imported, then a differently-cased one is refused
    first = _write(tmp_path / "one.jsonl", [_session("Order-1", n=3)])
    assert vmem(runner, "session", "import", str(first), "--db-url", mysql_url).exit_code == 0
    other = _write(tmp_path / "two.jsonl", [_session("order-1")])
    result = vmem(runner, "session", "import", str(other), "--db-url", mysql_url)
    assert result.exit_code == 2 and "'a/u/Order-1' in the database" in result.stderr, result.output
    assert _ids(mysql_url) == ["Order-1"]


def test_app_and_user_names_equal_under_mariadb_collation_are_refused_before_writing(
    runner: CliRunner, mysql_url: str, tmp_path: Path
) -> None:
    """Their state rows are keyed by app (and user): "Shop" and "shop" would merge two apps' state."""
    apps = _write(
        tmp_path / "apps.jsonl",
        [_session("s1", app_name="Shop"), _session("s2", app_name="shop")],
    )
    result = vmem(runner, "session", "import", str(apps), "--db-url", mysql_url)
    assert result.exit_code == 2, result.output
    assert "apps 'Shop' (" in result.stderr and "= 'shop' (" in result.stderr and "line 2" in result.stderr
    users = _write(
        tmp_path / "users.jsonl",
        [
            {"kind": "user_state", "appName": "a", "userId": "Alice", "state": {"lang": "en"}},
            _session("s3", user="alice"),
        ],
    )
    result = vmem(runner, "session", "import", str(users), "--db-url", mysql_url)
    assert result.exit_code == 2 and "'a/Alice' (" in result.stderr and "'a/alice' (" in result.stderr, result.output
    # against the stored state rows: an app_state of "Shop", then a session of app "SHOP"
    stored = _write(tmp_path / "one.jsonl", [{"kind": "app_state", "appName": "Shop", "state": {"tier": "gold"}}])
    assert vmem(runner, "session", "import", str(stored), "--db-url", mysql_url).exit_code == 0
    other = _write(tmp_path / "two.jsonl", [_session("s4", app_name="SHOP")])
    result = vmem(runner, "session", "import", str(other), "--db-url", mysql_url)
    assert result.exit_code == 2 and "= 'Shop' in the database" in result.stderr, result.output
    assert _ids(mysql_url) == []  # nothing of the refused files was written


def test_get_and_delete_by_id_are_exact_on_mariadb(runner: CliRunner, mysql_url: str, tmp_path: Path) -> None:
    dump = _write(tmp_path / "d.jsonl", [_session("Order-1", n=2)])
    assert vmem(runner, "session", "import", str(dump), "--db-url", mysql_url).exit_code == 0
    for sid in ("order-1", "Order-1 "):
        assert vmem(runner, "session", "get", "a", "u", sid, "--db-url", mysql_url).exit_code == 3
        result = vmem(runner, "session", "delete", "a", "u", sid, "--yes", "--db-url", mysql_url)
        assert result.exit_code == 3, result.output
    assert vmem(runner, "session", "list", "--user", "U", "--db-url", mysql_url, "--json").stdout.strip() == "[]"
    assert _ids(mysql_url) == ["Order-1"]
    assert vmem(runner, "session", "get", "a", "u", "Order-1", "--db-url", mysql_url).exit_code == 0


# --- 2. delete --older-than re-checks inside the deleting transaction -----------------------


def test_delete_skips_a_session_resumed_after_the_plan(tmp_path: Path) -> None:
    from google.adk.events import Event

    db = tmp_path / "veadk.db"
    url = sqlite_url(db)
    build(url, {("alice", "old"): 2, ("alice", "older"): 2})  # events of 2026-ish: old by now

    async def go() -> Any:
        async with SessionStore(str(db)) as store:
            flt = SessionFilter(app=APP, older_than=3600)
            plan = await store.list_sessions(flt, oldest_first=True)
            assert {s.id for s in plan} == {"old", "older"}
            # the agent resumes "old" while the confirmation prompt waits
            service = adk_service(url)
            try:
                session = await service.get_session(app_name=APP, user_id="alice", session_id="old")
                await service.append_event(session, Event(author="user", invocation_id="late"))
            finally:
                await service.close()
            report = await store.delete_sessions(plan, recheck=True)
            left = await store.list_sessions()
            return report, left

    report, left = asyncio.run(go())
    assert [s.id for s in report.sessions] == ["older"]
    assert [str(k) for k in report.skipped] == [f"{APP}/alice/old"]
    assert [s.id for s in left] == ["old"] and left[0].event_count == 3


def test_cli_delete_reports_what_it_skipped(runner: CliRunner, tmp_path: Path, monkeypatch: Any) -> None:
    from google.adk.events import Event

    db = tmp_path / "veadk.db"
    url = sqlite_url(db)
    build(url, {("alice", "old"): 2, ("alice", "older"): 2})
    import veadk_mem.cli.session as cli

    def resume_then_confirm(state: Any, question: str, *, yes: bool) -> None:
        async def resume() -> None:
            service = adk_service(url)
            try:
                session = await service.get_session(app_name=APP, user_id="alice", session_id="old")
                await service.append_event(session, Event(author="user", invocation_id="late"))
            finally:
                await service.close()

        import threading

        thread = threading.Thread(target=lambda: asyncio.run(resume()))  # the agent, elsewhere
        thread.start()
        thread.join()

    monkeypatch.setattr(cli, "confirm_deletion", resume_then_confirm)
    result = vmem(runner, "session", "delete", "--app", APP, "--older-than", "1h", "--db-url", str(db))
    assert result.exit_code == 0, result.output
    assert "deleted 1 session" in result.stderr
    assert f"{APP}/alice/old: kept, it was updated after it was listed" in result.stderr
    assert _ids(str(db)) == ["old"]


# --- 3. everything the target refuses is found before the first write ------------------------


def _bad_cases(dialect: str) -> list[tuple[dict, str]]:
    ok = _session("fine")
    cases: list[tuple[dict, str]] = []
    nan_ts = _session("s")
    nan_ts["events"][0]["timestamp"] = float("nan")
    cases.append((nan_ts, "$.events[0].timestamp"))
    far = _session("s")
    far["events"][0]["timestamp"] = 1e15
    cases.append((far, "$.events[0].timestamp"))
    nan_state = _session("s")
    nan_state["state"] = {"deep": {"x": [1, float("inf")]}}
    cases.append((nan_state, "$.state.deep.x[1]"))
    surrogate = _session("s")
    surrogate["events"][0]["content"]["parts"][0]["text"] = "a\ud800b"
    cases.append((surrogate, "$.events[0].content.parts[0].text"))
    if dialect != "sqlite":
        long_id = _session("x" * 129)
        cases.append((long_id, "$.id"))
        long_inv = _session("s")
        long_inv["events"][0]["invocationId"] = "i" * 257
        cases.append((long_inv, "$.events[0].invocationId"))
    if dialect == "postgresql":
        nul = _session("s")
        nul["events"][0]["content"]["parts"][0]["text"] = "a\x00b"
        cases.append((nul, "$.events[0].content.parts[0].text"))
    del ok
    return cases


@pytest.mark.parametrize("dialect", ["sqlite", "postgresql", "mysql"])
def test_values_the_target_refuses_are_named_before_any_write(
    runner: CliRunner, dialect: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    url = (
        str(tmp_path / "t.db")
        if dialect == "sqlite"
        else str(request.getfixturevalue("pg_url" if dialect == "postgresql" else "mysql_url"))
    )
    good = _write(tmp_path / "good.jsonl", [_session("seed")])
    assert vmem(runner, "session", "import", str(good), "--db-url", url).exit_code == 0
    for bad, path in _bad_cases(dialect):
        dump = tmp_path / "bad.jsonl"
        text = json.dumps(_session("first")) + "\n" + json.dumps(bad) + "\n"
        dump.write_text(text, encoding="utf-8", errors="surrogatepass")
        result = vmem(runner, "session", "import", str(dump), "--db-url", url)
        assert result.exit_code == 2, (path, result.output)
        assert f"{dump}: line 2: {path}:" in result.stderr, (path, result.stderr)
        assert _ids(url) == ["seed"], path  # nothing written: not even line 1


def test_an_event_larger_than_max_allowed_packet_is_named(runner: CliRunner, mysql_url: str, tmp_path: Path) -> None:
    import pymysql

    conn = pymysql.connect(host="127.0.0.1", port=3306, user="root", password="")
    with conn.cursor() as cur:
        cur.execute("SELECT @@max_allowed_packet")
        packet = int(cur.fetchone()[0])
    conn.close()
    big = _session("big", n=2)
    big["events"][1]["content"]["parts"][0]["text"] = "x" * (packet + 10)
    dump = _write(tmp_path / "d.jsonl", [_session("first"), big])
    result = vmem(runner, "session", "import", str(dump), "--db-url", mysql_url)
    assert result.exit_code == 2, result.output
    assert "line 2: $.events[1]:" in result.stderr and "max_allowed_packet" in result.stderr


def test_a_failure_mid_way_says_how_many_sessions_were_written(tmp_path: Path) -> None:
    """A write failing after some batches committed names the count, never 'nothing was changed'."""
    from veadk_mem import events as ev
    from veadk_mem.errors import StoreError

    db = tmp_path / "t.db"
    sessions = [ev.Session.model_validate(_session(f"s{i}", n=2)) for i in range(10)]

    def records() -> Any:
        yield from sessions[:7]
        raise StoreError("disk on fire; nothing was changed")

    async def go() -> None:
        async with SessionStore(str(db), create=True) as store:
            await store.import_records(records(), batch_rows=7, batch_seconds=3600)  # cut by rows only

    assert gc.isenabled()
    with pytest.raises(StoreError) as info:
        asyncio.run(go())
    assert gc.isenabled()  # the import paused the cyclic collector; a failure restores it too
    assert "6 session(s) before it were written" in info.value.message
    assert "nothing was changed" not in info.value.message
    assert len(_ids(str(db))) == 6  # 3 rows a session: a batch commits every 3 sessions; the 7th was in the open one


# --- 4. import merges app and user state ------------------------------------------------------


def test_import_merges_app_and_user_state(runner: CliRunner, tmp_path: Path) -> None:
    db = tmp_path / "t.db"
    now = [
        {"kind": "app_state", "appName": "a", "state": {"old": 1, "kept": 1}},
        {"kind": "user_state", "appName": "a", "userId": "u", "state": {"lang": "zh", "added": True}},
        _session("s"),
    ]
    assert (
        vmem(runner, "session", "import", str(_write(tmp_path / "now.jsonl", now)), "--db-url", str(db)).exit_code == 0
    )
    backup = [
        {"kind": "app_state", "appName": "a", "state": {"old": 0}},
        {"kind": "user_state", "appName": "a", "userId": "u", "state": {"lang": "en"}},
    ]
    result = vmem(runner, "session", "import", str(_write(tmp_path / "b.jsonl", backup)), "--db-url", str(db))
    assert result.exit_code == 0, result.output
    state = json.loads(vmem(runner, "session", "get", "a", "u", "s", "--json", "--db-url", str(db)).stdout)["state"]
    assert state == {"app:old": 0, "app:kept": 1, "user:lang": "en", "user:added": True}


# --- 6. an older export never drops newer events ----------------------------------------------


def test_importing_an_older_export_over_a_live_session_is_refused(runner: CliRunner, tmp_path: Path) -> None:
    from google.adk.events import Event

    db = tmp_path / "veadk.db"
    url = sqlite_url(db)
    build(url, {("alice", "live"): 3, ("alice", "quiet"): 2})
    backup = tmp_path / "backup.jsonl"
    assert vmem(runner, "session", "export", "-o", str(backup), "--db-url", str(db)).exit_code == 0

    async def resume() -> None:
        service = adk_service(url)
        try:
            session = await service.get_session(app_name=APP, user_id="alice", session_id="live")
            await service.append_event(session, Event(author="user", invocation_id="new"))
        finally:
            await service.close()

    asyncio.run(resume())
    result = vmem(runner, "session", "import", str(backup), "--db-url", str(db))
    assert result.exit_code == 2, result.output
    assert f"{APP}/alice/live" in result.stderr and "--force" in result.stderr
    assert f"{APP}/alice/quiet" not in result.stderr

    async def count() -> int:
        async with SessionStore(str(db)) as store:
            return (await store.get_summary(APP, "alice", "live")).event_count

    assert asyncio.run(count()) == 4  # the new event is still there
    result = vmem(runner, "session", "import", str(backup), "--force", "--db-url", str(db))
    assert result.exit_code == 0, result.output
    assert asyncio.run(count()) == 3


def test_store_skips_a_session_that_changed_during_the_import(tmp_path: Path) -> None:
    from veadk_mem import events as ev

    db = tmp_path / "t.db"
    newer = ev.Session.model_validate(_session("s", n=3, t=1_790_000_100.0))
    older = ev.Session.model_validate(_session("s", n=1))

    async def go() -> Any:
        async with SessionStore(str(db), create=True) as store:
            await store.import_records([newer])
            return await store.import_records([older], force=False)

    report = asyncio.run(go())
    assert report.skipped == ["a/u/s"] and report.sessions == 0


# --- 5. a stalled export never locks the agent out ---------------------------------------------


async def _adk_appends(url: str, session_id: str, invocation_id: str, n: int = 3) -> int:
    """How many of n append_event calls ADK completes on alice's session while a vmem reader holds
    its place. A reader holding a sqlite lock makes the write fail with "database is locked" after
    the 2 s busy timeout: the count, not a clock, tells whether the writer was blocked."""
    from google.adk.events import Event

    service = adk_service(url + "?timeout=2")  # fail fast instead of waiting 5 s
    done = 0
    try:
        for _ in range(n):
            session = await service.get_session(app_name=APP, user_id="alice", session_id=session_id)
            await service.append_event(session, Event(author="user", invocation_id=invocation_id))
            done += 1
        return done
    finally:
        await service.close()


def test_a_stalled_export_does_not_block_adks_append_event(tmp_path: Path) -> None:
    """`vmem session export | less`: the reader stops mid-stream; ADK must still write."""
    from veadk_mem import events as ev

    db = tmp_path / "veadk.db"
    url = sqlite_url(db)
    build(url, {("alice", "s39"): 2})  # ADK's own tables, then 1,200 events more (fast: vmem's import)
    more = [ev.Session.model_validate(_session(f"s{i}", user="alice", app_name=APP, n=30)) for i in range(39)]

    async def load() -> None:
        async with SessionStore(str(db)) as store:
            await store.import_records(more)

    asyncio.run(load())

    async def go() -> tuple[int, str]:
        async with SessionStore(str(db)) as store:
            pieces = store.export_jsonl(batch_events=300)
            async for piece in pieces:  # read up to the first session, then stall there
                if '"events":[' in piece:
                    break
            appended = await _adk_appends(url, "s39", "while-exporting")
            rest = "".join([piece async for piece in pieces])
            return appended, rest

    appended, rest = asyncio.run(go())
    assert appended == 3  # ADK's writer was never blocked by the stalled reader
    assert '"invocationId":"while-exporting"' in rest  # s39 is read after the write: in a later batch


def test_a_stalled_get_json_of_a_long_session_does_not_block_adks_append_event(tmp_path: Path) -> None:
    """`vmem session get --json | less` on a session of more than one batch (500 events)."""
    from veadk_mem import events as ev

    db = tmp_path / "veadk.db"
    url = sqlite_url(db)
    build(url, {("alice", "other"): 1})
    long = ev.Session.model_validate(_session("long", user="alice", app_name=APP, n=700))

    async def load() -> None:
        async with SessionStore(str(db)) as store:
            await store.import_records([long])

    asyncio.run(load())

    async def go() -> tuple[int, str]:
        async with SessionStore(str(db)) as store:
            pieces = store.session_json(APP, "alice", "long")
            head = await anext(pieces)  # the reader takes the head, then stalls
            appended = await _adk_appends(url, "long", "while-reading")
            rest = "".join([piece async for piece in pieces])
            return appended, head + rest

    appended, text = asyncio.run(go())
    assert appended == 3  # ADK's writer was never blocked by the stalled reader
    got = json.loads(text)
    assert len(got["events"]) == 700  # one snapshot: the event appended meanwhile is not half in it
    assert "while-reading" not in text


def test_export_batches_keep_every_session_whole(tmp_path: Path) -> None:
    db = tmp_path / "veadk.db"
    build(sqlite_url(db), {("alice", "big"): 50, ("bob", "a"): 3, ("bob", "b"): 0})

    async def go(batch: int) -> list[dict]:
        async with SessionStore(str(db)) as store:
            text = "".join([p async for p in store.export_jsonl(batch_events=batch)])
        return [json.loads(line) for line in text.splitlines()]

    small, one = asyncio.run(go(5)), asyncio.run(go(100_000))
    assert small == one
    counts = {r["id"]: len(r["events"]) for r in small if "id" in r}
    assert counts == {"big": 50, "a": 3, "b": 0}


def test_export_reads_the_next_batch_while_it_converts_this_one_and_cancels_it_when_left(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The read-ahead: batch 2 is being read before batch 1's lines are handed over; a caller that
    stops after one batch leaves no read running and no task pending."""
    db = tmp_path / "veadk.db"
    build(sqlite_url(db), {("alice", "a"): 10, ("alice", "b"): 10, ("alice", "c"): 10})

    async def go() -> tuple[list[int], list[int]]:
        async with SessionStore(str(db)) as store:
            from veadk_mem.sessions.export import Export

            started: list[int] = []
            read = Export._read_batch

            async def counted(self: Export, batch: Any) -> Any:
                started.append(len(batch))
                return await read(self, batch)

            monkeypatch.setattr(Export, "_read_batch", counted)
            pieces = store.export_jsonl(batch_events=5)  # a session a batch
            async for piece in pieces:
                if '"events":[' in piece:
                    break
            at_first = list(started)
            await pieces.aclose()
            left = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            return at_first, [len(left)]

    at_first, left = asyncio.run(go())
    assert at_first == [1, 1]  # the second batch was started before the first was handed over
    assert left == [0]


# --- 8. a hostile pickle costs one event its actions, never the command ------------------------


def _laughs() -> bytes:
    """A few hundred bytes that expand to 10**30 values: one list shared by memo references."""
    import pickle

    value: list = ["lol"]
    for _ in range(30):
        value = [value] * 10
    data = pickle.dumps({"state_delta": {"x": value}}, protocol=2)
    assert len(data) < 1000
    return data


def _deep(n: int = 100_000) -> bytes:
    """{'state_delta': [[[...]]]} nested n lists deep, built opcode by opcode."""
    key = b"state_delta"
    return b"\x80\x02}X" + len(key).to_bytes(4, "little") + key + b"]" * n + b"a" * (n - 1) + b"s."


def test_bounded_unpickler_refuses_bombs_with_unpickling_error() -> None:
    import pickle

    from veadk_mem.sessions.safepickle import decode_actions

    for payload in (_laughs(), _deep(), b"\x80\x02" + b"X" + (1 << 25).to_bytes(4, "little") + b"x" * (1 << 25)):
        with pytest.raises(pickle.UnpicklingError):
            decode_actions(payload)


def test_a_v0_event_with_a_pickle_bomb_is_shown_without_its_actions(runner: CliRunner, tmp_path: Path) -> None:
    import sqlite3

    from sessions_helpers import build_v0

    db = tmp_path / "v0.db"
    build_v0(sqlite_url(db), {("alice", "old"): 6})
    with sqlite3.connect(db) as conn:
        conn.execute("UPDATE events SET actions = ? WHERE rowid = 2", (_laughs(),))
        conn.execute("UPDATE events SET actions = ? WHERE rowid = 3", (_deep(),))
    result = vmem(runner, "session", "get", APP, "alice", "old", "--json", "--db-url", str(db))
    assert result.exit_code == 0, result.output
    assert len(json.loads(result.stdout)["events"]) == 6
    assert result.stderr.count("actions not decoded") == 2
    result = vmem(runner, "session", "export", "--db-url", str(db))
    assert result.exit_code == 0 and '"stateDelta"' in result.stdout, result.output


# --- 11. the allow-list keeps step with ADK's own ------------------------------------------------


def test_unpickler_allows_what_adk_allows_and_names_its_extras() -> None:
    from google.adk.sessions import _restricted_pickle as adk_pickle

    from veadk_mem.sessions import safepickle

    adk = set(adk_pickle._allowed_globals())
    ours = set(safepickle._SAFE_GLOBALS)
    stubbed = {g for g in adk if g[0].startswith(safepickle._MODEL_MODULE_PREFIXES)}
    assert adk - stubbed - ours == set()  # everything ADK loads, we load
    assert all(safepickle.RestrictedUnpickler(io_empty()).find_class(*g) for g in stubbed)
    assert ours - adk == set(safepickle.EXTRA_GLOBALS)  # and what we load beyond it is named


def io_empty() -> Any:
    import io

    return io.BytesIO(b"")


def test_defaultdict_and_paths_in_state_delta_decode_as_adk_loads_them() -> None:
    import collections
    import pathlib
    import pickle

    from google.adk.events import EventActions
    from google.adk.sessions import _restricted_pickle as adk_pickle

    from veadk_mem.sessions.safepickle import decode_actions

    counts = collections.defaultdict(int, {"a": 1})
    actions = EventActions(state_delta={"counts": counts, "path": pathlib.PurePosixPath("/srv/x.txt")})
    for protocol in (4, 5):  # ADK writes pickle.HIGHEST_PROTOCOL
        data = pickle.dumps(actions, protocol=protocol)
        assert adk_pickle.loads(data).state_delta["counts"] == {"a": 1}  # ADK loads it
        decoded = decode_actions(data)
        assert decoded["state_delta"] == {"counts": {"a": 1}, "path": "/srv/x.txt"}


# --- 9. no command prints a planted secret, with or without --verbose ----------------------------

SECRET = "Sup3rS3cretPw"


def _secret_places(tmp_path: Path, pg_url: str) -> list[tuple[str, list[str], dict[str, str]]]:
    """(label, --db-url args, environment) for every place a session-store secret can be given."""
    db = pg_url.rsplit("/", 1)[1]
    live_q = f"postgresql://postgres@127.0.0.1:5432/{db}?password={SECRET}"  # trust auth: it connects
    live_u = f"postgresql://postgres:{SECRET}@127.0.0.1:5432/{db}"
    dead_pg = f"postgresql://postgres@127.0.0.1:1/{db}?password={SECRET}"
    dead_my = f"mysql://root@127.0.0.1:1/x?password={SECRET}&charset=utf8mb4"
    toml = tmp_path / "vmem.toml"
    toml.write_text(
        f'[short_term_memory]\nbackend = "postgresql"\n[database.postgresql]\nhost = "127.0.0.1"\nport = 1\n'
        f'user = "postgres"\npassword = "{SECRET}"\ndatabase = "{db}"\n',
        encoding="utf-8",
    )
    env_pg = {
        "SHORT_TERM_MEMORY_BACKEND": "postgresql",
        "DATABASE_POSTGRESQL_USER": "postgres",
        "DATABASE_POSTGRESQL_PASSWORD": SECRET,
        "DATABASE_POSTGRESQL_DATABASE": db,
        "DATABASE_POSTGRESQL_PORT": "1",
    }
    env_my = {
        "SHORT_TERM_MEMORY_BACKEND": "mysql",
        "DATABASE_MYSQL_USER": "root",
        "DATABASE_MYSQL_PASSWORD": SECRET,
        "DATABASE_MYSQL_DATABASE": "x",
        "DATABASE_MYSQL_PORT": "1",
    }
    return [
        ("query, live", ["--db-url", live_q], {}),
        ("userinfo, live", ["--db-url", live_u], {}),
        ("query, unreachable pg", ["--db-url", dead_pg], {}),
        ("query, unreachable mysql", ["--db-url", dead_my], {}),
        ("env url", [], {"SHORT_TERM_MEMORY_DB_URL": dead_pg}),
        ("env password pg", [], env_pg),
        ("env password mysql", [], env_my),
        ("config file", [], {"VMEM_CONFIG": str(toml)}),
    ]


def test_no_session_command_prints_a_planted_secret(runner: CliRunner, pg_url: str, tmp_path: Path) -> None:
    seed = _write(tmp_path / "seed.jsonl", [_session("s1", app_name=APP, user="alice")])
    assert vmem(runner, "session", "import", str(seed), "--db-url", pg_url).exit_code == 0
    commands = [
        ["session", "list"],
        ["session", "get", APP, "alice", "s1"],
        ["session", "get", APP, "alice", "nope"],
        ["session", "delete", APP, "alice", "s1", "--dry-run"],
        ["session", "export"],
        ["session", "import", str(seed)],
        ["config", "show"],
        ["config", "show", "--json"],
    ]
    checked = 0
    for label, url_args, env in _secret_places(tmp_path, pg_url):
        for command in commands:
            for verbose in ([], ["--verbose"]):
                args = verbose + command + (url_args if command[0] == "session" else [])
                if command[0] == "config" and url_args:
                    env = {**env, "SHORT_TERM_MEMORY_DB_URL": url_args[1]}
                result = runner.invoke(app, args, env=env)
                out = result.stdout + result.stderr
                assert SECRET not in out, (label, args, out)
                checked += 1
    assert checked == 128


# --- 10. files: no symlink followed, private modes, no escape sequences on the terminal ----------


def test_export_never_follows_a_planted_part_symlink_and_is_private(runner: CliRunner, tmp_path: Path) -> None:
    import os
    import stat

    db = tmp_path / "t.db"
    _write(tmp_path / "seed.jsonl", [_session("s1")])
    assert vmem(runner, "session", "import", str(tmp_path / "seed.jsonl"), "--db-url", str(db)).exit_code == 0
    assert stat.S_IMODE(db.stat().st_mode) == 0o600  # a created session database is private
    victim = tmp_path / "victim.txt"
    victim.write_text("precious", encoding="utf-8")
    out = tmp_path / "out.jsonl"
    (tmp_path / "out.jsonl.part").symlink_to(victim)
    result = vmem(runner, "session", "export", "-o", str(out), "--db-url", str(db))
    assert result.exit_code == 0, result.output
    assert victim.read_text(encoding="utf-8") == "precious"
    assert '"id":"s1"' in out.read_text(encoding="utf-8")
    assert stat.S_IMODE(out.stat().st_mode) == 0o600
    # a .part a killed export left goes; a running export's (it holds the part's lock) stays
    import fcntl

    old, fresh = tmp_path / "out.jsonl.abc123.part", tmp_path / "out.jsonl.def456.part"
    old.write_text("x", encoding="utf-8")
    fresh.write_text("x", encoding="utf-8")
    holder = os.open(fresh, os.O_RDONLY)
    fcntl.flock(holder, fcntl.LOCK_EX)
    try:
        assert vmem(runner, "session", "export", "-o", str(out), "--db-url", str(db)).exit_code == 0
    finally:
        os.close(holder)
    assert not old.exists() and fresh.exists()


def test_stdin_spool_is_private_removed_and_stale_ones_cleaned(tmp_path: Path, monkeypatch: Any) -> None:
    import io
    import os
    import stat
    import sys

    from veadk_mem.sessions.files import SPOOL_PREFIX, spool_dir, spooled_stdin

    directory = spool_dir()
    stale = directory / f"{SPOOL_PREFIX}old.jsonl"
    stale.write_text("{}", encoding="utf-8")
    os.utime(stale, (1_000_000_000, 1_000_000_000))

    class Stdin(io.TextIOWrapper):
        pass

    monkeypatch.setattr(sys, "stdin", Stdin(io.BytesIO(b'{"id": "\xff"}\n'), encoding="utf-8"))
    with spooled_stdin() as path:
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        assert stat.S_IMODE(directory.stat().st_mode) == 0o700
        assert path.read_bytes() == b'{"id": "\xff"}\n'  # bytes as given: no UnicodeEncodeError
    assert not path.exists() and not stale.exists()


def test_non_utf8_stdin_is_bad_input_and_leaves_no_spool(runner: CliRunner, tmp_path: Path) -> None:
    from veadk_mem.sessions.files import SPOOL_PREFIX, spool_dir

    result = vmem(runner, "session", "import", "-", "--db-url", str(tmp_path / "t.db"), input=b'{"id": "\xff\xfe"}\n')
    assert result.exit_code == 2, result.output
    assert "<stdin>" in result.stderr and "UTF-8" in result.stderr
    assert not list(spool_dir().glob(SPOOL_PREFIX + "*"))


def test_escape_sequences_in_chat_text_and_ids_never_reach_the_terminal(runner: CliRunner, tmp_path: Path) -> None:
    db = tmp_path / "t.db"
    evil = "\x1b]0;pwned\x07\x1b[2J\x9b31m\u202e"
    session = _session(f"s{evil}", user=f"u{evil}")
    session["events"][0]["content"]["parts"][0]["text"] = f"hello {evil} world"
    session["state"] = {f"k{evil}": f"v{evil}"}
    session["events"][0]["actions"] = {"stateDelta": {"x": evil}}
    assert (
        vmem(runner, "session", "import", str(_write(tmp_path / "e.jsonl", [session])), "--db-url", str(db)).exit_code
        == 0
    )
    outputs = [
        vmem(runner, "session", "list", "--db-url", str(db)),
        vmem(runner, "session", "get", "a", f"u{evil}", f"s{evil}", "--db-url", str(db)),
    ]
    for result in outputs:
        assert result.exit_code == 0, result.output
        for bad in ("\x1b", "\x07", "\x9b", "\u202e"):
            assert bad not in result.stdout + result.stderr
    assert "\\x1b]0;pwned" in outputs[1].stdout
    as_json = vmem(runner, "session", "get", "a", f"u{evil}", f"s{evil}", "--json", "--db-url", str(db))
    assert json.loads(as_json.stdout)["events"][0]["content"]["parts"][0]["text"] == f"hello {evil} world"


# --- 12-14. crashes, exit codes, unclear errors -------------------------------------------------


def test_a_directory_as_db_url_is_bad_input_without_a_traceback(runner: CliRunner, tmp_path: Path) -> None:
    for _ in range(4):  # the aiosqlite thread traceback came in about half the runs
        result = vmem(runner, "session", "list", "--db-url", str(tmp_path))
        assert result.exit_code == 2, result.output
        assert result.stderr.startswith(f"vmem: error: {tmp_path}: is a directory") and "Traceback" not in result.stderr


def test_deeply_nested_json_is_bad_input(runner: CliRunner, tmp_path: Path) -> None:
    dump = tmp_path / "deep.jsonl"
    nested = '{"x":' * 100_000 + "1" + "}" * 100_000
    dump.write_text(json.dumps(_session("ok")) + "\n" + nested + "\n", encoding="utf-8")
    result = vmem(runner, "session", "import", str(dump), "--db-url", str(tmp_path / "t.db"))
    assert result.exit_code == 2, result.output
    assert "line 2" in result.stderr and "nested too deeply" in result.stderr
    assert not (tmp_path / "t.db").exists()


def _strict(text: str) -> Any:
    def refuse(name: str) -> Any:
        raise AssertionError(f"invalid JSON constant {name}")

    return json.loads(text, parse_constant=refuse)


def test_nan_stored_by_an_agent_is_written_as_null(runner: CliRunner, tmp_path: Path) -> None:
    import sqlite3

    db = tmp_path / "veadk.db"
    build(sqlite_url(db), {("alice", "s1"): 2})
    with sqlite3.connect(db) as conn:
        conn.execute("""UPDATE sessions SET state = '{"score": NaN, "top": Infinity}'""")
    result = vmem(runner, "session", "get", APP, "alice", "s1", "--json", "--db-url", str(db))
    assert result.exit_code == 0, result.output
    assert _strict(result.stdout)["state"]["score"] is None
    result = vmem(runner, "session", "export", "--db-url", str(db))
    assert result.exit_code == 0
    for line in result.stdout.splitlines():
        _strict(line)


def test_empty_db_url_and_huge_durations_are_bad_input(runner: CliRunner, tmp_path: Path, monkeypatch: Any) -> None:
    db = tmp_path / "configured.db"
    build(sqlite_url(db), {("alice", "s1"): 1})
    monkeypatch.setenv("SHORT_TERM_MEMORY_LOCAL_DATABASE_PATH", str(db))
    result = vmem(runner, "session", "delete", "--app", APP, "--yes", "--db-url", "")
    assert result.exit_code == 2 and "--db-url: empty" in result.stderr, result.output
    assert _ids(str(db)) == ["s1"]  # the configured database was not touched
    for args in (["list", "--since", "99999999d"], ["delete", "--app", APP, "--older-than", "99999999d", "--yes"]):
        result = vmem(runner, "session", *args, "--db-url", str(db))
        assert result.exit_code == 2, (args, result.output)
        assert "1,000 years" in result.stderr
    assert _ids(str(db)) == ["s1"]


def test_packet_too_large_is_not_reported_as_cannot_connect(mysql_url: str) -> None:
    """Past the import's own check (a library caller): the server drops the connection mid-statement."""
    from veadk_mem import events as ev
    from veadk_mem.errors import StoreError

    big = _session("x")
    big["events"][0]["content"]["parts"][0]["text"] = "x" * (17 << 20)  # over the default 16 MiB packet
    session = ev.Session.model_validate(big)

    async def go() -> None:
        async with SessionStore(mysql_url, create=True) as store:
            await store.import_records([session])

    with pytest.raises(StoreError) as info:
        asyncio.run(go())
    assert "cannot connect" not in info.value.message
    assert "during a statement" in info.value.message and "max_allowed_packet" in (info.value.hint or "")


def test_a_corrupt_row_is_named_and_skipped_and_the_command_exits_1(runner: CliRunner, tmp_path: Path) -> None:
    import sqlite3

    db = tmp_path / "veadk.db"
    build(sqlite_url(db), {("alice", "s1"): 2, ("alice", "bad_state"): 2, ("bob", "bad_event"): 3})
    with sqlite3.connect(db) as conn:
        conn.execute("UPDATE sessions SET state = '[1, 2]' WHERE id = 'bad_state'")
        event_id = conn.execute("SELECT id FROM events WHERE session_id = 'bad_event' LIMIT 1").fetchone()[0]
        conn.execute("UPDATE events SET event_data = '{not json' WHERE id = ?", (event_id,))
    result = vmem(runner, "session", "list", "--json", "--db-url", str(db))
    assert result.exit_code == 1, result.output
    assert {r["id"] for r in json.loads(result.stdout)} == {"s1", "bad_event"}
    assert f"session {APP}/alice/bad_state: stored state is not readable JSON" in result.stderr
    result = vmem(runner, "session", "export", "--db-url", str(db))
    assert result.exit_code == 1, result.output
    assert [json.loads(line)["id"] for line in result.stdout.splitlines() if '"kind"' not in line] == ["s1"]
    assert f"session {APP}/bob/bad_event: event {event_id} is not readable" in result.stderr
    result = vmem(runner, "session", "get", APP, "bob", "bad_event", "--json", "--db-url", str(db))
    assert result.exit_code == 1 and f"event {event_id} is not readable" in result.stderr, result.output
    result = vmem(runner, "session", "get", APP, "alice", "bad_state", "--db-url", str(db))
    assert result.exit_code == 1 and "bad_state: stored state is not readable" in result.stderr, result.output


def test_two_first_imports_into_an_empty_mariadb_at_once(tmp_path: Path) -> None:
    import threading
    import uuid

    import pymysql
    from conftest import MY_HOST, MY_PORT, _require

    from veadk_mem.sessions.importer import import_file

    _require(MY_HOST, MY_PORT, "MariaDB")

    def admin(sql: str) -> None:
        conn = pymysql.connect(host=MY_HOST, port=MY_PORT, user="root", password="")
        try:
            with conn.cursor() as cur:
                cur.execute(sql)
            conn.commit()
        finally:
            conn.close()

    for _ in range(3):
        name = f"vmem_{uuid.uuid4().hex[:12]}"
        admin(f"CREATE DATABASE `{name}` CHARACTER SET utf8mb4")
        try:
            url = f"mysql+aiomysql://root@{MY_HOST}:{MY_PORT}/{name}?charset=utf8mb4"
            errors: list[BaseException] = []
            barrier = threading.Barrier(2)

            def one(i: int, url: str = url, errors: list[BaseException] = errors, barrier: Any = barrier) -> None:
                dump = _write(tmp_path / f"{url.rsplit('/', 1)[1]}-{i}.jsonl", [_session(f"s{i}")])

                async def go() -> None:
                    store = SessionStore(url, create=True)
                    barrier.wait()
                    await import_file(store, str(dump))

                try:
                    asyncio.run(go())
                except BaseException as exc:
                    errors.append(exc)

            threads = [threading.Thread(target=one, args=(i,)) for i in range(2)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            assert not errors, errors
            assert _ids(url) == ["s0", "s1"]
        finally:
            admin(f"DROP DATABASE IF EXISTS `{name}`")


def test_ctrl_c_stops_an_import_during_its_check_pass(tmp_path: Path) -> None:
    """Ctrl-C cancels the running task, which only an await notices: the check pass must yield to the loop."""
    from veadk_mem.sessions.importer import import_file

    dump = _write(tmp_path / "d.jsonl", [_session(f"s{i}") for i in range(3000)])
    db = tmp_path / "t.db"

    async def go() -> int:
        task = asyncio.ensure_future(import_file(SessionStore(str(db), create=True), dump))
        ticks = 0
        while ticks < 3:  # the loop gets control back while the file is still being checked
            await asyncio.sleep(0)
            ticks += 1
            assert not task.done()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        return ticks

    assert asyncio.run(go()) == 3
    assert not db.exists()  # stopped before anything was written
