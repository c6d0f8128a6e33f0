"""Peak memory of `ltm search --queries` against the query file's length, one run.

A local store of 2,000 memories (hash embedder, 384-d) is searched with N queries and with
N/10, each `vmem ltm search --queries` in its own process, stdout to /dev/null; the peak RSS
of each (the kernel's, from wait4) and their ratio are printed, with the time to the first
result line beside the whole run. Bounded: the ratio is 1.00 (results stream out, one batch
of queries is held); when every result is held to the end, memory grows with N.

Run: .venv/bin/python bench/ltm_search_stream.py [--queries 10000]
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

APP, USER = "bench_app", "alice"


def seed(home: Path, env: dict[str, str]) -> None:
    """2,000 memories of one user, saved through `vmem ltm save`."""
    events = [
        {
            "id": f"e{n}",
            "author": "user",
            "invocationId": "i",
            "timestamp": 1_790_000_000.0 + n,
            "content": {"role": "user", "parts": [{"text": f"memory {n}: I like topic {n % 97} and city {n % 31}"}]},
        }
        for n in range(2000)
    ]
    session = {"id": "s1", "appName": APP, "userId": USER, "state": {}, "events": events}
    path = home / "s1.json"
    path.write_text(json.dumps(session))
    subprocess.run(
        [sys.executable, "-m", "veadk_mem", "ltm", "save", str(path)], env=env, check=True, capture_output=True
    )


def run(queries: Path, env: dict[str, str]) -> tuple[float, float, float]:
    """(peak RSS in MB, seconds to the first result line, seconds in all) of one batch search."""
    args = [sys.executable, "-m", "veadk_mem", "ltm", "search", "--queries", str(queries), "-u", USER, "-a", APP]
    args += ["--mode", "vector"]  # what an agent retrieves; hybrid adds sqlite FTS5's time per query, not memory
    start = time.perf_counter()
    child = subprocess.Popen(args, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    assert child.stdout is not None
    first = child.stdout.readline()
    to_first = time.perf_counter() - start
    with open(os.devnull, "wb") as sink:
        while chunk := child.stdout.read(1 << 16):
            sink.write(chunk)
    _, status, usage = os.wait4(child.pid, 0)
    child.returncode = os.waitstatus_to_exitcode(status)
    if child.returncode != 0 or not first:
        raise SystemExit(f"ltm search --queries exited {child.returncode}")
    return usage.ru_maxrss / 1024, to_first, time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--queries", type=int, default=10_000, help="N: the longer file's queries")
    n = parser.parse_args().queries
    with tempfile.TemporaryDirectory(prefix="vmem-bench-") as tmp:
        home = Path(tmp)
        env = {
            **os.environ,
            "HOME": str(home),
            "XDG_DATA_HOME": str(home / "data"),
            "XDG_CONFIG_HOME": str(home / "config"),
            "MODEL_EMBEDDING_PROVIDER": "hash",
            "LONG_TERM_MEMORY_LOCAL_PATH": str(home / "ltm.db"),
        }
        seed(home, env)
        figures = {}
        for count in (n // 10, n):
            queries = home / f"q{count}.txt"
            queries.write_text(
                "".join(f"what about topic {i % 97} in city {i % 31}, question {i}\n" for i in range(count))
            )
            figures[count] = run(queries, env)
            rss, first, total = figures[count]
            print(f"{count:>9,} queries: peak RSS {rss:7.1f} MB, first line after {first:5.2f} s of {total:6.1f} s")
        small, big = figures[n // 10][0], figures[n][0]
        print(
            f"peak RSS ratio, {n:,} / {n // 10:,} queries: {big / small:.2f}"
            " (bounded: 1.00; above it, memory grows with the file)"
        )


if __name__ == "__main__":
    main()
