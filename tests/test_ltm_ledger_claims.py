"""Issue 41 item 2: the replay ledger never lets a memory be sent twice.

A save claims its memories in the ledger (committed) before it sends them, so two saves at once
send each memory once, a ledger another process holds fails the save before anything is sent, a
send the ledger cannot confirm is not sent again, and a delete checks the ledger before it
deletes. Real processes: `python -m veadk_mem` children against the TOS ContextBucket and
VikingDB memory stand-ins (tests/hosted_servers.py), backends that cannot say what they hold.
Each test here failed on the code before its fix.
"""

from __future__ import annotations

import json
import os
import socket
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from test_ltm_safety import _hosted_session, tos_server, viking_server, vmem  # noqa: F401  (fixtures)
from typer.testing import CliRunner

from veadk_mem.ltm.ledger import Ledger, Scope

POSTS = "/v1/memories"
# A child vmem whose ledger waits 2 s, not 30, for another process's write.
CHILD = (
    "import sys, veadk_mem.ltm.ledger as ledger; ledger.BUSY_TIMEOUT = 2.0; sys.argv[0] = 'vmem';"
    " from veadk_mem.cli.app import main; main()"
)


@pytest.fixture
def tos(tos_server: Any) -> Any:  # noqa: F811  (test_ltm_safety's TOS ContextBucket stand-in)
    return tos_server


@pytest.fixture
def viking(viking_server: Any) -> Any:  # noqa: F811  (test_ltm_safety's VikingDB memory stand-in)
    return viking_server


def _ledger_path() -> Path:
    return Path(os.environ["XDG_DATA_HOME"]) / "vmem" / "ledger.db"


def _child(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", CHILD, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def _sent_texts(server: Any) -> list[str]:
    """Every memory text the store was sent, in order (one POST carries a session's memories)."""
    return [m["content"] for call in server.calls(POSTS) if call.method == "POST" for m in call.body["messages"]]


def _warm_up(runner: CliRunner, tmp_path: Path) -> None:
    """One save of another session: the bucket, the user's context set and the ledger file exist."""
    other = json.loads(_hosted_session(tmp_path, "sess-0").read_text())
    other["events"] = other["events"][:1]
    other["events"][0]["content"]["parts"][0]["text"] = "Warm up: I prefer tea."
    path = tmp_path / "sess-0.json"
    path.write_text(json.dumps(other))
    assert vmem(runner, "ltm", "save", str(path)).exit_code == 0
    assert _ledger_path().is_file()


def _slow_posts(server: Any, before_reply: Any) -> None:
    """Run `before_reply()` in each memory POST before the store answers it."""
    dispatch = server.dispatch

    def slow(seen: Any) -> Any:
        if seen.path == POSTS and seen.method == "POST":
            before_reply()
        return dispatch(seen)

    server.dispatch = slow


@pytest.mark.slow  # two vmem processes, a store that takes seconds to answer
def test_two_saves_at_once_send_each_memory_once(runner: CliRunner, tmp_path: Path, tos: Any) -> None:
    _warm_up(runner, tmp_path)
    session = _hosted_session(tmp_path)
    _slow_posts(tos, lambda: time.sleep(4))  # the first save is still sending when the second looks
    children = [_child("ltm", "save", str(session), "--json") for _ in range(2)]
    done = [child.communicate(timeout=120) for child in children]
    for child, (_, err) in zip(children, done, strict=True):
        assert child.returncode == 0, err
    sent = _sent_texts(tos)[1:]  # after the warm-up's
    assert sorted(sent) == ["Book me a window seat.", "I am allergic to peanuts and I live in Hangzhou."]
    totals = [json.loads(out)["totals"] for out, _ in done]
    assert sorted(t["saved"] for t in totals) == [0, 2]
    assert [t["saved"] + t["duplicates"] for t in totals] == [2, 2], totals  # the second: skipped, its claim lost


@pytest.fixture
def held_ledger() -> Any:
    """Another process holding the ledger's write lock until the test lets go."""

    def hold(path: Path) -> subprocess.Popen[str]:
        code = (
            "import sqlite3, sys; c = sqlite3.connect(sys.argv[1], isolation_level=None);"
            " c.execute('BEGIN IMMEDIATE'); print('held', flush=True); sys.stdin.read()"
        )
        holder = subprocess.Popen(
            [sys.executable, "-c", code, str(path)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )
        assert holder.stdout is not None and holder.stdout.readline() == "held\n"
        holders.append(holder)
        return holder

    holders: list[subprocess.Popen[str]] = []
    yield hold
    for holder in holders:
        holder.kill()
        holder.wait()


@pytest.mark.slow  # vmem processes waiting on a held ledger
def test_a_busy_ledger_fails_the_save_before_anything_is_sent(
    runner: CliRunner, tmp_path: Path, tos: Any, held_ledger: Any
) -> None:
    _warm_up(runner, tmp_path)
    session = _hosted_session(tmp_path)
    ledger = _ledger_path()
    holder = held_ledger(ledger)
    child = _child("ltm", "save", str(session))
    _, err = child.communicate(timeout=120)
    assert child.returncode == 1, err
    assert len(_sent_texts(tos)) == 1  # the warm-up's only: nothing was sent
    naming = [line for line in err.splitlines() if str(ledger) in line]
    assert len(naming) == 1 and "cannot use the replay ledger: database is locked" in naming[0], err
    assert "Traceback" not in err

    holder.kill()
    holder.wait()
    again = vmem(runner, "ltm", "save", str(session), "--json")
    assert again.exit_code == 0, again.output
    assert json.loads(again.stdout)["totals"]["saved"] == 2
    assert len(_sent_texts(tos)) == 3  # each memory once
    assert vmem(runner, "ltm", "save", str(session)).exit_code == 0
    assert len(_sent_texts(tos)) == 3


@pytest.mark.slow  # a vmem process waiting on a held ledger
def test_a_send_the_ledger_cannot_confirm_is_not_sent_again(runner: CliRunner, tmp_path: Path, tos: Any) -> None:
    """The ledger is taken by another process while the store takes the memories: they stay
    claimed (pending), so the next save does not resend them, and records them as sent."""
    _warm_up(runner, tmp_path)
    session = _hosted_session(tmp_path)
    ledger = _ledger_path()
    holder = sqlite3.connect(ledger, isolation_level=None, check_same_thread=False)
    held = threading.Event()

    def take_the_ledger() -> None:
        if not held.is_set():
            holder.execute("BEGIN IMMEDIATE")
            held.set()

    _slow_posts(tos, take_the_ledger)
    try:
        child = _child("ltm", "save", str(session))
        _, err = child.communicate(timeout=120)
    finally:
        if holder.in_transaction:
            holder.execute("ROLLBACK")
        holder.close()
    assert held.is_set()
    assert child.returncode == 0, err  # the store holds them; the ledger's claim keeps them from a resend
    assert f"{ledger}: cannot use the replay ledger: database is locked" in err
    assert "2 memories sent stay claimed, so no later save sends them again" in err
    assert len(_sent_texts(tos)) == 3

    again = vmem(runner, "ltm", "save", str(session), "--json")
    assert again.exit_code == 0, again.output
    totals = json.loads(again.stdout)["totals"]
    assert (totals["saved"], totals["ledger_skipped"]) == (0, 2)
    assert len(_sent_texts(tos)) == 3  # not sent again
    with sqlite3.connect(ledger) as conn:
        states = sorted(row[0] for row in conn.execute("SELECT state FROM sent"))
    assert states == ["pending", "pending", "sent"]  # claimed by a process now gone: the next claim reconciles
    grown = json.loads(session.read_text())
    grown["events"].append({**grown["events"][0], "id": "e2", "content": {"role": "user", "parts": [{"text": "new"}]}})
    session.write_text(json.dumps(grown))
    third = vmem(runner, "ltm", "save", str(session), "--json")
    assert json.loads(third.stdout)["totals"]["saved"] == 1, third.output
    assert _sent_texts(tos)[-1] == "new" and len(_sent_texts(tos)) == 4
    with sqlite3.connect(ledger) as conn:
        states = sorted(row[0] for row in conn.execute("SELECT state FROM sent"))
    assert states == ["sent"] * 4


def _damage(path: Path) -> None:
    for name in (path.with_name(path.name + "-wal"), path.with_name(path.name + "-shm")):
        name.unlink(missing_ok=True)
    path.write_bytes(b"not a database, say a file copied over it\n" * 200)


@pytest.mark.parametrize("how", ["delete --all", "forget"])
def test_a_damaged_ledger_stops_a_delete_before_anything_is_deleted(
    runner: CliRunner, tmp_path: Path, viking: Any, how: str
) -> None:
    session = _hosted_session(tmp_path)
    assert vmem(runner, "ltm", "save", str(session)).exit_code == 0
    listing = ["ltm", "list", "-u", "user-42", "-a", "ltm_demo", "--json"]
    held = json.loads(vmem(runner, *listing).stdout)
    assert held
    ledger = _ledger_path()
    _damage(ledger)
    args = {
        "delete --all": ["ltm", "delete", "-u", "user-42", "-a", "ltm_demo", "--all", "--yes"],
        "forget": ["forget", "user-42", "-a", "ltm_demo", "--yes", "--db-url", str(tmp_path / "none.db")],
    }[how]
    result = vmem(runner, *args)
    assert result.exit_code == 1, result.output
    naming = [line for line in result.stderr.splitlines() if str(ledger) in line]
    assert len(naming) == 1 and "the replay ledger is damaged or not vmem's" in naming[0], result.stderr
    assert viking.calls("/api/memory/event/delete") == []  # nothing was deleted
    listed = vmem(runner, *listing)
    assert listed.exit_code == 0 and json.loads(listed.stdout) == held, listed.output


SCOPE = Scope("tos_context", "bucket-1", "app", "u1")


def _ended_process() -> str:
    """The claim name of a process of this host that has ended."""
    child = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    return f"{socket.gethostname()}:{child.stdout.strip()}"


def test_a_claim_is_one_processs_until_it_is_confirmed_or_released(tmp_path: Path) -> None:
    path = tmp_path / "ledger.db"
    first, second = Ledger(path), Ledger(path)
    second.owner = "elsewhere:1"  # another process (of another host: never taken for ended)
    assert first.claim(SCOPE, [("h1", "s1"), ("h2", "s1")]) == {"h1", "h2"}
    assert second.claim(SCOPE, [("h1", "s1"), ("h3", "s1")]) == {"h3"}
    assert first.sent(SCOPE, ["h1", "h2", "h3", "h4"]) == {"h1", "h2", "h3"}  # claimed counts as sent
    second.release(SCOPE, ["h1"])  # not its claim: kept
    first.release(SCOPE, ["h2"])
    assert first.sent(SCOPE, ["h1", "h2"]) == {"h1"}
    assert second.claim(SCOPE, [("h2", "s1")]) == {"h2"}
    first.record(SCOPE, [("h1", "m1", "s1")])
    first.release(SCOPE, ["h1"])  # confirmed: a release no longer takes it back
    assert first.sent(SCOPE, ["h1"]) == {"h1"}
    # a pending claim of an ended process is what it sent: recorded as sent, never claimed again
    gone = Ledger(path)
    gone.owner = _ended_process()
    assert gone.claim(SCOPE, [("h5", "s2")]) == {"h5"}
    assert first.claim(SCOPE, [("h5", "s2")]) == set()
    with sqlite3.connect(path) as conn:
        assert conn.execute("SELECT state FROM sent WHERE content_hash='h5'").fetchone() == ("sent",)
    assert first.forget(SCOPE, sessions=["s2"]) == 1 and first.claim(SCOPE, [("h5", "s2")]) == {"h5"}


def test_a_ledger_of_an_older_vmem_opens_with_every_entry_sent(tmp_path: Path) -> None:
    path = tmp_path / "ledger.db"
    with sqlite3.connect(path) as conn:
        conn.execute(
            "CREATE TABLE sent (backend TEXT NOT NULL, store TEXT NOT NULL, idx TEXT NOT NULL, user_id TEXT NOT NULL,"
            " content_hash TEXT NOT NULL, memory_id TEXT NOT NULL DEFAULT '', session_id TEXT NOT NULL DEFAULT '',"
            " sent_at REAL NOT NULL, PRIMARY KEY (backend, store, idx, user_id, content_hash))"
        )
        conn.execute("INSERT INTO sent VALUES ('tos_context', 'bucket-1', 'app', 'u1', 'h1', 'm1', 's1', 1.0)")
    conn.close()
    ledger = Ledger(path)
    assert ledger.claim(SCOPE, [("h1", "s1"), ("h2", "s1")]) == {"h2"}
    ledger.close()
    with sqlite3.connect(path) as conn:
        rows = sorted(conn.execute("SELECT content_hash, state FROM sent"))
    conn.close()
    assert rows == [("h1", "sent"), ("h2", "pending")]


def test_a_busy_ledger_stops_an_import_before_anything_is_sent(
    runner: CliRunner, tmp_path: Path, tos: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    import veadk_mem.ltm.ledger as ledger_module

    _warm_up(runner, tmp_path)
    monkeypatch.setattr(ledger_module, "BUSY_TIMEOUT", 0.5, raising=False)
    file = tmp_path / "export.jsonl"
    lines = [{"kind": "header", "format": "vmem-ltm", "version": 1}]
    lines += [{"text": f"memory {i}", "user_id": "user-42", "index": "ltm_demo"} for i in range(3)]
    file.write_text("".join(json.dumps(x) + "\n" for x in lines))
    holder = sqlite3.connect(_ledger_path(), isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    try:
        result = vmem(runner, "ltm", "import", str(file), "--json")
    finally:
        holder.close()
    assert result.exit_code == 1, result.output
    summary = json.loads(result.stdout)
    assert summary["stopped"] is True and summary["saved"] == 0
    assert f"{_ledger_path()}: cannot use the replay ledger: database is locked" in summary["failures"][0]
    assert len(_sent_texts(tos)) == 1  # the warm-up's only
    again = vmem(runner, "ltm", "import", str(file), "--json")
    assert again.exit_code == 0 and json.loads(again.stdout)["saved"] == 3, again.output
    assert len(_sent_texts(tos)) == 4
