"""Startup cost of `vmem --help` / `vmem --version` next to bare Python and google-adk imports.

Prints the median whole-process wall time over N runs (default 10) of each command,
and the ratio of `import google.adk.sessions` to `vmem --help` (target: >= 4x). vmem's
bytecode is compiled first, as a pip install does (bench/as_installed.py).
Run: .venv/bin/python bench/startup.py [--runs N]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

from as_installed import compile_vmem


def median_seconds(cmd: list[str], runs: int) -> float:
    """Median wall time of running cmd to completion, after one warm-up run."""
    subprocess.run(cmd, capture_output=True, check=True)
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        subprocess.run(cmd, capture_output=True, check=True)
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10)
    args = parser.parse_args()
    py = sys.executable
    compile_vmem()
    vmem = shutil.which("vmem", path=str(Path(py).parent)) or "vmem"
    cases = [
        ("python -c pass", [py, "-c", "pass"]),
        ("python -c 'import typer, rich'", [py, "-c", "import typer, rich"]),
        ("vmem --version", [vmem, "--version"]),
        ("vmem --help", [vmem, "--help"]),
        ("python -c 'import google.adk.sessions'", [py, "-c", "import google.adk.sessions"]),
    ]
    results = {}
    print(f"median of {args.runs} runs, whole process")
    for label, cmd in cases:
        results[label] = median_seconds(cmd, args.runs)
        print(f"  {label:<42} {results[label] * 1000:8.1f} ms")
    ratio = results["python -c 'import google.adk.sessions'"] / results["vmem --help"]
    print(f"import google.adk.sessions / vmem --help = {ratio:.1f}x (target >= 4x)")


if __name__ == "__main__":
    main()
