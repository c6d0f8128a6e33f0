"""`vmem ltm reembed`: move an existing store to another embedding model in place.

Thin: the plan and the work are in `veadk_mem.ltm.reembed` and the local backend
(`ltm/backends/local_reembed.py`); this parses, shows progress and renders the report.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Annotated, Any

import typer

from veadk_mem.cli.columns import Column
from veadk_mem.cli.render import counted
from veadk_mem.cli.state import JsonOption, get_state, run
from veadk_mem.ltm.backends.local_reembed import Stopped, StopSwitch
from veadk_mem.ltm.bounds import batch_bytes
from veadk_mem.ltm.reembed import plan_reembed

PLAN_COLUMNS = [
    Column.id("index", "index"),
    Column("from model", "model", no_wrap=True),
    Column("users", "users", justify="right"),
    Column("memories", "memories", justify="right"),
]


def reembed(
    ctx: typer.Context,
    user: Annotated[
        str | None,
        typer.Option("--user", "-u", metavar="USER", help="The index holding this user's memories (alone in it)."),
    ] = None,
    app_name: Annotated[str | None, typer.Option("--app", "-a", metavar="APP", help="The index of this app.")] = None,
    model: Annotated[
        str | None,
        typer.Option(
            "--model",
            "-m",
            metavar="NAME",
            help="multilingual-e5-small, all-MiniLM-L6-v2 or a model path (default: configured).",
        ),
    ] = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Show what would be re-embedded; change nothing.")] = False,
    json_flag: JsonOption = False,
) -> None:
    """Re-embed stored memories with another model, in place (local store).

    The model belongs to an index: every memory of the index moves, and the index then
    records the new model, which searches (and provider = "auto") use from then on. New
    vectors are staged in the store file, then swapped in by one transaction: a killed run
    changes nothing, and running it again reuses what it staged. Other backends: exit 4.
    """
    from veadk_mem.ltm.facade import LongTermMemory

    state = get_state(ctx, json_flag=json_flag)
    render = state.render
    limit = batch_bytes()
    ltm = LongTermMemory.from_settings(state.loaded.settings, warn=render.warn, notice=render.warn)

    switch = StopSwitch()
    planned: list[Any] = []  # the job, once planned: its report is what a late Ctrl-C reports

    async def go() -> Any:
        async with ltm:
            job = await plan_reembed(ltm, user_id=user, app_name=app_name, model=model)
            job.report.dry_run = dry_run
            if dry_run or not job.report.indexes:
                return job.report
            planned.append(job)
            progress = render.progress(f"re-embedding with {job.embedder.name}", total=job.to_embed)
            with progress as advance, _ctrl_c_stops(switch):
                try:
                    return await asyncio.to_thread(job.run, batch_bytes=limit, progress=advance, stop=switch)
                except asyncio.CancelledError:  # a Ctrl-C asyncio passed on as a cancel (see _ctrl_c_stops)
                    switch.request()
                    raise

    try:
        report = run(go())
    except (KeyboardInterrupt, Stopped):
        # The switch decides, under the swap's own lock: a stop asked now can no longer be overtaken
        # by the commit, and one that comes after it says so, whichever way the interrupt came in.
        if switch.request():
            render.error("interrupted: nothing was changed (the store keeps its model)")
            render.hint("run the same command again to resume: the vectors embedded so far are kept aside")
            raise typer.Exit(130) from None
        report = planned[0].report
    _render(state.render, report)
    if switch.late:
        render.message("Ctrl-C came after the swap had committed: the move is done")


@contextmanager
def _ctrl_c_stops(switch: StopSwitch) -> Iterator[None]:
    """While the worker runs, Ctrl-C asks it to stop straight from the signal handler.

    asyncio.run's own handler only cancels the main task, and the stop reached the worker when
    the loop next ran that task: a step the commit could overtake. A SIGINT that a parent set to
    be ignored (a background job) stays ignored; outside the main thread nothing is installed."""
    import signal

    before = signal.getsignal(signal.SIGINT)
    if before is signal.SIG_IGN or threading.current_thread() is not threading.main_thread():
        yield
        return

    def on_sigint(signum: int, frame: Any) -> None:
        switch.request()

    signal.signal(signal.SIGINT, on_sigint)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, before)


def _render(render: Any, report: Any) -> None:
    data = report.to_json()
    if render.json_mode:
        render.json(data)
    elif report.indexes:
        title = f"{'would move' if report.dry_run else 'moved'} to {report.model} ({report.dim}-d)"
        render.table([i.to_json() for i in report.indexes], PLAN_COLUMNS, title=title, to_stderr=True)
    for name in report.unchanged:
        render.message(f"index {name!r} is on {report.model} already")
    if not report.indexes and not report.unchanged:
        render.message("no memories to re-embed")
    elif report.indexes and not report.dry_run:
        staged = f" ({counted(report.reused, 'memory')} staged by an earlier run)" if report.reused else ""
        render.message(f"re-embedded {counted(report.embedded, 'memory')}{staged} with {report.model}")
