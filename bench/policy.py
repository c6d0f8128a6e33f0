"""Whole-process time of `vmem policy test` on a generated 20,000-event session (target < 2 s).

Run: .venv/bin/python bench/policy.py [--events 20000] [--runs 5]
Prints the median wall time over N runs (after one warm-up) of the JSON output under the
`default` and `all` presets; `--table` also times the Rich table (80 columns, as off a TTY).
"""

from __future__ import annotations

import argparse
import base64
import json
import random
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any


def make_session(n_events: int, seed: int = 1) -> dict[str, Any]:
    """A session mixing user text, model thoughts and tool calls, media, transcriptions and errors."""
    rng = random.Random(seed)
    events = []
    for i in range(n_events):
        kind = i % 6
        event: dict[str, Any] = {"id": f"e{i}", "invocationId": f"inv{i // 6}", "timestamp": 1_764_000_000.0 + i}
        if kind in (0, 3):
            event["author"] = "user"
            parts: list[dict[str, Any]] = [{"text": f"message {i}: I like dish {rng.randrange(1000)} — 好吃"}]
            if kind == 3:
                parts.append(
                    {"inlineData": {"mimeType": "image/png", "data": base64.b64encode(rng.randbytes(64)).decode()}}
                )
            event["content"] = {"role": "user", "parts": parts}
        elif kind in (1, 4):
            event["author"] = "chef_agent"
            event["content"] = {
                "role": "model",
                "parts": [
                    {"text": "thinking about it", "thought": True, "thoughtSignature": "c2ln"},
                    {"functionCall": {"id": f"c{i}", "name": "find", "args": {"q": "dal", "n": 3}}},
                ],
            }
        elif kind == 2:
            event["author"] = "chef_agent"
            event["content"] = {
                "role": "user",
                "parts": [{"functionResponse": {"name": "find", "response": {"r": [1, 2]}}}],
            }
        else:
            event["author"] = "chef_agent"
            event["outputTranscription"] = {"text": "try the dal", "finished": True}
            event["errorCode"] = "E" if i % 12 == 5 else None
        events.append(event)
    return {"id": "bench", "appName": "bench", "userId": "u", "state": {}, "events": events}


def median_seconds(cmd: list[str], runs: int) -> tuple[float, float]:
    """Median wall time and median CPU time (user + sys) of running cmd, after one warm-up run.

    CPU time is reported too because the machine is shared: it moves less than wall time
    when other jobs compete for the cores.
    """
    subprocess.run(cmd, capture_output=True, check=True)
    walls, cpus = [], []
    for _ in range(runs):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        started = time.perf_counter()
        subprocess.run(cmd, capture_output=True, check=True)
        walls.append(time.perf_counter() - started)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpus.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
    return statistics.median(walls), statistics.median(cpus)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=20_000)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--table", action="store_true", help="also time the Rich table output (slow: ~0.7 ms a row)")
    args = parser.parse_args()
    vmem = shutil.which("vmem", path=str(Path(sys.executable).parent)) or "vmem"
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "session.json"
        path.write_text(json.dumps(make_session(args.events)), encoding="utf-8")
        size = path.stat().st_size / 1e6
        print(f"{args.events} events ({size:.1f} MB), median of {args.runs} whole-process runs")
        cases = [("--json, preset default", ["--json"]), ("--json, preset all", ["--json", "--policy", "all"])]
        if args.table:
            cases.append(("table, preset default", []))
        for label, extra in cases:
            wall, cpu = median_seconds([vmem, "policy", "test", str(path), *extra], args.runs)
            verdict = "ok" if wall < 2 else "OVER TARGET"
            print(f"  vmem policy test {label:<24} wall {wall:5.2f} s  cpu {cpu:5.2f} s  (target < 2 s: {verdict})")
        print(f"load average at the end: {Path('/proc/loadavg').read_text().split()[0]}")


if __name__ == "__main__":
    main()
