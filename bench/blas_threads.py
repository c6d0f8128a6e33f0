"""`vmem ltm save` of 20 sessions with one BLAS thread (vmem's default) and with one per core.

OpenBLAS starts a thread per core unless OPENBLAS_NUM_THREADS says otherwise, and reads it
only when numpy loads. vmem now sets it to 1 in its entry point, before anything imports
numpy; this times the whole `vmem ltm save` process (the offline model, the local store)
both ways while other processes keep every core busy, as on a shared machine. "one per
core" is what a save did before the fix: OPENBLAS_NUM_THREADS=<cores>, set by hand here
(a user's own setting wins over vmem's), which is OpenBLAS's default.

The two settings take turns (--rounds times each); every figure is printed, then the
medians side by side. The load is --load busy-loop processes (default: one per core), each
bounded to --max-load seconds and stopped when the timing ends.
Run: .venv/bin/python bench/blas_threads.py [--rounds 3] [--sessions 20] [--load N]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TOPICS = [
    "I am allergic to peanuts and shellfish",
    "my daughter Mia turns seven on June 3rd",
    "I'm training for the Hangzhou half marathon in April",
    "always book me a window seat on long flights",
    "I work as a backend engineer at a logistics company",
    "my manager wants the quarterly report every first Monday",
    "we are moving to Lisbon next spring",
    "I prefer green tea to coffee in the afternoon",
    "my dog Rex needs his vaccination in October",
    "I'm learning Finnish on weekday evenings",
]


def busy(seconds: float) -> None:
    """Keep one core busy for at most `seconds`."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        pass


def write_sessions(folder: Path, count: int) -> list[str]:
    """`count` sessions of 6 user turns each (every turn a memory under the default policy's filters)."""
    paths = []
    for s in range(count):
        events = []
        for t in range(6):
            text = f"{TOPICS[(s + t) % len(TOPICS)]} (note {s}-{t}); remember this about me."
            events.append({"id": f"e{t}", "author": "user", "content": {"role": "user", "parts": [{"text": text}]}})
        session = {"id": f"s{s}", "appName": "bench_app", "userId": f"user{s % 4}", "events": events}
        path = folder / f"s{s}.json"
        path.write_text(json.dumps(session))
        paths.append(str(path))
    return paths


def timed_save(vmem: str, sessions: list[str], work: Path, threads: str | None) -> tuple[float, int]:
    """Wall time of one `vmem ltm save` into a fresh local store, and the memories it saved."""
    store = work / f"ltm-{time.monotonic_ns()}.db"
    env = {k: v for k, v in os.environ.items() if not k.endswith("_NUM_THREADS")}
    env.update(
        {
            "LONG_TERM_MEMORY_BACKEND": "local",
            "LONG_TERM_MEMORY_LOCAL_PATH": str(store),
            "MODEL_EMBEDDING_PROVIDER": "local",
            "SHORT_TERM_MEMORY_BACKEND": "local",
        }
    )
    if threads is not None:
        env["OPENBLAS_NUM_THREADS"] = threads
    started = time.perf_counter()
    done = subprocess.run([vmem, "--json", "ltm", "save", *sessions], env=env, capture_output=True, text=True)
    took = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"vmem ltm save failed ({done.returncode}): {done.stderr.strip()[-300:]}")
    saved = sum(r.get("saved", 0) for r in json.loads(done.stdout).get("sessions", [])) or -1
    store.unlink(missing_ok=True)
    return took, saved


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--sessions", type=int, default=20)
    parser.add_argument("--load", type=int, default=os.cpu_count() or 1, help="busy-loop processes")
    parser.add_argument("--max-load", type=float, default=600.0, help="seconds a load process runs at most")
    args = parser.parse_args()
    vmem = shutil.which("vmem", path=str(Path(sys.executable).parent)) or "vmem"
    cores = str(os.cpu_count() or 1)
    cases = {"vmem's default (1 BLAS thread)": None, f"OPENBLAS_NUM_THREADS={cores} (before)": cores}
    times: dict[str, list[float]] = {name: [] for name in cases}
    with tempfile.TemporaryDirectory(prefix="vmem-blas-") as tmp:
        work = Path(tmp)
        sessions = write_sessions(work, args.sessions)
        timed_save(vmem, sessions[:1], work, None)  # warm the page cache (model weights, bytecode)
        load = [multiprocessing.Process(target=busy, args=(args.max_load,), daemon=True) for _ in range(args.load)]
        for process in load:
            process.start()
        try:
            for r in range(args.rounds):
                for name, threads in cases.items():
                    took, saved = timed_save(vmem, sessions, work, threads)
                    times[name].append(took)
                    print(f"round {r + 1}: {name}: {took:.2f} s ({saved} memories)", flush=True)
        finally:
            for process in load:
                process.terminate()
                process.join()
    print(f"\n{args.sessions} sessions, {args.load} busy-loop processes on {cores} cores, {args.rounds} rounds")
    print(f"{'setting':<40} {'median s':>9} {'min s':>7} {'max s':>7}")
    for name, values in times.items():
        print(f"{name:<40} {statistics.median(values):>9.2f} {min(values):>7.2f} {max(values):>7.2f}")


if __name__ == "__main__":
    main()
