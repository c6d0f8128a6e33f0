"""Each hand-written speed path of the session store against the simplest well-kept alternative.

Issue 24 item 8: four pieces of `veadk_mem/sessions/` exist only for speed and must stay in
step with the normal path. This measures each one beside what it replaces, in one run on
the same data, so the ratio is what decides whether the lines are worth keeping:

- `rawsession.raw_session` (validate a decoded session and give its stored event dicts
  without pydantic objects) against pydantic: `Session.model_validate_json(line)`, then
  each event's `model_dump(mode="json", exclude_none=True)` (`rawsession.from_model`).
- `codec.camel_event` (stored snake_case event data to ADK's camelCase JSON data, for
  export and `get --json`) against `Event.model_validate(data).to_dict()`.
- `timecols.naive_utc_many` / `sqlite_text_many` (a batch of epoch seconds to ADK's time
  column values through numpy) against the per-value `datetime.fromtimestamp` path.
- `import_child.ReaderProcess` (the write pass of a large import read in a child process):
  the whole `session import` of a file into sqlite with the child and without it
  (`worthwhile` answering False), plus the read pass alone three ways: in this process,
  through the child, and through a one-worker `ProcessPoolExecutor` given chunks of lines.

Run: `.venv/bin/python bench/second_paths.py [--sessions 3000]`. Prints markdown tables;
CPU time is this process's (the child's for the reader rows is not included, it is the
point of the child) and the load average is printed first, as the machine may be shared.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ProcessPoolExecutor
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

TEXT = "The quick brown fox jumps over the lazy dog. " * 3


def _event(prefix: str, i: int, start: float) -> dict[str, Any]:
    """One event in ADK's camelCase JSON: a rotation of user text, tool call, tool response, answer."""
    kind = i % 4
    base: dict[str, Any] = {
        "id": f"{prefix}-{i:06d}",
        "invocationId": f"inv-{i // 4}",
        "timestamp": start + i + 0.123456,
        "actions": {"stateDelta": {"turn": i} if i % 5 == 0 else {}, "artifactDelta": {}},
    }
    if kind == 0:
        base |= {"author": "user", "content": {"role": "user", "parts": [{"text": f"{i}: {TEXT}"}]}}
    elif kind == 1:
        call = {"id": f"call-{i}", "name": "get_weather", "args": {"city": "Hangzhou", "days": 3}}
        base |= {
            "author": "agent",
            "content": {"role": "model", "parts": [{"functionCall": call}]},
            "usageMetadata": {"promptTokenCount": 812, "candidatesTokenCount": 24, "totalTokenCount": 836},
        }
    elif kind == 2:
        response = {"id": f"call-{i - 1}", "name": "get_weather", "response": {"result": "sunny, 21 C"}}
        base |= {"author": "agent", "content": {"role": "user", "parts": [{"functionResponse": response}]}}
    else:
        base |= {
            "author": "agent",
            "content": {"role": "model", "parts": [{"text": f"answer {i}: {TEXT}"}]},
            "usageMetadata": {"promptTokenCount": 903, "candidatesTokenCount": 61, "totalTokenCount": 964},
        }
    return base


def write_file(path: Path, sessions: int, events_per_session: int) -> int:
    """A JSONL import file of `sessions` sessions; returns the number of events."""
    from veadk_mem.jsonio import dumps

    start = 1_790_000_000.0
    with path.open("w", encoding="utf-8") as handle:
        for s in range(sessions):
            sid = f"s{s:06d}"
            events = [_event(sid, i, start + s * 60) for i in range(events_per_session)]
            session = {
                "id": sid,
                "appName": "bench",
                "userId": f"u{s % 100:03d}",
                "state": {"topic": sid, "app:tier": "gold"},
                "events": events,
                "lastUpdateTime": events[-1]["timestamp"],
            }
            handle.write(dumps(session, compact=True) + "\n")
    return sessions * events_per_session


def timed(fn: Callable[[], Any], runs: int = 3) -> tuple[float, float]:
    """(best wall seconds, CPU seconds of that run) of `fn` over `runs` runs."""
    best = (float("inf"), 0.0)
    for _ in range(runs):
        c0, t0 = time.process_time(), time.perf_counter()
        fn()
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
        best = min(best, (wall, cpu))
    return best


def row(name: str, n: int, ours: tuple[float, float], theirs: tuple[float, float], unit: str = "events") -> None:
    print(
        f"| {name} | {n / ours[0]:,.0f} {unit}/s | {n / theirs[0]:,.0f} {unit}/s | "
        f"{theirs[0] / ours[0]:.1f}x | {theirs[1] / max(ours[1], 1e-9):.1f}x |"
    )


def validation(lines: list[str], n_events: int) -> None:
    from veadk_mem import events as ev
    from veadk_mem.jsonio import loads
    from veadk_mem.sessions.rawsession import from_model, raw_session

    def ours() -> None:
        for line in lines:
            assert raw_session(loads(line, "bench")) is not None

    def pydantic_path() -> None:
        for line in lines:
            from_model(ev.Session.model_validate_json(line))

    # the two must agree before their speeds mean anything
    for line in lines[:50]:
        fast, slow = raw_session(loads(line, "bench")), from_model(ev.Session.model_validate_json(line))
        assert fast is not None and [e.data for e in fast.events] == [e.data for e in slow.events]
    row(
        "`raw_session` vs `Session.model_validate_json` + `model_dump` per event",
        n_events,
        timed(ours),
        timed(pydantic_path),
    )


def camel(stored: list[dict[str, Any]]) -> None:
    from veadk_mem import events as ev
    from veadk_mem.adkjson import printed_event

    def ours() -> None:
        for data in stored:
            printed_event(data)

    def pydantic_path() -> None:
        for data in stored:
            ev.Event.model_validate(data).to_dict()

    for data in stored[:200]:
        assert printed_event(data) == ev.Event.model_validate(data).to_dict()
    row("`camel_event` vs `Event.model_validate(...).to_dict()`", len(stored), timed(ours), timed(pydantic_path))


def times(n: int) -> None:
    from veadk_mem.sessions import timecols

    epochs = [1_790_000_000.0 + i * 0.731 for i in range(n)]

    def plain() -> list[datetime]:
        return [datetime.fromtimestamp(e, tz=UTC).replace(tzinfo=None) for e in epochs]

    def plain_text() -> list[str]:
        return [datetime.fromtimestamp(e, tz=UTC).replace(tzinfo=None).isoformat(" ", "microseconds") for e in epochs]

    assert timecols.naive_utc_many(epochs) == plain()
    assert timecols.sqlite_text_many(epochs) == plain_text()
    row(
        "`naive_utc_many` vs `datetime.fromtimestamp` per value",
        n,
        timed(lambda: timecols.naive_utc_many(epochs)),
        timed(plain),
        "values",
    )
    row(
        "`sqlite_text_many` vs `fromtimestamp(...).isoformat()` per value",
        n,
        timed(lambda: timecols.sqlite_text_many(epochs)),
        timed(plain_text),
        "values",
    )


def _columns_of_chunk(lines: list[str]) -> Any:
    """Worker of the ProcessPoolExecutor variant: check and build one chunk's columns."""
    from veadk_mem.jsonio import loads
    from veadk_mem.sessions.checks import check_record
    from veadk_mem.sessions.rows import build_columns

    return build_columns([check_record("chunk", loads(line, "bench"), None)[1] for line in lines], "v1")


def _chunks(path: Path, size: int) -> Iterator[list[str]]:
    chunk: list[str] = []
    with path.open(encoding="utf-8") as handle:
        for line in handle:
            chunk.append(line)
            if len(chunk) >= size:
                yield chunk
                chunk = []
    if chunk:
        yield chunk


def _consume(columns: Any) -> int:
    """What the writer does with a batch before the driver: its time columns."""
    from veadk_mem.sessions import timecols

    timecols.sqlite_text_many(columns.events["timestamp"])
    return len(columns.events["id"])


def read_pass(path: Path, n_events: int) -> None:
    from veadk_mem.sessions.import_child import ReaderProcess
    from veadk_mem.sessions.rows import build_columns
    from veadk_mem.sessions.validate import iter_checked

    def here() -> None:
        batch: list[Any] = []
        total = 0
        for _, record in iter_checked(path, None):
            batch.append(record)
            if len(batch) >= 200:
                total += _consume(build_columns(batch, "v1"))
                batch = []
        if batch:
            total += _consume(build_columns(batch, "v1"))
        assert total == n_events

    def child() -> None:
        reader = ReaderProcess(path, None)
        try:
            assert sum(_consume(b) for b in reader.batches()) == n_events
        finally:
            reader.close()

    def pool() -> None:
        with ProcessPoolExecutor(max_workers=1) as executor:
            pending: list[Future[Any]] = []
            total = 0
            for chunk in _chunks(path, 200):
                pending.append(executor.submit(_columns_of_chunk, chunk))
                if len(pending) > 2:  # two chunks built ahead of the consumer, as the child's queue
                    total += _consume(pending.pop(0).result())
            total += sum(_consume(f.result()) for f in pending)
            assert total == n_events

    mine = timed(here, 1)
    print(f"| read pass in this process | {n_events / mine[0]:,.0f} events/s | | | CPU {mine[1]:.2f} s |")
    for name, fn in (
        ("read pass through `ReaderProcess`", child),
        ("read pass through a 1-worker ProcessPoolExecutor", pool),
    ):
        wall, cpu = timed(fn, 1)
        ratio = f"{mine[0] / wall:.2f}x of this process"
        print(f"| {name} | {n_events / wall:,.0f} events/s | | {ratio} | CPU here {cpu:.2f} s |")


def _fresh_postgres(name: str) -> str:
    """A new empty PostgreSQL database on the local server (dropped first if it exists)."""
    import subprocess

    for sql in (f"DROP DATABASE IF EXISTS {name}", f"CREATE DATABASE {name}"):
        subprocess.run(["psql", "-qh", "127.0.0.1", "-U", "postgres", "-d", "test", "-c", sql], check=True)
    return f"postgresql://postgres@127.0.0.1:5432/{name}"


def whole_import(path: Path, n_events: int, workdir: Path, target: str) -> None:
    from veadk_mem.sessions import import_child
    from veadk_mem.sessions.importer import import_file
    from veadk_mem.sessions.store import SessionStore

    def run(with_child: bool, name: str) -> tuple[float, float]:
        db = workdir / f"{name}.db"
        url = f"sqlite:///{db}" if target == "sqlite" else _fresh_postgres(f"vmem_bench_paths_{name}")
        original = import_child.worthwhile
        # the child whatever the file's size and the cores (as on a machine with one to spare), or never
        import_child.worthwhile = lambda source: with_child  # type: ignore[assignment]
        try:
            c0, t0 = time.process_time(), time.perf_counter()
            report = asyncio.run(import_file(SessionStore(url, create=True), path))
            result = time.perf_counter() - t0, time.process_time() - c0
        finally:
            import_child.worthwhile = original  # type: ignore[assignment]
            db.unlink(missing_ok=True)
        assert report.events == n_events
        return result

    child_on = run(True, "child")
    child_off = run(False, "plain")
    print(
        f"| whole `session import` into {target}, child vs none | {n_events / child_on[0]:,.0f} events/s | "
        f"{n_events / child_off[0]:,.0f} events/s | {child_off[0] / child_on[0]:.2f}x | "
        f"CPU here {child_on[1]:.1f} s vs {child_off[1]:.1f} s |"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--sessions", type=int, default=3000, help="sessions of 40 events in the import file")
    parser.add_argument("--targets", default="sqlite,postgresql", help="databases the whole import runs into")
    args = parser.parse_args()
    from veadk_mem.jsonio import loads
    from veadk_mem.sessions.rawsession import raw_session

    workdir = Path(tempfile.mkdtemp(prefix="vmem-bench-paths-"))
    try:
        path = workdir / "import.jsonl"
        n_events = write_file(path, args.sessions, 40)
        lines = path.read_text(encoding="utf-8").splitlines()
        print(
            f"load average {os.getloadavg()[0]:.1f}; {len(lines):,} sessions, {n_events:,} events, "
            f"{path.stat().st_size / 1e6:.0f} MB\n"
        )
        print("| path | hand-written | well-kept alternative | wall ratio | CPU ratio |")
        print("|---|---|---|---|---|")
        validation(lines[:1000], min(len(lines), 1000) * 40)
        stored = [e.data for line in lines[:500] for e in raw_session(loads(line, "bench")).events]  # type: ignore[union-attr]
        camel(stored)
        times(200_000)
        read_pass(path, n_events)
        for target in args.targets.split(","):
            whole_import(path, n_events, workdir, target)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
