"""`vmem ltm export`, `vmem ltm import` and `vmem ltm copy`: long-term memory as a file, and migrations.

Thin: the work is in `veadk_mem.ltm.transfer`; these parse options, build the facades and
render the summary.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Annotated, Any

import typer

from veadk_mem.cli.columns import Column
from veadk_mem.cli.render import counted
from veadk_mem.cli.state import AppState, JsonOption, get_state, run
from veadk_mem.errors import BadInput
from veadk_mem.ltm.bounds import batch_bytes
from veadk_mem.ltm.registry import backend_names, canonical_name, is_known
from veadk_mem.ops.history import ltm_store

if TYPE_CHECKING:
    from veadk_mem.ltm.facade import LongTermMemory

BACKEND_HELP = "Backend name (default: long_term_memory.backend)."
SUMMARY_COLUMNS = [
    Column("read", "read", justify="right"),
    Column("saved", "saved", justify="right"),
    Column("duplicates", "duplicates", justify="right"),
    Column("failed", "failed", justify="right"),
    Column("reused", "reused_vectors", justify="right"),
    Column("re-embedded", "reembedded", justify="right"),
]


def _facade(state: AppState, backend: str | None, option: str = "--backend") -> LongTermMemory:
    """A facade on the configured backend, or on another one by name with the same settings."""
    from veadk_mem.ltm.facade import LongTermMemory

    settings = state.loaded.settings
    if backend:
        if not is_known(backend):  # the registry's own test, as the config's long_term_memory.backend
            raise BadInput(f"{option}: unknown backend {backend!r}: expected one of {', '.join(backend_names())}")
        name = canonical_name(backend, state.render.warn)
        settings = settings.model_copy(deep=True)
        settings.long_term_memory.backend = name
    return LongTermMemory.from_settings(settings, warn=state.render.warn, notice=state.render.warn)


def _scope(user: str | None, all_users: bool, app_name: str | None, index: str | None, ltm: LongTermMemory) -> Any:
    from veadk_mem.ltm.transfer import ExportScope

    if app_name and index:
        raise BadInput("--app and --index both pick the index: give one")
    chosen = index or (ltm.index_for(app_name) if app_name else None)
    return ExportScope(user_id=user, all_users=all_users, index=chosen)


def _finish(state: AppState, summary: Any, dry_run: bool) -> None:
    render = state.render
    data = summary.as_dict(dry_run)
    if render.json_mode:
        render.json(data)
    else:
        title = "dry run: nothing was saved" if dry_run else None
        columns = list(SUMMARY_COLUMNS)
        if summary.ledger_skipped:  # the replay ledger's count, only where a store needs one
            columns.insert(3, Column("skipped by ledger", "ledger_skipped", justify="right"))
        render.table([data], columns, title=title, to_stderr=True)  # a summary: stderr, as every command's
    for failure in summary.failures:
        render.error(failure)
    if summary.failed or summary.stopped:  # stopped: the store went away, the rest was not read
        raise typer.Exit(1)


UserOpt = Annotated[str | None, typer.Option("--user", "-u", metavar="USER", help="Only this user's memories.")]
AllUsersOpt = Annotated[bool, typer.Option("--all-users", help="Every user's memories.")]
AppOpt = Annotated[str | None, typer.Option("--app", "-a", metavar="APP", help="The index of this app.")]
IndexOpt = Annotated[str | None, typer.Option("--index", "-i", metavar="INDEX", help="This index only.")]
DryRunOpt = Annotated[bool, typer.Option("--dry-run", help="Count what would be saved; change nothing.")]


def export(
    ctx: typer.Context,
    user: UserOpt = None,
    all_users: AllUsersOpt = False,
    app_name: AppOpt = None,
    index: IndexOpt = None,
    output: Annotated[
        str | None, typer.Option("--output", "-o", metavar="FILE", help="Write here instead of stdout ('-').")
    ] = None,
    vectors: Annotated[bool, typer.Option("--vectors", help="Include each memory's vectors and their model.")] = False,
    backend: Annotated[str | None, typer.Option("--backend", "-b", metavar="BACKEND", help=BACKEND_HELP)] = None,
) -> None:
    """Write long-term memory as JSONL: a header line, then one memory per line, streamed.

    A file appears whole or not at all. `vmem ltm import` reads it back into any backend.
    """
    from veadk_mem.ltm.transfer import atomic_output, dumps, export_lines

    state = get_state(ctx)
    ltm = _facade(state, backend)
    scope = _scope(user, all_users, app_name, index, ltm)
    render = state.render

    count = 0

    async def pieces() -> AsyncIterator[str]:
        nonlocal count
        with render.progress("exporting memories") as advance:
            async for line in export_lines(ltm, scope, vectors=vectors):
                yield dumps(line) + "\n"
                if line["kind"] == "memory":
                    count += 1
                    advance(1)

    async def go() -> None:
        async with ltm:
            if output in (None, "-"):
                await render.stream(pieces())
            else:
                with atomic_output(output) as handle:
                    await render.stream(pieces(), handle)

    run(go())
    if output not in (None, "-"):
        render.message(f"exported {counted(count, 'memory')} to {output}")
        if render.json_mode:  # the data went to the file: stdout takes the report
            render.json({"output": output, "memories": count})


def import_(
    ctx: typer.Context,
    source: Annotated[str, typer.Argument(metavar="FILE|-", help="An export of `vmem ltm export`, or '-' for stdin.")],
    backend: Annotated[str | None, typer.Option("--backend", "-b", metavar="BACKEND", help=BACKEND_HELP)] = None,
    index: Annotated[
        str | None,
        typer.Option("--index", "-i", metavar="INDEX", help="Save into this index (default: each memory's)."),
    ] = None,
    dry_run: DryRunOpt = False,
    rehash: Annotated[
        bool,
        typer.Option("--rehash", help="Recompute a content_hash that is not its text's instead of refusing the line."),
    ] = False,
    json_flag: JsonOption = False,
) -> None:
    """Load an export into a backend: every line checked first, then saved through VeADK's layout.

    Idempotent: memories the target already holds (by content hash, recomputed from the
    text) are skipped. A line whose content_hash is not its text's is exit 2 naming it,
    unless --rehash. Vectors are reused when the file's model and dimension are the
    target's, re-embedded otherwise.
    """
    from veadk_mem.ltm.transfer import import_records, open_export, precheck_indexes

    state = get_state(ctx, json_flag=json_flag)
    render = state.render
    limit = batch_bytes()
    with render.progress("checking the file") as advance:
        file = open_export(source, progress=advance, rehash=rehash)
    if file.rehashed:
        render.message(f"--rehash: recomputed the content hash of {counted(file.rehashed, 'edited memory')}")
    try:
        ltm = _facade(state, backend)
        precheck_indexes(ltm, file.indexes, index)

        async def go() -> Any:
            async with ltm:
                with render.progress("importing memories", total=file.memories) as step:
                    return await import_records(
                        ltm,
                        file.records(),
                        index=index,
                        dry_run=dry_run,
                        progress=step,
                        notice=render.message,
                        batch_bytes=limit,
                    )

        with state.recording("ltm import", ltm_store(ltm.backend_name, [index or ""]), dry_run=dry_run) as change:
            summary = run(go())
            change.count(memories=summary.saved)
            _finish(state, summary, dry_run)
    finally:
        file.close()


def copy(
    ctx: typer.Context,
    from_backend: Annotated[str, typer.Option("--from-backend", metavar="BACKEND", help="Backend to read from.")],
    to_backend: Annotated[str, typer.Option("--to-backend", metavar="BACKEND", help="Backend to write to.")],
    from_index: Annotated[
        str | None, typer.Option("--from-index", metavar="INDEX", help="Only this index of the source.")
    ] = None,
    to_index: Annotated[
        str | None, typer.Option("--to-index", metavar="INDEX", help="Save into this index (default: the same).")
    ] = None,
    user: UserOpt = None,
    dry_run: DryRunOpt = False,
    json_flag: JsonOption = False,
) -> None:
    """Copy memories from one backend to another in one process (every user unless --user)."""
    from veadk_mem.ltm.transfer import ExportScope, copy_memories

    state = get_state(ctx, json_flag=json_flag)
    render = state.render
    source = _facade(state, from_backend, "--from-backend")
    target = _facade(state, to_backend, "--to-backend")
    scope = ExportScope(user_id=user, all_users=user is None, index=from_index)

    async def go() -> Any:
        async with source, target:
            with render.progress("copying memories") as step:
                return await copy_memories(
                    source,
                    target,
                    scope,
                    to_index=to_index,
                    dry_run=dry_run,
                    progress=step,
                    notice=render.message,
                    batch_bytes=batch_bytes(),
                )

    with state.recording("ltm copy", ltm_store(target.backend_name, [to_index or ""]), dry_run=dry_run) as change:
        summary = run(go())
        change.count(memories=summary.saved)
        _finish(state, summary, dry_run)
