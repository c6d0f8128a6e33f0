"""Peak RSS and rate of `vmem session import` with and without one big session in the file (issue #22 item 3).

    .venv/bin/python bench/import_big.py                          # 200,000-event session, sqlite and PostgreSQL
    .venv/bin/python bench/import_big.py --big 50000 --backends sqlite

Builds, with `bench/sessions_scale.py`'s realistic event shapes, two files: one holding
just the big session (`--big` events, one JSONL line of tens of MB) and one holding
about as many events in small sessions (4 to 36 events each). Imports each into a fresh
database as its own process and prints wall time, events/s, CPU time and peak RSS (the
import's process and its reader child together, as `sessions_scale.vmem` samples them).
The import's peak should not depend on the largest session: both files should peak alike.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import sessions_scale as scale


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--big", type=int, default=200_000, help="events of the big session")
    parser.add_argument("--backends", default="sqlite,postgresql")
    opts = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="vmem-import-big-"))
    one, many = work / "one.jsonl", work / "many.jsonl"
    rng = scale.random.Random(22)
    one.write_text(scale._session_line(rng, scale.BIG_APP, scale.BIG_USER, scale.BIG_ID, opts.big, scale.NOW - 86400))
    _, many_events = scale.build_file(many, opts.big, 0, 0)  # small sessions only (and an empty big one)
    size = one.stat().st_size / 1e6
    print(f"one session: {opts.big:,} events, {size:.0f} MB; small sessions: {many_events:,} events")
    for name in opts.backends.split(","):
        for label, source, events in (("one big session", one, opts.big), ("small sessions", many, many_events)):
            db = f"vmem_big_{uuid.uuid4().hex[:8]}"
            if name == "postgresql":
                if not scale._reachable(5432):
                    print("PostgreSQL not reachable: skipped")
                    break
                asyncio.run(scale._pg_admin(f'CREATE DATABASE "{db}"'))
                url = f"postgresql+asyncpg://postgres@127.0.0.1:5432/{db}"
            else:
                url = f"sqlite+aiosqlite:///{work / db}.db"
            try:
                wall, cpu, rss, code, err = scale.vmem(["session", "import", str(source)], url)
                status = "" if code == 0 else f"  exit {code}: {err}"
                print(
                    f"{name:<10} {label:<16} {wall:6.1f} s  {events / wall:8,.0f} events/s  "
                    f"cpu {cpu:6.1f} s  peak RSS {rss:5.0f} MB{status}"
                )
            finally:
                if name == "postgresql":
                    asyncio.run(scale._pg_admin(f'DROP DATABASE IF EXISTS "{db}" WITH (FORCE)'))


if __name__ == "__main__":
    main()
