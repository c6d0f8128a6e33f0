"""`vmem ltm sync --once / --status` (#44): sessions the real google-adk wrote, on sqlite and
PostgreSQL, into the local long-term memory with the hash embedder, as VeADK's auto-save would."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from sync_helpers import APP, append, as_once, db, each_once, stored, turns, user_text
from typer.testing import CliRunner

from veadk_mem.cli.app import app

__all__ = ["db"]  # the fixture, imported


@pytest.fixture(autouse=True)
def hash_embedder(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MODEL_EMBEDDING_PROVIDER", "hash")


def sync(runner: CliRunner, url: str, *args: str) -> tuple[int, Any, str]:
    """`vmem --json ltm sync ARGS --db-url URL`: (exit code, the JSON on stdout or its text, stderr)."""
    result = runner.invoke(app, ["--json", "ltm", "sync", *args, "--db-url", url])
    try:
        out: Any = json.loads(result.stdout)
    except ValueError:
        out = result.stdout
    return result.exit_code, out, result.stderr


def test_once_saves_every_memory_the_policy_keeps_once_and_a_rerun_nothing(
    runner: CliRunner, db: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("VMEM_SYNC_OVERLAP", "3600")  # every session is listed again, however slow the host
    for n in range(5):
        append(db, f"user{n % 2}", f"s{n}", turns(f"s{n}", 2))
    code, out, err = sync(runner, db, "--once")
    assert code == 0, err
    totals = out["totals"]
    assert totals["synced"] == 5 and totals["events"] == 100 and totals["saved"] == 10 and totals["failed"] == 0
    assert totals["dropped"] == 90  # the agent's text, calls and responses: not the default policy's
    want, have = each_once(db)
    assert have == as_once(want) and sum(len(v) for v in want.values()) == 10
    code, out, err = sync(runner, db, "--once")
    assert code == 0, err
    assert out["totals"]["saved"] == 0 and out["totals"]["events"] == 0  # nothing new: nothing read again
    assert out["totals"]["unchanged"] == 5  # the overlap lists them again; the cursor says they are done
    append(db, "user1", "s5", turns("s5", 1))
    code, out, _ = sync(runner, db, "--once")
    assert out["totals"]["synced"] == 1 and out["totals"]["saved"] == 1 and out["totals"]["events"] == 10
    want, have = each_once(db)
    assert have == as_once(want)


def memory(text: str) -> str:
    """The memory string VeADK saves of a user's text event."""
    return json.dumps({"parts": [{"text": text}], "role": "user"})


def test_only_new_events_are_read_and_saved(runner: CliRunner, db: str) -> None:
    append(db, "u", "s0", turns("s0", 1))
    assert sync(runner, db, "--once")[0] == 0
    append(db, "u", "s0", turns("s0", 2, start=1))
    code, out, err = sync(runner, db, "--once")
    assert code == 0, err
    assert out["totals"]["events"] == 20 and out["totals"]["saved"] == 2 and out["totals"]["duplicates"] == 0


def test_thresholds_hold_a_session_still_being_written(
    runner: CliRunner, db: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MIN_TIME_THRESHOLD", "4")
    monkeypatch.setenv("VMEM_SYNC_OVERLAP", "0")  # the held session is not listed again: the time threshold finds it
    append(db, "u", "s0", turns("s0", 1))
    code, out, _ = sync(runner, db, "--once")
    assert out["totals"]["synced"] == 1  # VeADK's first save: every event
    append(db, "u", "s0", [user_text("s0", "held back: three events"), *turns("s0", 1)[1:3]])
    code, out, err = sync(runner, db, "--once")
    assert code == 0, err
    assert out["totals"]["held"] == 1 and out["totals"]["saved"] == 0  # 3 new events, under 10 and 4 s
    assert memory("held back: three events") not in stored(["u"])["u"]
    assert out["status"]["sessions"]["held"] == 1 and out["status"]["lag_seconds"] > 0
    append(db, "u", "s0", turns("s0", 1, start=5)[:7])  # 10 new events now
    code, out, _ = sync(runner, db, "--once")
    assert out["totals"]["synced"] == 1 and out["totals"]["events"] == 10 and out["totals"]["saved"] == 2
    append(db, "u", "s0", [user_text("s0", "after the time threshold")])
    assert sync(runner, db, "--once")[1]["totals"]["held"] == 1
    import time

    time.sleep(4.2)
    code, out, _ = sync(runner, db, "--once")  # the session did not change again: the time threshold saves it
    assert out["totals"]["due"] == 1 and out["totals"]["saved"] == 1 and out["status"]["sessions"]["held"] == 0
    want, have = each_once(db)
    assert have == as_once(want)


def test_the_previous_session_is_saved_when_the_user_moves_on(runner: CliRunner, db: str) -> None:
    append(db, "alice", "first", turns("first", 1))
    append(db, "bob", "other", turns("other", 1))
    assert sync(runner, db, "--once")[0] == 0
    append(db, "alice", "first", [user_text("first", "the last thing alice said there")])
    append(db, "bob", "other", [user_text("other", "bob is still writing")])
    assert sync(runner, db, "--once")[1]["totals"]["held"] == 2
    append(db, "alice", "second", turns("second", 1))
    code, out, err = sync(runner, db, "--once")
    assert code == 0, err
    totals = out["totals"]
    assert totals["moved_on"] == 1 and totals["synced"] == 1 and totals["held"] == 0  # bob's: held before
    assert out["status"]["sessions"]["held"] == 1
    have = stored(["alice", "bob"])
    assert have["alice"][memory("the last thing alice said there")] == 1
    assert memory("bob is still writing") not in have["bob"]


def test_a_user_moving_on_within_one_page_saves_the_previous_session_too(runner: CliRunner, db: str) -> None:
    append(db, "carol", "a", turns("a", 1))
    assert sync(runner, db, "--once")[0] == 0
    append(db, "carol", "a", [user_text("a", "one more in a")])
    append(db, "carol", "b", turns("b", 1))  # both changed since the last sync: listed on one page
    _, out, _ = sync(runner, db, "--once")
    assert out["totals"]["held"] == 0 and out["totals"]["moved_on"] == 1 and out["totals"]["synced"] == 1
    want, have = each_once(db)
    assert have == as_once(want)


def test_app_and_user_scopes_keep_cursors_of_their_own(runner: CliRunner, db: str) -> None:
    append(db, "u1", "s1", turns("s1", 1))
    append(db, "u2", "s2", turns("s2", 1))
    append(db, "u1", "o1", turns("o1", 1), app="otherapp")
    code, out, _ = sync(runner, db, "--once", "--app", APP, "--user", "u1")
    assert out["totals"]["synced"] == 1
    code, out, _ = sync(runner, db, "--once", "--app", APP)
    assert out["totals"]["synced"] == 1 and out["totals"]["unchanged"] == 1  # s1: saved by the other scope
    code, out, _ = sync(runner, db, "--once")
    assert out["totals"]["synced"] == 1  # otherapp's
    code, out, _ = sync(runner, db, "--status")
    assert code == 0 and out["totals"]["sessions_synced"] == 1 and out["sessions"]["tracked"] == 3


def test_status_prints_cursor_lag_and_counts(runner: CliRunner, db: str) -> None:
    append(db, "u", "s0", turns("s0", 1))
    code, out, err = sync(runner, db, "--status")
    assert code == 0, err
    assert out["position"] is None and out["lag_seconds"] > 0 and out["oldest_unsynced"] > 1e9
    assert out["totals"]["sessions_synced"] == 0
    assert sync(runner, db, "--once")[0] == 0
    code, out, _ = sync(runner, db, "--status")
    assert out["lag_seconds"] is None and out["position"]["session_id"] == "s0"
    assert out["totals"] == {"sessions_synced": 1, "events": 10, "memories_saved": 1, "failed": 0}
    result = runner.invoke(app, ["ltm", "sync", "--status", "--db-url", db])
    assert result.exit_code == 0
    lines = result.stdout.splitlines()
    assert any(line.startswith("lag") and "caught up" in line for line in lines)
    assert any(line.startswith("synced") and "1 session" in line for line in lines)


def test_the_cursor_is_a_private_file_config_show_names(runner: CliRunner, tmp_path: Path) -> None:
    url = f"sqlite+aiosqlite:///{tmp_path / 's.db'}"
    append(url, "u", "s0", turns("s0", 1))
    assert sync(runner, url, "--once")[0] == 0
    data = Path.home() / ".local" / "share" / "vmem" / "sync.db"
    assert data.exists() and data.stat().st_mode & 0o777 == 0o600
    rows = sqlite3.connect(data).execute("SELECT app, user_id, s_id FROM position").fetchall()
    assert rows == [("", "", "s0")]
    shown = runner.invoke(app, ["--json", "config", "show"])
    row = json.loads(shown.stdout)["tuning.sync_cursor"]
    assert row == {"value": str(data), "source": "default", "env": "VMEM_SYNC_CURSOR"}
    elsewhere = tmp_path / "elsewhere.db"
    result = runner.invoke(app, ["ltm", "sync", "--once", "--db-url", url], env={"VMEM_SYNC_CURSOR": str(elsewhere)})
    assert result.exit_code == 0 and elsewhere.exists()


def test_bad_input(runner: CliRunner, tmp_path: Path) -> None:
    url = f"sqlite+aiosqlite:///{tmp_path / 's.db'}"
    append(url, "u", "s0", turns("s0", 1))
    code, _, err = sync(runner, url, "--once", "--app", "no_such_app")
    assert code == 3 and "no_such_app" in err and "Traceback" not in err
    code, _, err = sync(runner, url, "--once", "--policy", '{"preset": "default", "text_only": ')
    assert code == 2 and "policy" in err and "Traceback" not in err
    code, _, err = sync(runner, url)
    assert code == 2 and "--once, --follow and --status" in err
    code, _, err = sync(runner, url, "--once", "--follow")
    assert code == 2
    Path(Path.home() / ".local" / "share" / "vmem").mkdir(parents=True, exist_ok=True)
    (Path.home() / ".local" / "share" / "vmem" / "sync.db").write_bytes(b"not a database, at all" * 100)
    code, _, err = sync(runner, url, "--once")
    assert code == 1 and "sync.db" in err and "cursor" in err and len(err.strip().splitlines()) <= 2


def test_a_store_down_at_start_is_exit_1_naming_it(runner: CliRunner, tmp_path: Path) -> None:
    from redis_stack import free_port

    url = f"sqlite+aiosqlite:///{tmp_path / 's.db'}"
    append(url, "u", "s0", turns("s0", 1))
    env = {
        "LONG_TERM_MEMORY_BACKEND": "redis",
        "DATABASE_REDIS_HOST": "127.0.0.1",
        "DATABASE_REDIS_PORT": str(free_port()),
    }
    result = runner.invoke(app, ["ltm", "sync", "--once", "--db-url", url], env=env)
    assert result.exit_code == 1 and "cannot reach redis" in result.stderr and "Traceback" not in result.stderr
    down = f"postgresql+asyncpg://postgres@127.0.0.1:{free_port()}/nothing"
    result = runner.invoke(app, ["ltm", "sync", "--once", "--db-url", down])
    assert result.exit_code == 1 and "Traceback" not in result.stderr
    # nothing was saved, and the cursor did not move
    assert sync(runner, url, "--status")[1]["position"] is None


def test_a_big_session_is_read_by_pages_bounded_by_bytes(
    runner: CliRunner, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Events after the bound come in pages of `sync_page` events at most, and fewer when they are heavy."""
    import asyncio

    from veadk_mem.sessions.store import SessionStore

    monkeypatch.setenv("VMEM_BATCH_BYTES", "4MiB")  # a page's budget: a quarter of it, 1 MiB
    url = f"sqlite+aiosqlite:///{tmp_path / 's.db'}"
    append(url, "u", "big", [user_text("big", f"{i} " + "x" * 200_000) for i in range(12)] + turns("big", 3))

    async def pages() -> list[int]:
        async with SessionStore(url) as store:
            return [len(p.events) async for p in store.changes().events_after(APP, "u", "big", None, page=8)]

    sizes = asyncio.run(pages())
    assert sum(sizes) == 42 and sizes[0] == 8  # the first page: its events' size not known yet
    assert sizes[1] <= 5  # after 200 KB events: five to a 1 MiB page
    assert max(sizes) == 8  # light events again: back to `page`
    code, out, err = sync(runner, url, "--once")
    assert code == 0, err
    assert out["totals"]["events"] == 42 and out["totals"]["saved"] == 15


def test_a_sync_that_saves_is_one_history_entry_and_one_that_saves_nothing_none(runner: CliRunner, db: str) -> None:
    """`ltm sync --once` is a change to the store (#42 item 4): recorded with what it saved."""
    import os

    from veadk_mem.ops.history import HistoryLog

    log = Path(os.environ["XDG_DATA_HOME"]) / "vmem" / "history.db"
    append(db, "u", "s0", turns("s0", 2))
    code, out, err = sync(runner, db, "--once")
    assert code == 0, err
    assert out["totals"]["saved"] == 2
    [entry] = HistoryLog(log).entries()
    assert entry["command"] == "ltm sync" and entry["counts"] == {"sessions": 1, "memories": 2}
    assert entry["store"] == "local" and entry["outcome"] == "ok"
    assert sync(runner, db, "--once")[0] == 0  # nothing new: no entry
    assert len(HistoryLog(log).entries()) == 1


def test_a_cursor_path_that_is_a_link_or_cannot_be_made_is_one_line(runner: CliRunner, tmp_path: Path) -> None:
    """A link to a missing file: sqlite would create its target with the umask's mode (0644), outside
    vmem's private file; refused in the one opener of vmem's sqlite files. A parent that cannot be
    made (under a regular file) is one line naming the file, exit 1, no traceback."""
    url = f"sqlite+aiosqlite:///{tmp_path / 's.db'}"
    append(url, "u", "s0", turns("s0", 1))
    target, link = tmp_path / "target.db", tmp_path / "cursor.db"
    link.symlink_to(target)
    result = runner.invoke(app, ["ltm", "sync", "--once", "--db-url", url], env={"VMEM_SYNC_CURSOR": str(link)})
    assert result.exit_code == 2 and "symbolic link" in result.stderr and str(link) in result.stderr
    assert not target.exists() and len(result.stderr.strip().splitlines()) <= 2
    (tmp_path / "plain").write_text("a file, not a directory")
    under = tmp_path / "plain" / "sub" / "sync.db"
    result = runner.invoke(app, ["ltm", "sync", "--once", "--db-url", url], env={"VMEM_SYNC_CURSOR": str(under)})
    assert result.exit_code == 1 and str(under) in result.stderr and "unexpected" not in result.stderr
    assert len(result.stderr.strip().splitlines()) <= 2, result.stderr


def test_the_ledger_and_history_refuse_a_link_in_the_one_opener(tmp_path: Path) -> None:
    from veadk_mem.errors import BadInput
    from veadk_mem.files import open_private_sqlite

    target, link = tmp_path / "target.db", tmp_path / "link.db"
    link.symlink_to(target)
    with pytest.raises(BadInput, match="symbolic link"):
        open_private_sqlite(link, 1.0, lambda conn: None)
    assert not target.exists()


@pytest.mark.parametrize("refusal", ["auth", "throttled"])
def test_a_refusing_store_stops_the_sync_without_moving_the_cursor(
    runner: CliRunner, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, refusal: str
) -> None:
    """Credentials refused or a quota spent meets every session alike: the sync stops (exit 1)
    with the cursor where it was, and the next run, the store answering, saves them all. (Marked
    failed, they were passed over for good: a failed session is tried again only if it changes.)"""
    from veadk_mem.errors import StoreAuthError, StoreThrottled
    from veadk_mem.ltm.backends.local import LocalBackend

    url = f"sqlite+aiosqlite:///{tmp_path / 's.db'}"
    for n in range(3):
        append(url, "u", f"s{n}", turns(f"s{n}", 1))
    real = LocalBackend.save

    async def refuses(self: LocalBackend, *args: Any, **kwargs: Any) -> Any:
        if refusal == "auth":
            raise StoreAuthError("local: the store refused the credentials")
        raise StoreThrottled("local: the quota is spent")

    monkeypatch.setattr(LocalBackend, "save", refuses)
    code, _, err = sync(runner, url, "--once")
    assert code == 1 and ("credentials" in err or "quota" in err), err
    code, out, _ = sync(runner, url, "--status")
    assert out["position"] is None and out["sessions"]["failed"] == 0
    monkeypatch.setattr(LocalBackend, "save", real)
    code, out, err = sync(runner, url, "--once")
    assert code == 0, err
    assert out["totals"]["synced"] == 3 and out["totals"]["saved"] == 3 and out["totals"]["failed"] == 0


def test_a_not_found_from_long_term_memory_is_a_failure_not_a_save(
    runner: CliRunner, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """VikingDB says NotFound for a collection that is not there: the session was not saved, so it
    is not marked saved (only a session deleted from the session database is)."""
    from veadk_mem.errors import NotFound
    from veadk_mem.ltm.backends.local import LocalBackend

    url = f"sqlite+aiosqlite:///{tmp_path / 's.db'}"
    append(url, "u", "s0", turns("s0", 1))

    async def no_collection(self: LocalBackend, *args: Any, **kwargs: Any) -> Any:
        raise NotFound("collection syncapp not found")

    monkeypatch.setattr(LocalBackend, "save", no_collection)
    code, out, err = sync(runner, url, "--once")
    assert out["totals"]["failed"] == 1 and out["totals"]["synced"] == 0, (code, out, err)
    assert "collection syncapp not found" in err


def test_a_relative_sqlite_path_from_two_directories_keeps_two_cursors(
    runner: CliRunner, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`--db-url s.db` in two directories names two databases: each keeps a cursor of its own (keyed
    by the absolute file), and a cursor kept under the absolute URL the old way is taken over."""
    one, two = tmp_path / "one", tmp_path / "two"
    for where in (two, one):  # two's older: a shared cursor would hold it done
        where.mkdir()
        append(f"sqlite+aiosqlite:///{where / 's.db'}", "u", "s0", turns("s0", 1))
    monkeypatch.chdir(one)
    code, out, err = sync(runner, "s.db", "--once")
    assert code == 0 and out["totals"]["synced"] == 1, err
    monkeypatch.chdir(two)
    code, out, err = sync(runner, "s.db", "--once")
    assert code == 0 and out["totals"]["synced"] == 1 and out["totals"]["saved"] == 0, err  # same text: held
    # a cursor an older vmem kept under the displayed URL: renamed to the new key, not started over
    data = Path.home() / ".local" / "share" / "vmem" / "sync.db"
    url = f"sqlite+aiosqlite:///{tmp_path / 'three.db'}"
    append(url, "u", "s0", turns("s0", 1))
    assert sync(runner, url, "--once")[0] == 0
    with sqlite3.connect(data) as conn:
        [key] = [k for (k,) in conn.execute("SELECT DISTINCT db FROM position") if "three" in k]
        for table in ("position", "session"):
            conn.execute(f"UPDATE {table} SET db = ? WHERE db = ?", (url.replace("+aiosqlite", ""), key))
    code, out, err = sync(runner, url, "--once")
    assert code == 0 and out["totals"]["synced"] == 0 and out["totals"]["unchanged"] <= 1, err


def _history() -> list[dict[str, Any]]:
    import os

    from veadk_mem.ops.history import HistoryLog

    return HistoryLog(Path(os.environ["XDG_DATA_HOME"]) / "vmem" / "history.db").entries()


def _failing_on(monkeypatch: pytest.MonkeyPatch, session_id: str, error: Exception) -> None:
    """The local backend's save raises `error` for the memories of `session_id` and saves the rest."""
    from veadk_mem.ltm.backends.local import LocalBackend

    real = LocalBackend.save

    async def save(self: LocalBackend, user_id: str, memories: list[Any], *args: Any, **kwargs: Any) -> Any:
        if any(m.session_id == session_id for m in memories):
            raise error
        return await real(self, user_id, memories, *args, **kwargs)

    monkeypatch.setattr(LocalBackend, "save", save)


def test_a_pass_with_a_failed_session_is_recorded_failed_naming_it(
    runner: CliRunner, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two sessions saved and one failed: the history has what was saved, outcome failed with the exit
    code the command ended with (1), and the failure named (an 'ok' entry hid it)."""
    from veadk_mem.errors import StoreRejected

    url = f"sqlite+aiosqlite:///{tmp_path / 's.db'}"
    for n in range(3):
        append(url, "u", f"s{n}", turns(f"s{n}", 1))
    _failing_on(monkeypatch, "s1", StoreRejected("local: the store refused the batch"))
    code, out, err = sync(runner, url, "--once")
    assert code == 1 and out["totals"]["synced"] == 2 and out["totals"]["failed"] == 1, err
    [entry] = _history()
    assert entry["command"] == "ltm sync" and entry["counts"] == {"sessions": 2, "memories": 2}
    assert (entry["outcome"], entry["exit_code"]) == ("failed", 1)
    assert entry["details"]["failed"] == ["syncapp/u/s1: local: the store refused the batch"]


def test_a_pass_stopped_by_a_store_gone_after_saving_some_is_recorded(
    runner: CliRunner, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The store goes away at the second session: the first one's memories are saved (the cursor moved
    past it), so the pass is a change: recorded failed, exit 1, with what it saved and the error; the
    message says what was saved before it stopped."""
    from veadk_mem.errors import StoreUnreachable
    from veadk_mem.ltm.backends.local import LocalBackend

    url = f"sqlite+aiosqlite:///{tmp_path / 's.db'}"
    for n in range(3):
        append(url, "u", f"s{n}", turns(f"s{n}", 1))
    real = LocalBackend.save
    _failing_on(monkeypatch, "s1", StoreUnreachable("local: the connection went away"))
    code, _, err = sync(runner, url, "--once")
    assert code == 1 and "the connection went away" in err, err
    assert "1 session" in err and "1 memory" in err, err
    [entry] = _history()
    assert entry["counts"] == {"sessions": 1, "memories": 1}
    assert (entry["outcome"], entry["exit_code"]) == ("failed", 1)
    assert "the connection went away" in entry["details"]["error"]
    monkeypatch.setattr(LocalBackend, "save", real)
    code, out, err = sync(runner, url, "--once")  # the rest (not the first again), once the store is back
    assert code == 0 and out["totals"]["synced"] == 2 and out["totals"]["saved"] == 2, err
