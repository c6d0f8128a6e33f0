"""Felt speed: whole `vmem` processes against `vmem --help`, and `vmem --help` against imports.

Prints, per command, the median over N runs (default 10, after one warm-up) of the process's
CPU time (user + system, from the kernel: steadier than wall time on a shared host) and its
wall time; then the ratios #45 item 13 sets: `session list` and `session get` on a 50-session
sqlite file within 2.5x of `vmem --help`, `ltm search` on 1,000 local memories within 3x, and
`import google.adk.sessions` / `vmem --help` (>= 4x); and #45 item 5's completion of a session
id (`vmem session get APP USER <TAB>`, as completions/vmem.bash asks) on a 50,000-session file (< 300 ms).
With `--before DIR` (a checkout of another commit, e.g. `git worktree add /tmp/before main`)
every vmem command also runs from DIR in the same run, through the same Python, so the two
sets of figures compare. The runs go round robin (one of each command, N times over), so a
change in the host's load while the bench runs falls on every figure alike.
vmem's bytecode is compiled first, as a pip install does (bench/as_installed.py).
Run: .venv/bin/python bench/startup.py [--runs N] [--before DIR]
"""

from __future__ import annotations

import argparse
import compileall
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from as_installed import ROOT, compile_vmem

SESSIONS = 50
MEMORIES = 1_000
COMPLETION_SESSIONS = 50_000


def run_once(cmd: list[str], env: dict[str, str]) -> tuple[float, float]:
    """(CPU seconds, wall seconds) of one whole process."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    subprocess.run(cmd, capture_output=True, check=True, env=env)
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime), wall


def round_robin(cases: dict[str, tuple[list[str], dict[str, str]]], runs: int) -> dict[str, tuple[float, float]]:
    """Median CPU and wall seconds of each case: one warm-up each, then `runs` rounds of one run of every case."""
    for cmd, env in cases.values():
        run_once(cmd, env)
    samples: dict[str, list[tuple[float, float]]] = {label: [] for label in cases}
    for _ in range(runs):
        for label, (cmd, env) in cases.items():
            samples[label].append(run_once(cmd, env))
    return {
        label: (statistics.median(s[0] for s in got), statistics.median(s[1] for s in got))
        for label, got in samples.items()
    }


def make_sessions(path: Path) -> str:
    """SESSIONS sessions of 6 events each, written by google-adk's DatabaseSessionService."""
    import asyncio

    from google.adk.events import Event
    from google.adk.sessions import DatabaseSessionService
    from google.genai import types

    url = f"sqlite+aiosqlite:///{path}"

    async def go() -> str:
        service = DatabaseSessionService(url)
        last = ""
        for i in range(SESSIONS):
            session = await service.create_session(app_name="bench", user_id=f"user-{i % 7}", session_id=f"s{i:03d}")
            for j in range(6):
                role, author = ("user", "user") if j % 2 == 0 else ("model", "agent")
                text = f"message {j} of session {i}: the order #{1000 + i} has a cracked screen"
                content = types.Content(role=role, parts=[types.Part(text=text)])
                await service.append_event(session, Event(author=author, invocation_id=f"i{j // 2}", content=content))
            last = session.id
        await service.close()
        return last

    return asyncio.run(go())


def make_memories(env: dict[str, str], workdir: Path) -> None:
    """MEMORIES memories saved by `vmem ltm save` (hash embedder) into the local store env names."""
    events = [
        {
            "id": f"e{i}",
            "author": "user",
            "invocationId": f"i{i}",
            "timestamp": 1_790_000_000.0 + i,
            "content": {"role": "user", "parts": [{"text": f"memory {i}: customer {i % 97} asked about order {i}"}]},
        }
        for i in range(MEMORIES)
    ]
    session = {"id": "m", "appName": "bench", "userId": "u1", "state": {}, "events": events, "lastUpdateTime": 0}
    source = workdir / "memories.json"
    source.write_text(json.dumps(session), encoding="utf-8")
    cmd = [sys.executable, "-m", "veadk_mem", "ltm", "save", str(source)]
    subprocess.run(cmd, check=True, capture_output=True, env=env)


def make_many_sessions(source: Path, path: Path) -> None:
    """COMPLETION_SESSIONS session rows (no events): `source`'s ADK-written tables, its sessions
    copied under new ids and 700 users, for the completion case (a bounded name query)."""
    import shutil
    import sqlite3

    shutil.copyfile(source, path)
    with sqlite3.connect(path) as conn:
        conn.execute(
            "INSERT INTO sessions (app_name, user_id, id, state, create_time, update_time) "
            "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < ?) "
            "SELECT s.app_name, 'user-' || (n.i % 700), printf('c%06d', n.i), s.state, s.create_time, s.update_time "
            "FROM n JOIN (SELECT * FROM sessions LIMIT 1) AS s",
            (COMPLETION_SESSIONS - SESSIONS,),
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--before", type=Path, help="a checkout of another commit to measure beside this one")
    args = parser.parse_args()
    py = sys.executable
    compile_vmem()
    if args.before:
        compileall.compile_dir(str(args.before / "veadk_mem"), quiet=1)
    work = Path(tempfile.mkdtemp(prefix="vmem-startup-"))
    # `python -m` puts the working directory first on sys.path, before PYTHONPATH: run from a
    # checkout, every tree would run that checkout's vmem. The commands run from the temp dir.
    os.chdir(work)
    base = {k: v for k, v in os.environ.items() if not k.startswith(("VMEM_", "SHORT_TERM", "LONG_TERM"))}
    base |= {
        "HOME": str(work / "home"),
        "XDG_CONFIG_HOME": str(work / "config"),
        "XDG_DATA_HOME": str(work / "data"),
        "MODEL_EMBEDDING_PROVIDER": "hash",
        "LONG_TERM_MEMORY_BACKEND": "local",
        "LONG_TERM_MEMORY_LOCAL_PATH": str(work / "ltm.db"),
        "NO_COLOR": "1",
    }
    db = work / "sessions.db"
    last = make_sessions(db)
    many = work / "many.db"
    make_many_sessions(db, many)
    trees = {"now": ROOT, **({"before": args.before.resolve()} if args.before else {})}
    make_memories({**base, "PYTHONPATH": str(ROOT)}, work)
    vmem = [py, "-m", "veadk_mem"]
    commands = {
        "vmem --help": ([*vmem, "--help"], {}),
        "session list": ([*vmem, "session", "list", "--db-url", str(db)], {}),
        "session get": (
            [*vmem, "session", "get", "bench", f"user-{(SESSIONS - 1) % 7}", last, "--db-url", str(db)],
            {},
        ),
        "ltm search": ([*vmem, "ltm", "search", "cracked screen order", "-u", "u1", "-a", "bench"], {}),
        # what completions/vmem.bash runs at `vmem session get --db-url FILE bench user-1 c00<TAB>`
        "complete session id": (
            vmem,
            {
                "_VMEM_COMPLETE": "complete_bash",
                "COMP_WORDS": f"vmem session get --db-url {many} bench user-1 c00",
                "COMP_CWORD": "7",
            },
        ),
    }
    references = {
        "python -c pass": [py, "-c", "pass"],
        # what any session command must import before it reads a row: the floor under its ratio
        "import sqlalchemy async+sqlite": [py, "-c", "import sqlalchemy.ext.asyncio, aiosqlite"],
        "import google.adk.sessions": [py, "-c", "import google.adk.sessions"],
    }
    cases = {label: (cmd, base) for label, cmd in references.items()}
    for name, tree in trees.items():
        for label, (cmd, extra) in commands.items():
            cases[f"{name} {label}"] = (cmd, {**base, **extra, "PYTHONPATH": str(tree)})
    got = round_robin(cases, args.runs)
    print(f"median of {args.runs} whole processes after a warm-up, round robin: CPU ms (wall ms)")
    for label, (cpu, wall) in got.items():
        print(f"  {label:<31} {cpu * 1000:7.1f} ({wall * 1000:7.1f})")
    adk = got["import google.adk.sessions"][0]
    targets = {"session list": 2.5, "session get": 2.5, "ltm search": 3.0}
    for name in trees:
        help_cpu = got[f"{name} vmem --help"][0]
        parts = [
            f"{label} {got[f'{name} {label}'][0] / help_cpu:.2f}x (<= {bound}x)" for label, bound in targets.items()
        ]
        print(f"{name}: CPU / vmem --help: " + ", ".join(parts))
        print(f"{name}: import google.adk.sessions / vmem --help = {adk / help_cpu:.1f}x (>= 4x)")
        completion = got[f"{name} complete session id"][0]
        print(
            f"{name}: complete session id on {COMPLETION_SESSIONS:,} sessions "
            f"{completion * 1000:.0f} ms CPU (< 300 ms), "
            f"{completion / help_cpu:.2f}x vmem --help"
        )
    if args.before:
        for label in commands:
            ratio = got[f"now {label}"][0] / got[f"before {label}"][0]
            print(f"now / before: {label} {ratio:.2f}x")


if __name__ == "__main__":
    main()
