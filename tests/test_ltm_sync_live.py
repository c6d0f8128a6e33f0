"""`vmem ltm sync --follow` as a service (#44): a `vmem` child following while the real google-adk
agent (tests/sync_agent.py, a process of its own) appends, on sqlite and PostgreSQL; kill -9 in the
middle and a restart; SIGTERM; a store that is down at start; VeADK's own reader on what it saved."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from sync_helpers import APP, append, as_once, db, each_once, json_lines, stored, turns

__all__ = ["db"]

VMEM = str(Path(sys.executable).with_name("vmem"))
AGENT = str(Path(__file__).resolve().parent / "sync_agent.py")


@pytest.fixture(autouse=True)
def quick(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MODEL_EMBEDDING_PROVIDER", "hash")
    monkeypatch.setenv("VMEM_SYNC_POLL", "0.2")
    monkeypatch.setenv("VMEM_SYNC_POLL_MAX", "1")


class Child:
    """A `vmem ltm sync --follow --json` process; its stdout and stderr in files (never a full pipe)."""

    def __init__(self, tmp: Path, url: str, *extra: str, name: str = "sync", env: dict[str, str] | None = None) -> None:
        self.out, self.err = tmp / f"{name}.out", tmp / f"{name}.err"
        with open(self.out, "w") as out, open(self.err, "w") as err:
            self.proc = subprocess.Popen(
                [VMEM, "--json", "ltm", "sync", "--follow", "--db-url", url, *extra],
                stdout=out,
                stderr=err,
                env={**os.environ, **(env or {})},
            )

    def lines(self) -> list[dict[str, Any]]:
        return json_lines(self.out.read_text())

    def stderr(self) -> str:
        return self.err.read_text()

    def saved(self) -> int:
        return sum(line.get("saved", 0) for line in self.lines() if line.get("event") == "batch")

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 60) -> int:
        self.proc.send_signal(sig)
        return self.proc.wait(timeout)


def wait_for(what: Callable[[], bool], timeout: float = 120, every: float = 0.2) -> None:
    end = time.monotonic() + timeout
    while not what():
        if time.monotonic() > end:
            raise AssertionError("timed out")
        time.sleep(every)


def agent(url: str, *args: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, AGENT, url, "--app", APP, *args])


def test_follow_while_an_agent_writes_kill_9_and_restart_saves_each_memory_once(db: str, tmp_path: Path) -> None:
    append(db, "user0", "seed", turns("seed", 1))  # the app exists before either process starts
    writer = agent(db, "--users", "4", "--sessions", "24", "--turns", "3", "--rate", "4", "--pause", "0.3")
    first = Child(tmp_path, db, name="first")
    try:
        wait_for(lambda: first.saved() >= 8)
        first.proc.kill()  # kill -9 in the middle of the run
        assert first.proc.wait(30) == -signal.SIGKILL
        assert writer.poll() is None, "the agent finished before the kill: nothing was tested mid-run"
        second = Child(tmp_path, db, name="second")
        assert writer.wait(300) == 0
        want = None

        def caught_up() -> bool:
            nonlocal want
            want, have = each_once(db)
            return have == as_once(want)

        wait_for(caught_up, timeout=180, every=1.0)
        assert second.stop() == 0, second.stderr()  # SIGTERM: after the batch in flight, exit 0
    finally:
        for p in (writer, first.proc):
            if p.poll() is None:
                p.kill()
    assert want is not None and sum(len(v) for v in want.values()) == 1 + 24 * 3
    want, have = each_once(db)
    assert have == as_once(want)  # every memory once, none twice, after the kill and restart
    lines = second.lines()
    assert lines[-1]["event"] == "stopped"
    assert all(set(line) >= {"event", "saved", "synced", "position"} for line in lines if line["event"] == "batch")


def test_sigint_stops_after_the_batch_in_flight_and_progress_goes_to_stderr(tmp_path: Path) -> None:
    url = f"sqlite+aiosqlite:///{tmp_path / 's.db'}"
    append(url, "u", "s0", turns("s0", 1))
    child = Child(tmp_path, url)
    wait_for(lambda: child.saved() >= 1)
    assert child.stop(signal.SIGINT) == 0
    assert child.lines()[-1] == {**child.lines()[-1], "event": "stopped", "saved": 1}
    assert "Traceback" not in child.stderr()
    from veadk_mem.ops.history import HistoryLog  # a follow records what it saved when it stops (#42 item 4)

    [entry] = HistoryLog(Path(os.environ["XDG_DATA_HOME"]) / "vmem" / "history.db").entries()
    assert (entry["command"], entry["counts"]) == ("ltm sync", {"sessions": 1, "memories": 1})


def test_follow_waits_for_a_store_down_at_start_says_so_once_then_syncs(tmp_path: Path) -> None:
    from redis_stack import free_port

    url = f"sqlite+aiosqlite:///{tmp_path / 's.db'}"
    append(url, "u", "s0", turns("s0", 2))
    port = free_port()
    env = {"LONG_TERM_MEMORY_BACKEND": "redis", "DATABASE_REDIS_HOST": "127.0.0.1", "DATABASE_REDIS_PORT": str(port)}
    child = Child(tmp_path, url, env=env)
    server = None
    try:
        wait_for(lambda: any(line.get("event") == "outage" for line in child.lines()), timeout=60)
        time.sleep(3)  # several polls fail meanwhile: still one line
        outages = [line for line in child.lines() if line.get("event") == "outage"]
        assert len(outages) == 1 and "cannot reach redis" in outages[0]["message"]
        assert child.proc.poll() is None
        server = subprocess.Popen(
            ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
            stdout=subprocess.DEVNULL,
        )
        wait_for(lambda: child.saved() >= 2, timeout=120)
        events = [line["event"] for line in child.lines()]
        assert events.count("reconnected") == 1 and events.count("outage") == 1
        assert child.stop() == 0
    finally:
        if child.proc.poll() is None:
            child.proc.kill()
        if server is not None:
            server.terminate()
            server.wait(10)


def test_the_agent_waits_no_longer_than_one_read(tmp_path: Path) -> None:
    """sqlite: sync's reads are short transactions; the agent's appends meanwhile are not held up by
    more than a read (each well under ADK's own append time), through a big session read by pages."""
    url = f"sqlite+aiosqlite:///{tmp_path / 's.db'}"
    append(url, "big", "b0", turns("b0", 60))  # 600 events: pages of VMEM_SYNC_PAGE
    log = tmp_path / "agent.jsonl"
    child = Child(tmp_path, url, env={"VMEM_SYNC_PAGE": "50"})
    writer = agent(url, "--users", "2", "--sessions", "6", "--turns", "2", "--log", str(log))
    try:
        assert writer.wait(300) == 0
        wait_for(lambda: stored(["big"])["big"].total() == 60, timeout=120)
        assert child.stop() == 0
    finally:
        for p in (writer, child.proc):
            if p.poll() is None:
                p.kill()
    appends = sorted(json.loads(line)["append_s"] for line in log.read_text().splitlines())
    assert len(appends) == 120
    assert appends[-1] < 5.0, appends[-5:]  # never a busy timeout (ADK's sqlite waits 5 s, then fails)
