"""`vmem ltm show` and the erasure that `session delete --with-memories` and `forget --session` run (#42).

Thin: parses, calls `ops.memory_show` / `ops.erasure`, renders their results.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any

import typer

from veadk_mem.cli.columns import Column
from veadk_mem.cli.render import counted
from veadk_mem.cli.session_rows import show_plan
from veadk_mem.cli.state import AppState, DbUrlOption, JsonOption, confirm_deletion, get_state, run

if TYPE_CHECKING:
    from veadk_mem.ltm.facade import LongTermMemory
    from veadk_mem.ops.erasure import ErasureReport
    from veadk_mem.ops.memory_show import MemoryShow

PolicyOpt = Annotated[
    str | None,
    typer.Option(
        "--policy",
        metavar="P",
        help="Policy whose memory strings to look for (preset, [policy.NAME], file, JSON; all-presets: every one).",
    ),
]
WithMemoriesOpt = Annotated[
    bool,
    typer.Option("--with-memories", help="Also delete the memories made from these sessions, then verify them gone."),
]


def ltm_facade(state: AppState, app_name: str = "") -> LongTermMemory:
    """The configured long-term memory, warnings on stderr."""
    from veadk_mem.ltm.facade import LongTermMemory

    render = state.render
    return LongTermMemory.from_settings(state.loaded.settings, app_name=app_name, warn=render.warn, notice=render.warn)


# --- ltm show --------------------------------------------------------------------------


def show(
    ctx: typer.Context,
    memory_id: Annotated[str, typer.Argument(metavar="ID", help="The memory's id (from ltm list or search).")],
    user: Annotated[
        str | None, typer.Option("--user", "-u", metavar="USER", help="The memory's user (else every user).")
    ] = None,
    app_name: Annotated[
        str | None, typer.Option("--app", "-a", metavar="APP", help="App name; picks the index.")
    ] = None,
    db_url: DbUrlOption = None,
    json_flag: JsonOption = False,
) -> None:
    """A memory, where it came from, and why the policy kept it.

    Reads the session it came from when the session database is reachable; a memory
    without a recorded source is matched by content hash against the user's sessions.
    """
    state = get_state(ctx, json_flag=json_flag)
    state.use_db_url(db_url)
    ltm = ltm_facade(state, app_name or "")
    settings = state.loaded.settings

    async def go() -> MemoryShow:
        from veadk_mem.ops.memory_show import show_memory  # startup: only `ltm show` needs it

        async with ltm:
            return await show_memory(settings, ltm, memory_id, user_id=user, app_name=app_name)

    found = run(go())
    if state.render.json_mode:
        state.render.json(found.to_json())
        return
    _render_show(state, found)


def _render_show(state: AppState, found: MemoryShow) -> None:
    from veadk_mem.ltm.convert import searchable_text

    record = found.record
    pairs: list[tuple[str, Any]] = [
        ("id", record.id),
        ("user", found.user_id),
        ("index", f"{found.backend} {found.index}"),
        ("text", searchable_text(record.text)),
        ("saved", state.render.when(record.created_at) if isinstance(record.created_at, (int, float)) else ""),
        ("content hash", record.content_hash),
        ("source", found.source_text),
        ("session database", found.session_db),
    ]
    state.render.fields(pairs, title=None)
    rows = [
        {
            "session": e.session_id,
            "event": e.event_id,
            "author": e.author,
            "decision": e.decision or "missing",
            "same": "yes" if e.same_text else "no",
            "why": f"{e.policy}: {e.reason}" if e.reason else e.policy,
        }
        for e in found.events
    ]
    if rows:
        columns = [
            Column.id("session", "session"),
            Column.id("event", "event"),
            Column("author", "author", drop=2),
            Column("decision", "decision"),
            Column("same text", "same", drop=1),
            Column.free("why", "why"),
        ]
        state.render.table(rows, columns, title="from")
    for note in found.notes:
        state.render.message(note)


# --- erasure ---------------------------------------------------------------------------

MEMORY_COLUMNS = [
    Column("index", "index", drop=2),
    Column.id("id", "id"),
    Column("matched by", "matched_by", drop=1),
    Column.text("text", "text", max_width=60),
]


def confirm_erasure(state: AppState, yes: bool) -> Any:
    """The question asked before an erasure, with the plan on stderr."""

    def confirm(report: ErasureReport) -> None:
        if yes:
            return
        render_plan(state, report, to_stderr=True)
        sessions = counted(len(report.sessions.sessions), "session")
        question = (
            f"Delete {sessions}, {counted(report.events, 'event')} and "
            f"{counted(len(report.memories), 'memory')} from {report.backend}?"
        )
        confirm_deletion(state, question, yes=yes)

    return confirm


def render_plan(state: AppState, report: ErasureReport, *, to_stderr: bool = False) -> None:
    """The sessions and memories an erasure takes (or took), and the memories it keeps, with why."""
    show_plan(state, report.sessions, to_stderr=to_stderr)
    render_memories(state, report, to_stderr=to_stderr)


def render_memories(state: AppState, report: ErasureReport, *, to_stderr: bool = False) -> None:
    """The memories an erasure takes (or took) and those it keeps, with why."""
    rows = [m.to_json() for m in report.memories]
    title = f"memories in {report.backend}"
    state.render.table(rows, MEMORY_COLUMNS, title=title, empty="no memories made from them", to_stderr=to_stderr)
    for m in report.kept:
        state.render.message(f"kept memory {m.record.id} ({m.index}): {m.kept}")


def render_erasure(state: AppState, report: ErasureReport) -> None:
    """An erasure's outcome: JSON, a plan (dry run) or a summary with the verification; exit 1 if any is left."""
    render = state.render
    if render.json_mode:
        render.json(report.to_json())
    elif report.dry_run or not report.done:
        render_plan(state, report)
        render.message(
            "dry run: nothing deleted" if report.dry_run else "no sessions and no memories match: nothing deleted"
        )
    else:
        s = report.sessions
        render.message(
            f"deleted {counted(report.deleted_memories, 'memory')} from {report.backend}, then "
            f"{counted(report.deleted_sessions, 'session')} and {counted(s.events, 'event')}"
        )
        for m in report.kept:
            render.message(f"kept memory {m.record.id} ({m.index}): {m.kept}")
    verified(state, report)


def verified(state: AppState, report: ErasureReport) -> None:
    """The verification's outcome: one line when clean; each memory left, and exit 1, when not."""
    render = state.render
    verification = report.verification
    if verification is None:
        return
    if verification.clean:
        if not render.json_mode:
            render.message(
                f"verified: none of the {counted(verification.checked, 'deleted memory')} is left "
                f"(listing and {counted(verification.searches, 'search')})"
            )
        return
    for left in verification.left:
        render.error(
            f"still there after the delete: memory {left['id']} in {left['index']} (found by {left['found_by']})"
        )
    raise typer.Exit(1)


def record_erasure(change: Any, report: ErasureReport) -> None:
    """An erasure's history entry: what went from each store, and its receipt (ids and hashes, no text)."""
    if not report.done:
        return
    change.count(sessions=report.deleted_sessions, events=report.sessions.events, memories=report.deleted_memories)
    change.add_ids(f"{s.app_name}/{s.user_id}/{s.id}" for s in report.sessions.sessions)
    change.add_ids(f"memory {m.index}/{m.record.id}" for m in report.memories)
    change.receipt = report.receipt()


def forget_session(
    state: AppState, *, user: str, session_id: str, app_name: str | None, policy: str | None, dry_run: bool, yes: bool
) -> None:
    """`vmem forget USER --session ID`: one session of the user, with the memories made from it."""
    from veadk_mem.sessions.store import SessionStore

    ltm = ltm_facade(state, app_name or "")
    store = SessionStore.from_settings(state.loaded.settings)

    async def go() -> ErasureReport:
        from veadk_mem.ops.erasure import erase, user_session  # startup: only an erasure needs it

        async with ltm, store:
            key = await user_session(store, user, session_id, app_name)
            return await erase(
                store, ltm, keys=[key], policy=policy, dry_run=dry_run, confirm=confirm_erasure(state, yes)
            )

    with state.recording("forget --session", store.db.display_url, dry_run=dry_run) as change:
        report = run(go())
        record_erasure(change, report)
    render_erasure(state, report)
