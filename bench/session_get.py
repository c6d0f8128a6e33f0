"""`vmem session get --json` of one large session: events/s, CPU time and peak RSS (issue #22).

    .venv/bin/python bench/session_get.py                                  # 200,000 events, sqlite and PostgreSQL
    .venv/bin/python bench/session_get.py --big 50000 --backends sqlite --runs 3

Imports one session of `--big` events (`bench/sessions_scale.py`'s event shapes) into a
fresh database, then runs `python -m veadk_mem session get APP USER ID --json` as its own
process `--runs` times, printing for each its wall time, events per wall second, CPU time
(user + sys), events per CPU second and peak RSS (the machine may be shared: CPU time is
the steadier figure). The output goes to /dev/null; a last run checks it parses and holds
every event.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import sessions_scale as scale


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--big", type=int, default=200_000, help="events of the session")
    parser.add_argument("--backends", default="sqlite,postgresql")
    parser.add_argument("--runs", type=int, default=2)
    opts = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="vmem-get-big-"))
    one = work / "one.jsonl"
    rng = scale.random.Random(22)
    one.write_text(scale._session_line(rng, scale.BIG_APP, scale.BIG_USER, scale.BIG_ID, opts.big, scale.NOW - 86400))
    print(f"one session: {opts.big:,} events, {one.stat().st_size / 1e6:.0f} MB; load {os.getloadavg()[0]:.1f}")
    args = ["session", "get", scale.BIG_APP, scale.BIG_USER, scale.BIG_ID, "--json"]
    for name in opts.backends.split(","):
        db = f"vmem_scale_get_{uuid.uuid4().hex[:8]}"
        if name == "postgresql":
            if not scale._reachable(5432):
                print("PostgreSQL not reachable: skipped")
                continue
            asyncio.run(scale._pg_admin(f'CREATE DATABASE "{db}"'))
            url = f"postgresql+asyncpg://postgres@127.0.0.1:5432/{db}"
        else:
            url = f"sqlite+aiosqlite:///{work / db}.db"
        try:
            _, _, _, code, err = scale.vmem(["session", "import", str(one)], url)
            if code != 0:
                print(f"{name}: import failed: {err}")
                continue
            if name == "postgresql":
                asyncio.run(scale._pg_analyze(url))
            for _ in range(opts.runs):
                load = os.getloadavg()[0]
                wall, cpu, rss, code, err = scale.vmem(args, url)
                status = "" if code == 0 else f"  exit {code}: {err}"
                print(
                    f"{name:<10} {wall:6.2f} s {opts.big / wall:8,.0f} ev/s  cpu {cpu:5.2f} s "
                    f"{opts.big / cpu:8,.0f} ev/cpu-s  peak RSS {rss:4.0f} MB  load {load:.1f}{status}",
                    flush=True,
                )
            out = work / "get.json"
            scale.vmem(args, url, str(out))
            got = json.loads(out.read_text())
            assert len(got["events"]) == opts.big, len(got["events"])
            out.unlink()
        finally:
            if name == "postgresql":
                asyncio.run(scale._pg_admin(f'DROP DATABASE IF EXISTS "{db}" WITH (FORCE)'))
    one.unlink()


if __name__ == "__main__":
    main()
