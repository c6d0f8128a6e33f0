"""`vmem retention show` and `vmem session prune`: the `[retention]` rules, explained and applied."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any

import typer

from veadk_mem.cli.charts import human_bytes
from veadk_mem.cli.columns import Column
from veadk_mem.cli.erasure import PolicyOpt, WithMemoriesOpt, ltm_facade, render_memories, verified
from veadk_mem.cli.render import counted
from veadk_mem.cli.state import AppState, DbUrlOption, JsonOption, confirm_deletion, get_state, run
from veadk_mem.cli.terminal import terminal_safe
from veadk_mem.cli.wiring import table_shaped
from veadk_mem.errors import BadInput
from veadk_mem.sessions.vacuum import vacuum as vacuum_db

if TYPE_CHECKING:
    from veadk_mem.sessions.retention import AppPlan, RetentionPlan

app = typer.Typer(help="Retention rules ([retention]) and what they remove.", no_args_is_help=True)

AppOpt = Annotated[str | None, typer.Option("--app", "-a", metavar="APP", help="Only this app.")]

COLUMNS = [
    Column.id("app", "app_name"),
    Column("rule", "rule", drop=3),
    Column("sessions", "sessions", justify="right"),
    Column("max_age", "max_age", justify="right"),
    Column("per_user", "per_user", justify="right"),
    Column("events", "events_removed", justify="right", drop=1),
    Column("bytes", "bytes_removed", justify="right", drop=2),
    Column("trim", "trim", justify="right", drop=4),
    Column("trim bytes", "trim_bytes", justify="right", drop=5),
    Column.time("oldest kept", "oldest_kept"),
]  # max_age / per_user: sessions each rule removes now; trim (bytes): what keep_last_events is over by, at most


def _state(ctx: typer.Context, db_url: str | None, json_flag: bool) -> AppState:
    state = get_state(ctx, json_flag=json_flag)
    state.use_db_url(db_url)
    return state


def _rule_text(a: AppPlan) -> str:
    if a.excluded:
        return "kept (keep_apps)"
    return ", ".join(f"{k}={','.join(v) if isinstance(v, list) else v}" for k, v in a.rule.items()) or "none"


def _row(a: AppPlan) -> dict[str, Any]:
    total = a.total()
    return {
        "app_name": terminal_safe(a.app_name),
        "rule": terminal_safe(_rule_text(a)),
        "sessions": a.sessions,
        "max_age": a.removals["max_age"].sessions,
        "per_user": a.removals["max_sessions_per_user"].sessions,
        "events_removed": total.events,
        "bytes_removed": human_bytes(total.bytes),
        "trim": a.trim_events if "keep_last_events" in a.rule else "",
        "trim_bytes": human_bytes(a.trim_bytes) if "keep_last_events" in a.rule else "",
        "oldest_kept": a.oldest_kept,
    }


def _show(state: AppState, plan: RetentionPlan, *, title: str, to_stderr: bool = False) -> None:
    state.render.table(
        [_row(a) for a in plan.apps], COLUMNS, title=title, empty="no sessions and no app rules", to_stderr=to_stderr
    )
    doomed = plan.doomed
    if doomed:
        state.render.message(
            f"{counted(len(doomed), 'session')}, {counted(sum(s.events for s in doomed), 'event')} "
            f"({human_bytes(sum(s.bytes for s in doomed))}) to remove"
        )
    trims = [a for a in plan.apps if a.trims]
    if trims:
        over = sum(a.trim_events for a in trims)
        state.render.message(
            f"keep_last_events: {counted(sum(len(a.trims) for a in trims), 'session')} to trim, "
            f"at most {counted(over, 'older event')} ({human_bytes(sum(a.trim_bytes for a in trims))}; "
            "whole invocations and the latest compaction kept)"
        )


def _settings(state: AppState) -> Any:
    return state.loaded.settings.retention


@app.command("show")
@table_shaped
def show(
    ctx: typer.Context,
    app_name: AppOpt = None,
    db_url: DbUrlOption = None,
    json_flag: JsonOption = False,
) -> None:
    """Per app, what each [retention] rule would remove now: sessions, events, bytes, oldest kept."""
    from veadk_mem.sessions.retention import retention_plan
    from veadk_mem.sessions.store import SessionStore

    state = _state(ctx, db_url, json_flag)
    settings = _settings(state)

    async def go() -> RetentionPlan:
        async with SessionStore.from_settings(state.loaded.settings) as store:
            return await retention_plan(store, settings, app=app_name)

    plan = run(go())
    if state.json_mode:
        state.render.json(plan.to_json())
        return
    _show(state, plan, title="retention: what each rule removes now")


def prune(
    ctx: typer.Context,
    app_name: AppOpt = None,
    with_memories: WithMemoriesOpt = False,
    policy: PolicyOpt = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Show what would be removed; change nothing.")] = False,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Do not ask for confirmation.")] = False,
    db_url: DbUrlOption = None,
    json_flag: JsonOption = False,
) -> None:
    """Apply the [retention] rules: delete what they remove, in session delete's short transactions.

    --with-memories: the long-term memories of the sessions deleted and of the events
    trimmed go first, verified gone; without it, memories stay.
    """
    from veadk_mem.sessions.retention import prune as run_prune
    from veadk_mem.sessions.store import SessionStore

    state = _state(ctx, db_url, json_flag)
    settings = _settings(state)
    if policy is not None and not with_memories:
        raise BadInput("prune: --policy chooses the memories of --with-memories: give both")

    def confirm(plan: RetentionPlan) -> None:
        if not yes:
            _show(state, plan, title="to prune", to_stderr=True)
            doomed = plan.doomed
            events = sum(s.events for s in doomed)
            question = f"Delete {counted(len(doomed), 'session')} and {counted(events, 'event')}?"
            confirm_deletion(state, question, yes=yes)

    store = SessionStore.from_settings(state.loaded.settings)

    async def go() -> Any:
        async with store:
            if with_memories:
                from veadk_mem.ops.erasure import prune_erasure  # startup: only --with-memories needs it

                async with ltm_facade(state) as ltm:
                    return await prune_erasure(
                        store, ltm, settings, app=app_name, policy=policy, dry_run=dry_run, yes=yes, confirm=confirm
                    )
            return await run_prune(store, settings, app=app_name, dry_run=dry_run, yes=yes, confirm=confirm), None

    with state.recording("session prune", store.db.display_url, dry_run=dry_run) as change:
        report, erasure = run(go())
        if report.deleted is not None:
            change.count(sessions=len(report.deleted.sessions), events=report.deleted.events)
            change.add_ids(f"{s.app_name}/{s.user_id}/{s.id}" for s in report.deleted.sessions)
        change.count(trimmed_sessions=report.trimmed_sessions, trimmed_events=report.trimmed_events)
        if erasure is not None and erasure.done:
            change.count(memories=erasure.deleted_memories)
            change.add_ids(f"memory {m.index}/{m.record.id}" for m in erasure.memories)
            change.receipt = erasure.receipt()
    _prune_outcome(state, report, erasure)


def _prune_outcome(state: AppState, report: Any, erasure: Any) -> None:
    """What a prune did (or would do), and with --with-memories the memories' part; exit 1 if any is left."""
    skipped = [] if report.deleted is None else report.deleted.skipped
    for key in skipped:
        state.render.warn(f"{key}: kept, an agent updated it during the prune")
    if state.json_mode:
        out = report.to_json()
        if erasure is not None:
            out["memories"] = erasure.to_json()
        state.render.json(out)
        if erasure is not None:
            verified(state, erasure)
        return
    if report.dry_run:
        _show(state, report.plan, title="prune (dry run)")
        if erasure is not None:
            render_memories(state, erasure)
        state.render.message("dry run: nothing deleted")
        return
    if erasure is not None:
        render_memories(state, erasure)
        state.render.message(f"deleted {counted(erasure.deleted_memories, 'memory')} from {erasure.backend}")
    deleted = report.deleted
    if not deleted.sessions and not report.trimmed_events:
        state.render.message("nothing to prune: every session is within its rule")
        return
    state.render.message(
        f"pruned {counted(len(deleted.sessions), 'session')}, {counted(deleted.events, 'event')}"
        + (
            f"; trimmed {counted(report.trimmed_events, 'older event')} from "
            f"{counted(report.trimmed_sessions, 'session')}"
            if report.trimmed_sessions
            else ""
        )
        + (f"; {counted(len(skipped), 'session')} kept (resumed meanwhile)" if skipped else "")
    )
    if erasure is not None:
        verified(state, erasure)


SIZE_COLUMNS = [
    Column.id("table", "name"),
    Column("before", "before", justify="right"),
    Column("after", "after", justify="right"),
    Column("free before", "free", justify="right", drop=1),
]


def vacuum(
    ctx: typer.Context,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Show sizes and what would run; change nothing.")] = False,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="MySQL/MariaDB: run OPTIMIZE TABLE (a rebuild).")] = False,
    db_url: DbUrlOption = None,
    json_flag: JsonOption = False,
) -> None:
    """Return disk after deletes: sqlite VACUUM, PostgreSQL VACUUM (ANALYZE), MySQL OPTIMIZE TABLE (--yes)."""
    from veadk_mem.sessions.store import SessionStore

    state = _state(ctx, db_url, json_flag)

    store = SessionStore.from_settings(state.loaded.settings)

    async def go() -> Any:
        async with store:
            return await vacuum_db(store.db, dry_run=dry_run, yes=yes)

    with state.recording("session vacuum", store.db.display_url, dry_run=dry_run) as change:
        report = run(go())
        change.count(tables=len(report.after or []), bytes_returned=max(report.reclaimed or 0, 0))
        change.detail("action", report.action)
    if state.json_mode:
        state.render.json(report.to_json())
        return
    after = {s.name: s for s in report.after or []}
    rows = [
        {
            "name": s.name,
            "before": human_bytes(s.table + s.index),
            "after": human_bytes(after[s.name].table + after[s.name].index) if s.name in after else "",
            "free": human_bytes(s.free),
        }
        for s in report.before
    ]
    state.render.table(rows, SIZE_COLUMNS, title=report.action)
    for note in report.notes:
        state.render.message(note)
    if report.dry_run:
        state.render.message(f"dry run: {report.action} not run")
    else:
        state.render.message(f"{report.action}: {human_bytes(report.reclaimed or 0)} returned")


INDEX_COLUMNS = [
    Column.id("table", "table"),
    Column("ADK query", "query"),
    Column("index", "served_by"),
    Column("rows", "rows", justify="right"),
    Column("status", "status"),
    Column("plan now", "plan_now", drop=1),
]


def _index_row(f: Any) -> dict[str, Any]:
    if f.invalid:
        status = "invalid"
    elif f.needed:
        status = "missing"
    elif f.missing:
        status = "missing (small)"
    else:
        status = "ok"
    plan_now = ", ".join(p for p in ("scan" if f.scan else "", "sort" if f.sort else "") if p) or "by index"
    return {
        "table": f.table,
        "query": f.query,
        "served_by": f.served_by or "none",
        "rows": f"{f.rows:,}",
        "status": status,
        "plan_now": plan_now,
    }


@table_shaped
def index(
    ctx: typer.Context,
    create: Annotated[bool, typer.Option("--create", help="Add the missing indexes (ADK's own for events).")] = False,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Print the statements --create would run.")] = False,
    db_url: DbUrlOption = None,
    json_flag: JsonOption = False,
) -> None:
    """The indexes ADK's get_session and list_sessions need; --create adds the missing ones."""
    from veadk_mem.sessions.store import SessionStore

    state = _state(ctx, db_url, json_flag)

    async def go() -> Any:
        from veadk_mem.sessions.indexes import create_indexes, inspect_indexes

        async with SessionStore.from_settings(state.loaded.settings) as store:
            if create or dry_run:  # --dry-run: the plan of --create
                return await create_indexes(store.db, dry_run=dry_run)
            return await inspect_indexes(store.db)

    report = run(go())
    if state.json_mode:
        state.render.json(report.to_json())
        return
    state.render.table([_index_row(f) for f in report.findings], INDEX_COLUMNS, title="ADK's queries")
    if report.list_ms is not None:
        state.render.message(
            f"ADK's list_sessions query: {report.list_ms:,.0f} ms for {terminal_safe(report.list_app or '')} "
            f"({counted(report.list_sessions, 'session')})"
        )
    for note in report.notes:
        state.render.message(note)
    if not (create or dry_run):
        if report.needed or report.missing:
            state.render.message("`vmem session index --create` adds the missing ones (--dry-run: the statements)")
        return
    if not report.statements:
        state.render.message("nothing to create: every ADK query has its index")
    elif report.dry_run:
        for sql in report.statements:
            state.render.message(f"would run: {sql}")
    else:
        state.render.message(f"created {', '.join(report.created) or 'nothing'}")
