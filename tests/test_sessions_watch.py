"""`vmem session watch`: a real vmem process follows while the real google-adk appends.

Every appended event arrives exactly once and in order (one session, and a user's newest
session across a new one); a deleted session ends the watch with exit 3; Ctrl-C exits 0;
a watcher whose output nobody reads never keeps ADK from appending.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from google.adk.events import Event
from google.genai import types
from sessions_helpers import adk_service, sqlite_url

ROOT = Path(__file__).resolve().parent.parent
APP = "watch_app"
WAIT = 60.0  # seconds before a test gives up on a line (a hang guard, not a timing assertion)


@pytest.fixture(params=["sqlite", "postgres", "mysql", "sqlite-service"])
def db(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return sqlite_url(tmp_path / "adk.db")
    if request.param == "sqlite-service":
        return str(tmp_path / "service.db")  # a plain path: ADK's SqliteSessionService (REAL epoch times)
    return str(request.getfixturevalue("pg_url" if request.param == "postgres" else "mysql_url"))


class Watch:
    """A `vmem session watch ... --json` process with its stdout and stderr read by threads."""

    def __init__(self, url: str, *args: str, stdout: Any = subprocess.PIPE) -> None:
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        cmd = [sys.executable, "-m", "veadk_mem", "session", "watch", APP, *args, "--db-url", url]
        cmd += ["--json", "--interval", "0.05", "--max-interval", "0.2"]
        self.proc = subprocess.Popen(cmd, stdout=stdout, stderr=subprocess.PIPE, text=True, env=env)
        self.out: queue.Queue[str] = queue.Queue()
        self.err: queue.Queue[str] = queue.Queue()
        self.stderr: list[str] = []
        if stdout is subprocess.PIPE:
            threading.Thread(target=self._pump, args=(self.proc.stdout, self.out), daemon=True).start()
        threading.Thread(target=self._pump, args=(self.proc.stderr, self.err), daemon=True).start()

    @staticmethod
    def _pump(stream: Any, into: queue.Queue[str]) -> None:
        for line in stream:
            into.put(line)

    def said(self, text: str) -> None:
        """Wait for a stderr line holding `text`."""
        deadline = time.monotonic() + WAIT
        while time.monotonic() < deadline:
            try:
                line = self.err.get(timeout=0.5)
            except queue.Empty:
                assert self.proc.poll() is None, f"watch exited {self.proc.returncode}: {''.join(self.stderr)}"
                continue
            self.stderr.append(line)
            if text in line:
                return
        raise AssertionError(f"no {text!r} on stderr: {''.join(self.stderr)}")

    def events(self, n: int) -> list[dict[str, Any]]:
        """The next n JSON lines."""
        got = []
        for _ in range(n):
            got.append(json.loads(self.out.get(timeout=WAIT)))
        return got

    def end(self, expect: int) -> None:
        code = self.proc.wait(timeout=WAIT)
        self.stderr += list(iter_queue(self.err))
        assert code == expect, "".join(self.stderr)

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


def iter_queue(q: queue.Queue[str]) -> list[str]:
    out = []
    while True:
        try:
            out.append(q.get(timeout=0.5))
        except queue.Empty:
            return out


def _event(i: int, ts: float) -> Event:
    if i % 3 == 1:
        call = types.FunctionCall(id=f"c{i}", name="lookup", args={"n": i})
        content = types.Content(role="model", parts=[types.Part(function_call=call)])
        return Event(author="agent", invocation_id=f"inv{i}", timestamp=ts, content=content)
    return Event(
        author="user" if i % 3 == 0 else "agent",
        invocation_id=f"inv{i}",
        timestamp=ts,
        content=types.Content(role="user" if i % 3 == 0 else "model", parts=[types.Part(text=f"line {i} 你好")]),
    )


async def _append(url: str, user: str, sid: str, n: int, *, create: bool = False, start: int = 0) -> list[str]:
    """Append n events through ADK's own service (creating the session first); their ids."""
    service = adk_service(url)
    try:
        if create:
            session = await service.create_session(app_name=APP, user_id=user, session_id=sid)
        else:
            session = await service.get_session(app_name=APP, user_id=user, session_id=sid)
        ids = []
        base = time.time()
        for i in range(start, start + n):
            event = _event(i, base + (i - start) * 0.001)
            await service.append_event(session, event)
            ids.append(event.id)
        return ids
    finally:
        await service.close()


async def _adk_ids(url: str, user: str, sid: str) -> list[str]:
    service = adk_service(url)
    try:
        session = await service.get_session(app_name=APP, user_id=user, session_id=sid)
        assert session is not None
        return [e.id for e in session.events]
    finally:
        await service.close()


async def _delete(url: str, user: str, sid: str) -> None:
    service = adk_service(url)
    try:
        await service.delete_session(app_name=APP, user_id=user, session_id=sid)
    finally:
        await service.close()


def test_every_appended_event_arrives_once_in_order_then_a_deletion_exits_3(db: str) -> None:
    before = asyncio.run(_append(db, "alice", "s1", 3, create=True))
    watch = Watch(db, "alice", "s1", "--events", "1")
    try:
        watch.said("following session s1")
        appended = asyncio.run(_append(db, "alice", "s1", 25, start=3))
        got = watch.events(26)
        assert [e["id"] for e in got] == [before[-1], *appended]
        assert [e["id"] for e in got] == asyncio.run(_adk_ids(db, "alice", "s1"))[-26:]
        # camelCase ADK events, as ADK writes them, that ADK reads back
        call = next(e for e in got if "functionCall" in json.dumps(e))
        assert call["invocationId"] and "invocation_id" not in call
        Event.model_validate_json(json.dumps(got[1]))
        asyncio.run(_delete(db, "alice", "s1"))
        watch.end(3)
        assert "not found" in "".join(watch.stderr)
        assert watch.out.empty()  # nothing arrived twice
    finally:
        watch.kill()


def test_without_a_session_id_it_follows_the_newest_and_switches(db: str) -> None:
    asyncio.run(_append(db, "bob", "old", 0, create=True))
    watch = Watch(db, "bob", "--events", "0")
    try:
        watch.said("following session old")
        first = asyncio.run(_append(db, "bob", "old", 7))
        second = asyncio.run(_append(db, "bob", "new", 9, create=True, start=7))
        got = watch.events(16)
        assert [e["id"] for e in got] == first + second
        watch.said("following session new")
        watch.proc.send_signal(signal.SIGINT)  # Ctrl-C
        watch.end(0)
        assert watch.out.empty()
    finally:
        watch.kill()


def test_a_missing_session_exits_3(tmp_path: Path) -> None:
    url = sqlite_url(tmp_path / "adk.db")
    asyncio.run(_append(url, "carol", "there", 1, create=True))
    watch = Watch(url, "carol", "nope")
    watch.end(3)


def _wait_until_blocked(watch: Watch) -> None:
    """Until the watcher sleeps in a write to its full pipe (the kernel's wait channel says so).
    A fixed sleep let a slow start on a loaded machine test a watcher that was not blocked yet."""
    tasks = Path(f"/proc/{watch.proc.pid}/task")
    if not tasks.is_dir():  # no /proc (not Linux): give it a second, as before
        time.sleep(1)
        return
    deadline = time.monotonic() + WAIT  # a hang guard, not a timing assertion
    while True:
        assert watch.proc.poll() is None, f"watch exited {watch.proc.returncode}"
        with contextlib.suppress(OSError):
            if any("pipe_write" in (task / "wchan").read_text() for task in tasks.iterdir()):
                return
        assert time.monotonic() < deadline, "the watcher never blocked on its full pipe"
        time.sleep(0.05)


def test_a_watcher_nobody_reads_never_blocks_adks_appends(tmp_path: Path) -> None:
    """`vmem session watch ... | less`, stopped: its pipe is full, ADK must still write (sqlite locks)."""
    url = sqlite_url(tmp_path / "adk.db")
    asyncio.run(_append(url, "dave", "long", 400, create=True))
    read_end, write_end = os.pipe()  # a pipe nobody reads: the watcher blocks on its write
    try:
        with os.fdopen(write_end, "w") as out:
            watch = Watch(url, "dave", "long", "--events", "400", stdout=out)
        try:
            watch.said("following session long")
            _wait_until_blocked(watch)
            ids = asyncio.run(_append(url + "?timeout=2", "dave", "long", 5, start=400))  # "database is locked"
            assert len(ids) == 5  # otherwise
        finally:
            watch.kill()
    finally:
        os.close(read_end)


class Proxy:
    """A TCP proxy to a database server that can be cut (connections dropped, port closed) and restored:
    a database restart as its clients see it."""

    def __init__(self, port: int) -> None:
        import socket

        self.target = port
        self.conns: list[socket.socket] = []
        self.port = 0
        self.listener: socket.socket | None = None
        self.restore()

    def restore(self) -> None:
        import socket

        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", self.port))
        listener.listen()
        self.port = listener.getsockname()[1]
        self.listener = listener
        threading.Thread(target=self._accept, args=(listener,), daemon=True).start()

    def _accept(self, listener: Any) -> None:
        import socket

        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return
            server = socket.create_connection(("127.0.0.1", self.target))
            self.conns += [client, server]
            for a, b in ((client, server), (server, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    @staticmethod
    def _pump(a: Any, b: Any) -> None:
        import socket

        try:
            while data := a.recv(65536):
                b.sendall(data)
        except OSError:
            pass
        finally:
            for s in (a, b):  # shutdown, not just close: it wakes the other direction's recv
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)
                with contextlib.suppress(OSError):
                    s.close()

    def cut(self) -> None:
        import socket

        assert self.listener is not None
        self.listener.close()
        for s in self.conns:
            try:
                s.shutdown(socket.SHUT_RDWR)
                s.close()
            except OSError:
                pass
        self.conns = []


def test_a_database_restart_is_said_once_and_followed_through(pg_url: str) -> None:
    proxy = Proxy(5432)
    via = pg_url.replace("127.0.0.1:5432", f"127.0.0.1:{proxy.port}")
    asyncio.run(_append(pg_url, "erin", "s", 0, create=True))
    watch = Watch(via, "erin", "s", "--events", "0")
    try:
        watch.said("following session s")
        first = asyncio.run(_append(pg_url, "erin", "s", 3))
        assert [e["id"] for e in watch.events(3)] == first
        proxy.cut()
        watch.said("retrying until it is back")
        during = asyncio.run(_append(pg_url, "erin", "s", 4, start=3))  # the agent's own connection
        time.sleep(1)  # several failed polls: said once
        proxy.restore()
        watch.said("reachable again")
        assert [e["id"] for e in watch.events(4)] == during
        later = asyncio.run(_append(pg_url, "erin", "s", 2, start=7))
        assert [e["id"] for e in watch.events(2)] == later
        watch.proc.send_signal(signal.SIGINT)
        watch.end(0)
        assert sum("retrying" in line for line in watch.stderr) == 1
        assert watch.out.empty()
    finally:
        watch.kill()
        proxy.cut()


def test_an_unreadable_event_is_named_and_skipped(tmp_path: Path) -> None:
    """A corrupt event (which ADK's own get_session refuses) is said once and skipped; the rest arrive."""
    path = tmp_path / "adk.db"
    url = sqlite_url(path)
    ids = asyncio.run(_append(url, "fay", "s", 4, create=True))
    import sqlite3

    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE events SET event_data = '{not json' WHERE id = ?", (ids[1],))
    watch = Watch(url, "fay", "s", "--events", "4")
    try:
        watch.said(f"event {ids[1]} is not readable")
        assert [e["id"] for e in watch.events(3)] == [ids[0], ids[2], ids[3]]
        watch.proc.send_signal(signal.SIGINT)
        watch.end(0)
        assert sum("not readable" in line for line in watch.stderr) == 1
    finally:
        watch.kill()


async def _append_deltas(url: str, user: str, sid: str, start: int, n: int) -> None:
    """Append n events through ADK, each with a state delta whose JSON is wider than 80 columns' text."""
    from google.adk.events import EventActions

    service = adk_service(url)
    try:
        session = await service.get_session(app_name=APP, user_id=user, session_id=sid)
        assert session is not None
        for i in range(start, start + n):
            delta = {"live_counter": i, "a_rather_long_state_key_name": "v" * 40}
            text = "short" if i % 2 else "a much longer line of text " * 3
            event = Event(
                author="agent" if i % 2 else "user",
                invocation_id=f"inv{i}",
                timestamp=time.time(),
                actions=EventActions(state_delta=delta),
                content=types.Content(role="model" if i % 2 else "user", parts=[types.Part(text=text)]),
            )
            await service.append_event(session, event)
    finally:
        await service.close()


def test_on_a_terminal_the_header_comes_once_widths_stay_and_numbers_are_places(tmp_path: Path) -> None:
    """Issue 45 item 3: one header, columns at the same place in every batch, `#` = the event's
    place in the session (not lines shown), state deltas whole (never cut at 80 columns)."""
    url = sqlite_url(tmp_path / "adk.db")
    asyncio.run(_append(url, "dora", "s1", 6, create=True))
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TTY_COMPATIBLE": "1", "COLUMNS": "80", "NO_COLOR": "1"}
    cmd = [sys.executable, "-m", "veadk_mem", "session", "watch", APP, "dora", "s1", "--events", "2"]
    cmd += ["--db-url", url, "--interval", "0.05", "--max-interval", "0.1"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    out: queue.Queue[str] = queue.Queue()
    threading.Thread(target=Watch._pump, args=(proc.stdout, out), daemon=True).start()
    try:
        lines = [out.get(timeout=WAIT) for _ in range(3)]  # the header and the last two events already there
        asyncio.run(_append_deltas(url, "dora", "s1", 6, 2))
        lines += [out.get(timeout=WAIT) for _ in range(4)]  # two events, each with its state delta line
        time.sleep(0.5)
        asyncio.run(_append_deltas(url, "dora", "s1", 8, 1))
        lines += [out.get(timeout=WAIT) for _ in range(2)]
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=WAIT) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    lines = [re.sub(r"\x1b\[[0-9;]*m", "", line.rstrip("\n")) for line in lines]  # bold is no colour
    assert sum(line.split()[:2] == ["#", "time"] for line in lines) == 1, lines  # the header once
    events = [line for line in lines if not line.lstrip().startswith("state")]
    assert [int(line.split()[0]) for line in events[1:]] == [5, 6, 7, 8, 9]  # places in the session
    text_at = {line.index(line.split()[4], 40) for line in events[1:] if len(line.split()) > 4}
    assert len(text_at) == 1, lines  # the text column starts at one place in every batch
    assert all(len(line) <= 80 for line in events), lines
    deltas = [line.split("Δ ", 1)[1] for line in lines if "Δ " in line]
    assert [json.loads(d)["live_counter"] for d in deltas] == [6, 7, 8]  # whole JSON, parsed back
