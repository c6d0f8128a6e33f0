"""`vmem ltm reembed`: move an existing store to another embedding model in place.

Thin: the plan and the work are in `veadk_mem.ltm.reembed` and the local backend
(`ltm/backends/local_reembed.py`); this parses, shows progress and renders the report.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Annotated, Any

import typer

from veadk_mem.cli.columns import Column
from veadk_mem.cli.render import counted
from veadk_mem.cli.state import JsonOption, get_state, run
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

    async def go() -> Any:
        async with ltm:
            job = await plan_reembed(ltm, user_id=user, app_name=app_name, model=model)
            job.report.dry_run = dry_run
            if dry_run or not job.report.indexes:
                return job.report
            with render.progress(f"re-embedding with {job.embedder.name}", total=job.to_embed) as advance:
                try:
                    return await asyncio.to_thread(job.run, batch_bytes=limit, progress=advance, stop=stopping.is_set)
                except asyncio.CancelledError:  # Ctrl-C: asyncio waits for the worker thread, so stop it
                    stopping.set()  # before its swap commits (else it would run on to the end)
                    raise

    stopping = threading.Event()
    try:
        report = run(go())
    except KeyboardInterrupt:
        render.error("interrupted: nothing was changed (the store keeps its model)")
        render.hint("run the same command again to resume: the vectors embedded so far are kept aside")
        raise typer.Exit(130) from None
    _render(state.render, report)


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
