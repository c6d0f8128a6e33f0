"""`vmem browse` driven by Textual's pilot (issue #47): time to the first screen, to open one large
session, to scroll 10,000 of its events, with peak RSS, beside `vmem session get --events 50` of
the same session in its own process (the ratio).

    python bench/browse.py                      # 200,000 events, sqlite
    python bench/browse.py --big 20000          # smaller, on a busy host

Needs the tui extra. Wall times on this shared host move; the ratio to `session get` in the
same run is the figure to compare.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import resource
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import sessions_scale as scale


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


async def drive(url: str, scroll: int) -> dict[str, float]:
    from textual.widgets import DataTable

    from veadk_mem.cli.browse.tui import BrowseApp, TimelineView
    from veadk_mem.cli.state import AppState

    state = AppState()
    state.use_db_url(url)
    app = BrowseApp(state)
    out: dict[str, float] = {}
    t0 = time.perf_counter()
    async with app.run_test(size=(120, 40)) as pilot:
        while not (app.screen.query("#sessions") and app.screen.query_one("#sessions", DataTable).row_count):
            await pilot.pause(0.01)
        out["first screen"] = time.perf_counter() - t0
        out["first screen, CPU"] = _cpu()
        t1, c1 = time.perf_counter(), _cpu()
        await pilot.press("enter")
        while not (app.screen.query(TimelineView) and app.screen.query_one(TimelineView).timeline.row(0)):
            await pilot.pause(0.01)
        out["open the session"] = time.perf_counter() - t1
        out["open the session, CPU"] = _cpu() - c1
        view = app.screen.query_one(TimelineView)
        t2, c2 = time.perf_counter(), _cpu()
        step = 100  # half a page a step: every row passes through the view, each page is read once
        for _ in range(scroll // step):
            view.action_move(step)
            while view.timeline.row(view.cursor) is None:
                await pilot.pause(0.005)
            await pilot.pause()
        out[f"scroll {scroll:,} events"] = time.perf_counter() - t2
        out[f"scroll {scroll:,} events, CPU"] = _cpu() - c2
        out["pages read"] = view.timeline.reads
        await pilot.press("q")
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--big", type=int, default=200_000, help="events of the session")
    parser.add_argument("--scroll", type=int, default=10_000, help="events to scroll through")
    parser.add_argument("--drive", metavar="URL", help=argparse.SUPPRESS)  # the child that runs the app
    opts = parser.parse_args()
    if opts.drive:
        import json

        figures = asyncio.run(drive(opts.drive, opts.scroll))
        figures["peak RSS MB"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        print(json.dumps(figures))
        return
    work = Path(tempfile.mkdtemp(prefix="vmem-browse-"))
    one = work / "one.jsonl"
    rng = scale.random.Random(47)
    one.write_text(scale._session_line(rng, scale.BIG_APP, scale.BIG_USER, scale.BIG_ID, opts.big, scale.NOW - 86400))
    url = f"sqlite+aiosqlite:///{work / 'browse.db'}"
    _, _, _, code, err = scale.vmem(["session", "import", str(one)], url)
    if code != 0:
        sys.exit(f"import failed: {err}")
    print(f"one session: {opts.big:,} events; load {os.getloadavg()[0]:.1f}")
    wall, cpu, rss, code, err = scale.vmem(
        ["session", "get", scale.BIG_APP, scale.BIG_USER, scale.BIG_ID, "--events", "50"], url
    )
    print(f"reference `vmem session get --events 50`: {wall:.2f} s wall, {cpu:.2f} s CPU, {rss:.0f} MB peak RSS")
    import json
    import subprocess

    env = {**os.environ, "NO_COLOR": "1", "PYTHONPATH": str(scale.ROOT)}
    child = [sys.executable, __file__, "--drive", url, "--scroll", str(min(opts.scroll, opts.big))]
    figures = json.loads(subprocess.run(child, capture_output=True, text=True, env=env, check=True).stdout)
    for name, value in figures.items():
        if name == "pages read":
            print(f"  {name}: {value:.0f}")
        elif name == "peak RSS MB":
            print(f"  browse peak RSS: {value:.0f} MB ({value / rss:.2f}x session get)")
        else:
            ref = cpu if name.endswith("CPU") else wall
            print(f"  browse, {name}: {value:.2f} s ({value / ref:.2f}x session get)")


if __name__ == "__main__":
    main()
