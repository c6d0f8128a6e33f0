"""sqlite: the final transaction of a long session's import (the swap) and a live ADK agent's wait.

    .venv/bin/python bench/staged_swap.py                   # 60,000 and 300,000 events
    .venv/bin/python bench/staged_swap.py --events 20000

`session import` writes a long session into sqlite in short transactions under a staging id
and moves it to its own key, with its session row, in one last transaction (`BigWrites.
_write_big_staged`). For each size this imports a file of one session of N events into a
fresh sqlite file while an agent in another process (google-adk's `DatabaseSessionService`,
its 5 s busy timeout) appends an event to its own session and reads the imported one with
`get_session`, in a loop. It prints how long the swap held the write lock, the agent's append
latency p50 / max, beside the same agent's p50 / max before the import (the reference), any
append errors, and any read that saw part of the session (must be 0).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

AGENT = r"""
import asyncio, json, os, sys, time
from google.adk.events import Event
from google.adk.sessions import DatabaseSessionService
from google.genai import types

async def main(url, stop, n):
    service = DatabaseSessionService(url)
    mine = await service.create_session(app_name="bench", user_id="agent", session_id="live")
    out = {"before": [], "during": [], "errors": [], "partial": 0, "whole": 0, "reads": []}
    phase = "before"
    i = 0
    while not os.path.exists(stop):
        if os.path.exists(stop + ".go"):
            phase = "during"
        say = types.Content(role="user", parts=[types.Part(text=f"turn {i}")])
        started = time.monotonic()
        try:
            await service.append_event(mine, Event(author="user", content=say))
            mine = await service.get_session(app_name="bench", user_id="agent", session_id="live")
        except Exception as exc:
            out["errors"].append(type(exc).__name__ + ": " + str(exc)[:80])
        out[phase].append(time.monotonic() - started)
        started = time.monotonic()
        try:
            got = None if out["whole"] else await service.get_session(app_name="bench", user_id="u", session_id="big")
        except Exception as exc:
            out["errors"].append("get_session " + type(exc).__name__ + ": " + str(exc)[:80])
            got = None
        out["reads"].append(time.monotonic() - started)
        if got is not None:  # read whole once, then no more (300,000 events a read)
            if len(got.events) == n:
                out["whole"] += 1
            else:
                out["partial"] += 1
        i += 1
        if i == 1:
            open(stop + ".ready", "w").close()
        await asyncio.sleep(0.02)
    await service.close()
    print(json.dumps(out))

asyncio.run(main(sys.argv[1], sys.argv[2], int(sys.argv[3])))
"""


def _source(path: Path, n: int) -> Path:
    events = [
        {
            "id": f"e{i}",
            "author": "user" if i % 2 == 0 else "agent",
            "invocationId": f"inv-{i // 4}",
            "timestamp": 1_790_000_000.0 + i * 0.001,
            "content": {"role": "user", "parts": [{"text": f"message {i} " * 4}]},
        }
        for i in range(n)
    ]
    line = {"id": "big", "appName": "bench", "userId": "u", "state": {}, "events": events}
    path.write_text(json.dumps(line) + "\n", encoding="utf-8")
    return path


def one(n: int, work: Path) -> dict[str, object]:
    from veadk_mem.sessions import big_writes
    from veadk_mem.sessions.importer import import_file
    from veadk_mem.sessions.store import SessionStore

    db = work / f"s{n}.db"
    url = f"sqlite+aiosqlite:///{db}"
    asyncio.run(_tables(url))
    source = _source(work / f"in{n}.jsonl", n)
    stop = str(work / f"stop{n}")
    agent = subprocess.Popen(
        [sys.executable, "-c", AGENT, url, stop, str(n)], stdout=subprocess.PIPE, env={**os.environ}
    )
    while not Path(stop + ".ready").exists():
        assert agent.poll() is None
        time.sleep(0.05)
    time.sleep(3)  # the reference: the agent alone
    writers: list[big_writes.BigWrites] = []
    original = big_writes.BigWrites.__init__

    def keep(self: big_writes.BigWrites, *args: object, **kwargs: object) -> None:
        original(self, *args, **kwargs)  # type: ignore[arg-type]
        writers.append(self)

    big_writes.BigWrites.__init__ = keep  # type: ignore[method-assign]
    Path(stop + ".go").touch()
    started = time.monotonic()
    report = asyncio.run(import_file(SessionStore(url), source))
    took = time.monotonic() - started
    big_writes.BigWrites.__init__ = original  # type: ignore[method-assign]
    time.sleep(1)
    Path(stop).touch()
    out = json.loads(agent.communicate(timeout=900)[0])
    assert report.events == n, report
    swaps = [held for w in writers for _, held in w.swaps]
    return {
        "events": n,
        "import_s": took,
        "swap_ms": swaps[0] * 1000,
        "before": out["before"],
        "during": out["during"],
        "errors": out["errors"],
        "reads": out["reads"],
        "partial": out["partial"],
        "whole": out["whole"],
    }


async def _tables(url: str) -> None:
    from google.adk.sessions import DatabaseSessionService

    service = DatabaseSessionService(url)
    await service.create_session(app_name="bench", user_id="seed", session_id="seed")
    await service.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, nargs="*", default=[60_000, 300_000])
    args = parser.parse_args()
    os.environ.setdefault("VMEM_BIG_LINE", "4096")
    with tempfile.TemporaryDirectory(prefix="vmem-swap-") as tmp:
        print(
            "events   import s  swap holds lock  agent append p50/max (ms)  alone p50/max  max/alone-max"
            "  errors  partial reads"
        )
        for n in args.events:
            r = one(n, Path(tmp))
            before, during = r["before"], r["during"]
            assert isinstance(before, list) and isinstance(during, list)
            b50, bmax = statistics.median(before) * 1000, max(before) * 1000
            d50, dmax = statistics.median(during) * 1000, max(during) * 1000
            print(
                f"{n:>7,}  {r['import_s']:>8.1f}  {r['swap_ms']:>12.0f} ms  {d50:>10.1f} / {dmax:>6.0f}"
                f"            {b50:>5.1f} / {bmax:>4.0f}  {dmax / bmax:>10.1f}x  {len(r['errors'])!s:>6}"
                f"  {r['partial']:>5}  (whole reads {r['whole']}; {r['errors'][:1]})",
                flush=True,
            )


if __name__ == "__main__":
    main()
