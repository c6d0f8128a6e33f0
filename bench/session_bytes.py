"""Peak RSS of `vmem session export` and `session import` of big events, with export's byte bound
(`VMEM_BATCH_BYTES`, default 64 MiB) beside the row-bounded path it replaced (issue 41 item 9).

    .venv/bin/python bench/session_bytes.py                       # 300 MB of 1 MB events, sqlite
    .venv/bin/python bench/session_bytes.py --mb 1500 --event-kb 1000   # issue 41's size

Writes `--mb` MB of sessions of one to four events of `--event-kb` KB each (text parts), imports
them into a fresh sqlite file, then exports it twice per mode as its own process: with the byte
bound (the default) and with `VMEM_BATCH_BYTES` so large that only the rows bound batches (the
earlier behaviour). Prints the input size and each run's peak RSS (ru_maxrss of the child) and
CPU time; checks both exports are byte-identical.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
UNBOUNDED = str(1 << 50)


def write_input(path: Path, total_mb: int, event_kb: int) -> int:
    """Sessions of 1-4 events of `event_kb` KB of text each, `total_mb` MB in all; the file's bytes."""
    text = ("lorem ipsum dolor sit amet " * (event_kb * 1024 // 27 + 1))[: event_kb * 1024]
    written, n = 0, 0
    with path.open("w", encoding="utf-8") as out:
        while written < total_mb * 1_000_000:
            events = [
                {
                    "id": f"e{n}-{i}",
                    "author": "user" if i % 2 == 0 else "agent",
                    "invocationId": f"inv-{n}",
                    "timestamp": 1_790_000_000.0 + n + i * 0.001,
                    "content": {"role": "user" if i % 2 == 0 else "model", "parts": [{"text": f"{n} {i} {text}"}]},
                }
                for i in range(1 + n % 4)
            ]
            line = json.dumps(
                {
                    "id": f"s{n}",
                    "appName": "bench",
                    "userId": f"u{n % 7}",
                    "state": {},
                    "events": events,
                    "lastUpdateTime": 1_790_000_000.0 + n + 1,
                }
            )
            out.write(line + "\n")
            written += len(line) + 1
            n += 1
    return written


def run(args: list[str], env: dict[str, str]) -> tuple[float, float, int]:
    """(wall s, CPU s, peak RSS KB) of `python -m veadk_mem ARGS` in its own process."""
    code = (
        "import resource, subprocess, sys, time\n"
        "t = time.monotonic()\n"
        "subprocess.run(sys.argv[1:], check=True, stdout=subprocess.DEVNULL)\n"
        "r = resource.getrusage(resource.RUSAGE_CHILDREN)\n"
        "print(time.monotonic() - t, r.ru_utime + r.ru_stime, r.ru_maxrss)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, sys.executable, "-m", "veadk_mem", *args],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    wall, cpu, rss = done.stdout.split()
    return float(wall), float(cpu), int(rss)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mb", type=int, default=300, help="MB of sessions")
    parser.add_argument("--event-kb", type=int, default=1000, help="KB of text an event")
    parser.add_argument("--runs", type=int, default=1)
    opts = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="vmem-bytes-"))
    source = work / "in.jsonl"
    size = write_input(source, opts.mb, opts.event_kb)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "NO_COLOR": "1"}
    db = work / "bytes.db"
    print(
        f"input {size / 1e6:,.0f} MB, events of {opts.event_kb} KB; load {os.getloadavg()[0]:.1f}; "
        f"{time.strftime('%Y-%m-%d %H:%M', time.gmtime())} UTC"
    )
    wall, cpu, rss = run(["session", "import", str(source), "--db-url", str(db)], env)
    print(f"import (sqlite)            {wall:6.1f} s  CPU {cpu:6.1f} s  peak RSS {rss / 1024:7,.0f} MB")
    outputs = {}
    for name, bound in (("export, byte bound 64 MiB", None), ("export, rows only        ", UNBOUNDED)):
        run_env = dict(env)
        run_env.pop("VMEM_BATCH_BYTES", None)
        if bound is not None:
            run_env["VMEM_BATCH_BYTES"] = bound
        out = work / f"out-{bound}.jsonl"
        for _ in range(opts.runs):
            wall, cpu, rss = run(["session", "export", "-o", str(out), "--db-url", str(db)], run_env)
            print(f"{name}  {wall:6.1f} s  CPU {cpu:6.1f} s  peak RSS {rss / 1024:7,.0f} MB")
        outputs[name] = out.read_bytes()
    first, second = outputs.values()
    print("exports byte-identical:", first == second)
    for path in work.iterdir():
        path.unlink()
    work.rmdir()


if __name__ == "__main__":
    main()
