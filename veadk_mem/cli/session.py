"""`vmem session`: short-term memory on ADK's own session databases."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from veadk_mem.cli.charts import bar, human_bytes, sparkline
from veadk_mem.cli.columns import KEY, Column
from veadk_mem.cli.erasure import (
    PolicyOpt,
    WithMemoriesOpt,
    confirm_erasure,
    ltm_facade,
    record_erasure,
    render_erasure,
)
from veadk_mem.cli.render import counted
from veadk_mem.cli.session_rows import SUMMARY_COLUMNS, _safe, _summary_row, show_plan
from veadk_mem.cli.state import AppState, DbUrlOption, JsonOption, confirm_deletion, get_state, run
from veadk_mem.cli.wiring import table_shaped
from veadk_mem.errors import BadInput
from veadk_mem.sessions.files import atomic_output, check_output, spooled_stdin
from veadk_mem.sessions.timespec import parse_duration, parse_time

if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence

    from veadk_mem.sessions.notes import Listing
    from veadk_mem.sessions.store import SessionFilter, SessionKey, SessionStore, SessionSummary

app = typer.Typer(help="Inspect, clean, back up and migrate ADK session databases.", no_args_is_help=True)

AppOpt = Annotated[str | None, typer.Option("--app", "-a", metavar="APP", help="Only this app.")]
UserOpt = Annotated[str | None, typer.Option("--user", "-u", metavar="USER", help="Only this user.")]
SinceOpt = Annotated[
    str | None,
    typer.Option("--since", metavar="TIME", help="Updated at or after: ISO date/time (UTC) or a duration ago (7d)."),
]
UntilOpt = Annotated[
    str | None, typer.Option("--until", metavar="TIME", help="Updated before: ISO date/time (UTC) or a duration ago.")
]

COMPACTIONS = Column("compactions", "compaction_count", justify="right", drop=4)


def _list_columns(state: AppState, found: list[SessionSummary], compactions: bool) -> list[Column]:
    """The list's columns: with --compactions, the count beside events in CSV/TSV/JSONL always, for
    people only when a listed session has one (a column of zeros, or of blanks, is noise and shifts awk's fields)."""
    if compactions and (state.render.fmt is not None or any(s.compaction_count for s in found)):
        return [*SUMMARY_COLUMNS[:4], COMPACTIONS, *SUMMARY_COLUMNS[4:]]
    return SUMMARY_COLUMNS


def _state(ctx: typer.Context, db_url: str | None, json_flag: bool = False) -> AppState:
    state = get_state(ctx, json_flag=json_flag)
    state.use_db_url(db_url)
    return state


def _store(state: AppState, *, create: bool = False) -> SessionStore:
    from veadk_mem.sessions.store import SessionStore

    return SessionStore.from_settings(state.loaded.settings, create=create)


def _filter(app_name: str | None, user: str | None, since: str | None, until: str | None) -> SessionFilter:
    from veadk_mem.sessions.store import SessionFilter

    return SessionFilter(
        app=app_name,
        user=user,
        since=parse_time(since, "--since") if since else None,
        until=parse_time(until, "--until") if until else None,
    )


def _summary_json(s: SessionSummary, compactions: bool = False) -> dict[str, Any]:
    """ADK's own list_sessions item, camelCase as ADK writes it (no events), plus vmem's counts and createTime."""
    return s.to_json(compactions=compactions)


def _warn_all(state: AppState, warnings: Iterable[str]) -> None:
    """Each of a result's warnings, once."""
    for text in dict.fromkeys(warnings):
        state.render.warn(text)


def _exit_if_damaged(damaged: Sequence[str]) -> None:
    """Exit 1 after the output when sessions were skipped for unreadable rows (named in warnings)."""
    if damaged:
        raise typer.Exit(1)


@app.command("list")
@table_shaped
def list_cmd(
    ctx: typer.Context,
    app_name: AppOpt = None,
    user: UserOpt = None,
    since: SinceOpt = None,
    until: UntilOpt = None,
    limit: Annotated[int, typer.Option("--limit", "-n", min=0, metavar="N", help="At most this many (0: all).")] = 100,
    offset: Annotated[int, typer.Option("--offset", min=0, metavar="N", help="Skip this many first.")] = 0,
    compactions: Annotated[
        bool,
        typer.Option(
            "--compactions", help="Also count ADK context compactions: reads every event of the listed sessions."
        ),
    ] = False,
    db_url: DbUrlOption = None,
    json_flag: JsonOption = False,
) -> None:
    """List sessions, most recently updated first, with their event counts (events are not loaded).

    --compactions also counts each one's ADK context compactions, which reads the listed
    sessions' events: a page holding a very long session costs what reading it costs.
    """
    state = _state(ctx, db_url, json_flag)
    flt = _filter(app_name, user, since, until)

    async def go() -> Listing[SessionSummary]:
        async with _store(state) as store:
            return await store.list_sessions(flt, limit=limit or None, offset=offset, compactions=compactions)

    with state.render.spinner("listing sessions"):
        found = run(go())
    state.render.records(
        [_summary_row(s) for s in found],
        _list_columns(state, found, compactions),
        json_rows=[_summary_json(s, compactions) for s in found],
        empty="no sessions match",
    )
    if limit and len(found) == limit:
        state.render.message(
            f"showing {counted(limit, 'session')}; more may exist: use --offset {offset + limit} or --limit 0"
        )
    _warn_all(state, found.warnings)
    _exit_if_damaged(found.damaged)


@app.command("get")
@table_shaped
def get_cmd(
    ctx: typer.Context,
    app_name: Annotated[
        str, typer.Argument(metavar="APP|ID_OR_PREFIX", help="App name; alone, a session id or its start.")
    ],
    user: Annotated[str | None, typer.Argument(metavar="USER", help="User id.", show_default=False)] = None,
    session_id: Annotated[
        str | None, typer.Argument(metavar="SESSION_ID", help="Session id.", show_default=False)
    ] = None,
    events: Annotated[int | None, typer.Option("--events", min=0, metavar="N", help="Only the last N events.")] = None,
    db_url: DbUrlOption = None,
    json_flag: JsonOption = False,
) -> None:
    """Show a session: merged state and its event timeline; --json prints ADK's session JSON.

    One argument finds the session by its id, or the start of it, in any app and for any
    user (as git's short ids): several matches are listed (exit 2), none is exit 3.
    --jsonl prints its ADK events one per line; --csv and --tsv the timeline.
    """
    state = _state(ctx, db_url, json_flag)
    named = _named(app_name, user, session_id)
    if state.json_mode or state.fmt == "jsonl":
        run(_get_json(state, named, events))
    else:
        run(_get_table(state, named, events))


def _named(first: str, user: str | None, session_id: str | None) -> tuple[str, str, str] | str:
    """APP USER SESSION_ID as given, or the one ID_OR_PREFIX a store resolves (`_resolved`)."""
    if user is None:
        return first
    if session_id is None:
        raise BadInput("give APP USER SESSION_ID, or one session id (or the start of one)")
    return first, user, session_id


async def _resolved(store: SessionStore, named: tuple[str, str, str] | str) -> tuple[str, str, str]:
    if isinstance(named, tuple):
        return named
    key = await store.resolve_id(named)
    return key.app_name, key.user_id, key.id


async def _get_json(state: AppState, named: tuple[str, str, str] | str, last: int | None) -> None:
    async with _store(state) as store:
        app_name, user, session_id = await _resolved(store, named)
        # Streamed, one event per line: a 100k-event session never sits in memory.
        # Read by pages, each event a line of text as it is encoded: memory holds a page.
        stream = store.session_json(app_name, user, session_id, last=last, lines=state.fmt == "jsonl")
        await state.render.stream(stream)
        _warn_all(state, stream.warnings)
        _say_pruned(state, await store.pruned_events(app_name, user, session_id))


def _say_pruned(state: AppState, pruned: int) -> None:
    """Outside the table (JSON, JSONL, CSV, TSV): the trimmed events' count as a note on stderr."""
    if pruned:
        state.render.message(f"{counted(pruned, 'older event')} pruned (retention keep_last_events)")


async def _get_table(state: AppState, named: tuple[str, str, str] | str, last: int | None) -> None:
    from veadk_mem.sessions.timeline import Timeline, window

    render = state.render
    async with _store(state) as store:
        app_name, user, session_id = await _resolved(store, named)
        summary = await store.get_summary(app_name, user, session_id)
        view = window(summary.event_count, last, cap=render.out.is_terminal and not render.fmt)
        pruned = await store.pruned_events(app_name, user, session_id)
        if not render.fmt:
            _show_head(state, store, summary, view.shown, view.last, pruned)
        else:
            _say_pruned(state, pruned)
        timeline = Timeline(view.first)
        chunk: list[dict[str, Any]] = []
        title: str | None = "events"
        events = store.iter_events(app_name, user, session_id, last=view.last, raw=True)
        async for data in events:
            chunk.append(_safe(timeline.row_of(data)))
            if len(chunk) == 1000:  # print as we go: a 100k-event session never sits in memory
                render.table(chunk, EVENT_COLUMNS, title=title, continued=title is None)
                chunk, title = [], None
        if chunk or title:
            render.table(chunk, EVENT_COLUMNS, title=title, empty="no events", continued=title is None)
        if view.capped:
            render.message(
                f"showing the last {view.shown} of {summary.event_count} events: use --events N for more, "
                "or --json for all of them"
            )
        _warn_all(state, events.warnings)


EVENT_COLUMNS = [
    Column("#", "n", justify="right", kind=KEY),
    Column.time("time", "time", clock=True),
    Column("author", "author", drop=1),
    Column("role", "role", drop=4),
    Column("types", "types", ", ".join, drop=2),
    Column.text("text", "text"),
    Column.free("state delta", "state_delta", lambda d: _json_text(d) if d else "", drop=3),
]


def _show_head(
    state: AppState, store: SessionStore, summary: SessionSummary, shown: int, last: int | None, pruned: int = 0
) -> None:
    """The session's fields and its state, before the timeline."""
    from veadk_mem.sessions.state_scopes import state_scope

    notes = [f"last {shown} shown"] if last is not None else []
    if pruned:
        notes.append(f"{counted(pruned, 'older event')} pruned")

    state.render.fields(
        [
            ("app", _safe(summary.app_name)),
            ("user", _safe(summary.user_id)),
            ("session", _safe(summary.id)),
            ("created", state.render.when(summary.create_time)),
            ("updated", state.render.when(summary.update_time)),
            ("events", f"{summary.event_count}" + (f" ({'; '.join(notes)})" if notes else "")),
            ("store", f"{store.db.display_url} [{store.db.layout.label}]"),
        ]
    )
    state_rows = [{"key": _safe(k), "scope": state_scope(k), "value": _safe(v)} for k, v in summary.state.items()]
    state.render.table(
        state_rows,
        [Column.id("state key", "key"), Column("scope", "scope"), Column.text("value", "value", _json_text)],
        title="state",
        empty="state: empty",
    )


def _json_text(value: Any) -> str:
    """A state value or delta as compact JSON, whole: the table wraps it."""
    from veadk_mem.jsonio import dumps

    return str(_safe(dumps(value, default=str)))


def _delete_target(
    target: list[str] | None,
    app_name: str | None,
    user: str | None,
    older_than: str | None,
    since: str | None,
    until: str | None,
) -> tuple[list[SessionKey] | None, SessionFilter | None]:
    """The sessions `session delete` names: APP USER ID... as keys, or the filter options (exit 2: neither, both)."""
    from veadk_mem.sessions.store import SessionKey

    if target:
        if len(target) < 3:
            raise BadInput("delete: give APP USER SESSION_ID... or a filter (--app, --user, --older-than)")
        if app_name or user or older_than or since or until:
            raise BadInput("delete: give either APP USER SESSION_ID... or filter options, not both")
        return [SessionKey(target[0], target[1], sid) for sid in dict.fromkeys(target[2:])], None
    if not (app_name or user or older_than or since or until):
        raise BadInput(
            "delete: name sessions (APP USER SESSION_ID...) or filter with --app, --user, --older-than, --since, "
            "--until"
        )
    flt = _filter(app_name, user, since, until)
    flt.older_than = parse_duration(older_than) if older_than else None
    return None, flt


@app.command("delete")
def delete_cmd(
    ctx: typer.Context,
    target: Annotated[
        list[str] | None, typer.Argument(metavar="[APP USER SESSION_ID...]", help="App, user and one or more ids.")
    ] = None,
    app_name: AppOpt = None,
    user: UserOpt = None,
    older_than: Annotated[
        str | None,
        typer.Option("--older-than", metavar="AGE", help="Only sessions not updated for this long (30d, 12h)."),
    ] = None,
    since: SinceOpt = None,
    until: UntilOpt = None,
    purge_state: Annotated[
        bool, typer.Option("--purge-state", help="Also delete user/app state left without any session.")
    ] = False,
    with_memories: WithMemoriesOpt = False,
    policy: PolicyOpt = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Show what would be deleted; change nothing.")] = False,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Do not ask for confirmation.")] = False,
    db_url: DbUrlOption = None,
    json_flag: JsonOption = False,
) -> None:
    """Delete sessions with their events, by id or by filter, in batches of short transactions.

    --with-memories also deletes the long-term memories made from them (found by source or
    by content hash), before the sessions, and verifies none is left.
    """
    state = _state(ctx, db_url, json_flag)
    keys, flt = _delete_target(target, app_name, user, older_than, since, until)
    if policy is not None and not with_memories:
        raise BadInput("delete: --policy chooses the memories of --with-memories: give both")
    if with_memories:
        _delete_with_memories(state, keys, flt, purge_state=purge_state, policy=policy, dry_run=dry_run, yes=yes)
        return

    def confirm(plan: Any) -> None:
        if not yes:
            show_plan(state, plan, to_stderr=True)  # not data: what the question is about
            question = f"Delete {counted(len(plan.sessions), 'session')} and {counted(plan.events, 'event')}?"
            confirm_deletion(state, question, yes=yes)

    store = _store(state)

    async def go() -> Any:
        from veadk_mem.sessions.delete_flow import delete_flow

        async with store:
            return await delete_flow(
                store, keys=keys, flt=flt, purge_state=purge_state, dry_run=dry_run, confirm=confirm
            )

    with state.recording("session delete", store.db.display_url, dry_run=dry_run) as change:
        report = run(go())
        change.count(sessions=len(report.sessions), events=report.events, orphan_events=report.orphan_events)
        change.count(app_states=len(report.app_states), user_states=len(report.user_states))
        change.add_ids(f"{s.app_name}/{s.user_id}/{s.id}" for s in report.sessions)
    for key in report.skipped:
        state.render.warn(f"{key}: kept, it was updated after it was listed")
    if state.json_mode:
        state.render.json(report.to_json())
        return
    if not report.sessions and not report.orphan_events:
        state.render.message("no sessions match: nothing deleted")
        return
    if report.dry_run:
        show_plan(state, report)
        if report.orphan_events:
            state.render.message(f"and {counted(report.orphan_events, 'event row')} without a session (staged)")
        state.render.message("dry run: nothing deleted")
        return
    extra = ""
    if report.app_states or report.user_states:
        extra = f", {counted(len(report.app_states), 'app state')} and {counted(len(report.user_states), 'user state')}"
    if report.orphan_events:
        extra += f", {counted(report.orphan_events, 'event row')} without a session (a killed import's staging)"
    state.render.message(
        f"deleted {counted(len(report.sessions), 'session')}, {counted(report.events, 'event')}{extra}"
    )


def _delete_with_memories(
    state: AppState,
    keys: list[SessionKey] | None,
    flt: SessionFilter | None,
    *,
    purge_state: bool,
    policy: str | None,
    dry_run: bool,
    yes: bool,
) -> None:
    """`session delete --with-memories`: the erasure (ops/erasure.py), rendered."""
    ltm = ltm_facade(state)
    store = _store(state)

    async def go() -> Any:
        from veadk_mem.ops.erasure import erase  # startup: only --with-memories needs it

        async with ltm, store:
            confirm = confirm_erasure(state, yes)
            return await erase(
                store, ltm, keys=keys, flt=flt, purge_state=purge_state, policy=policy, dry_run=dry_run, confirm=confirm
            )

    with state.recording("session delete --with-memories", store.db.display_url, dry_run=dry_run) as change:
        report = run(go())
        record_erasure(change, report)
    for key in report.sessions.skipped:
        state.render.warn(f"{key}: kept, it was updated after it was listed")
    render_erasure(state, report)


@app.command("export")
def export_cmd(
    ctx: typer.Context,
    app_name: AppOpt = None,
    user: UserOpt = None,
    since: SinceOpt = None,
    until: UntilOpt = None,
    output: Annotated[
        Path | None, typer.Option("--output", "-o", metavar="FILE", help="Write to FILE instead of stdout.")
    ] = None,
    db_url: DbUrlOption = None,
) -> None:
    """Export sessions as JSONL (one ADK session per line, plus app/user state records), streamed."""

    state = _state(ctx, db_url)
    flt = _filter(app_name, user, since, until)
    if output is not None:
        check_output(output)

    async def go() -> tuple[int, set[str]]:
        async with _store(state) as store:
            total = (await store.list_sessions(flt, count_only=True)).total
            with state.render.progress("exporting", total) as advance:
                pieces = store.export_jsonl(flt, progress=advance)
                if output is None:
                    await state.render.stream(pieces)
                else:
                    with atomic_output(output) as handle:
                        await state.render.stream(pieces, handle)
            _warn_all(state, pieces.warnings)
            return total, set(pieces.damaged)

    total, damaged = run(go())
    state.render.message(f"exported {counted(total - len(damaged), 'session')}" + (f" to {output}" if output else ""))
    if output is not None and state.json_mode:  # the data went to the file: stdout takes the report
        state.render.json({"output": str(output), "sessions": total - len(damaged), "not_exported": sorted(damaged)})
    if damaged:
        state.render.warn(f"{counted(len(damaged), 'session')} not exported: unreadable rows (named above)")
        raise typer.Exit(1)


@app.command("import")
def import_cmd(
    ctx: typer.Context,
    source: Annotated[
        str, typer.Argument(metavar="FILE|-", help="Export file (JSONL, JSON or a JSON list); - for stdin.")
    ],
    force: Annotated[
        bool,
        typer.Option("--force", help="Write sessions the database holds in a newer version than the file's."),
    ] = False,
    db_url: DbUrlOption = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Check every record and count; write nothing.")] = False,
    json_flag: JsonOption = False,
) -> None:
    """Import sessions (upsert, all-or-nothing per session); the whole file is checked before anything is written."""
    import contextlib

    from veadk_mem.sessions.importer import import_file, source_size

    state = _state(ctx, db_url, json_flag)
    name = "<stdin>" if source == "-" else None  # errors name stdin, not the spool file

    async def go(path: str) -> Any:
        with contextlib.ExitStack() as stack:
            bar: list[Any] = []

            def on_total(total: int) -> None:
                bar.append(stack.enter_context(state.render.progress("importing sessions", total)))

            def advance(n: int) -> None:
                if bar:
                    bar[0](n)

            big = source_size(path) > CHECK_PROGRESS_BYTES
            checking = stack.enter_context(state.render.progress("checking sessions")) if big else None
            return await import_file(
                store, path, name, force=force, progress=advance, on_total=on_total, checking=checking, dry_run=dry_run
            )

    store = _store(state, create=True)
    with state.recording("session import", store.db.display_url, dry_run=dry_run) as change:
        if source == "-":  # stdin is read twice (check, then write): spool it to a private file
            with spooled_stdin() as spool:
                report = run(go(str(spool)))
        else:
            report = run(go(source))
        change.count(sessions=report.sessions, events=report.events, replaced=report.replaced)
        change.count(app_states=report.app_states, user_states=report.user_states)
        for text in report.warnings:
            state.render.warn(text)
        for key in report.skipped:
            state.render.warn(f"{key}: not imported, the database holds a newer version (changed meanwhile; --force)")
        if state.json_mode:
            state.render.json(report.to_json())
        elif dry_run:
            state.render.message(
                f"dry run: would import {counted(report.sessions, 'session')}, {counted(report.events, 'event')}, "
                f"{counted(report.app_states, 'app state')}, {counted(report.user_states, 'user state')}; "
                "nothing written"
            )
        else:
            created = " (created ADK v1 tables)" if report.created_tables else ""
            replaced = f" ({report.replaced:,} already there, written over)" if report.replaced else ""
            state.render.message(
                f"imported {counted(report.sessions, 'session')}{replaced}, {counted(report.events, 'event')}, "
                f"{counted(report.app_states, 'app state')}, {counted(report.user_states, 'user state')}{created}"
            )
        if report.skipped:
            raise typer.Exit(1)


CHECK_PROGRESS_BYTES = 1 << 20  # files above this show a progress bar while they are checked


@app.command("upgrade")
def upgrade_cmd(
    ctx: typer.Context,
    backup: Annotated[
        Path | None,
        typer.Option(
            "--backup",
            metavar="FILE",
            help="Write the verified JSONL backup here (a new file); default vmem-upgrade-backup-<UTC time>.jsonl.",
        ),
    ] = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Show what would be done; change nothing.")] = False,
    drop_old: Annotated[
        bool, typer.Option("--drop-old", help="Drop the old tables an upgrade kept (after this one, if it upgrades).")
    ] = False,
    keep_undecodable: Annotated[
        bool,
        typer.Option(
            "--keep-undecodable",
            help="Keep an event whose pickled actions cannot be decoded, its pickle as base64 in "
            "customMetadata.vmem_raw_actions (without it such an event stops the upgrade).",
        ),
    ] = False,
    db_url: DbUrlOption = None,
    json_flag: JsonOption = False,
) -> None:
    """Upgrade an ADK v0 (pickle) database in place to the layout current ADK reads.

    Writes a JSONL backup first and checks it against the database, copies everything into new
    tables beside the old ones and swaps them in one step; the old tables are kept, renamed
    <name>_v0_<UTC time>, until --drop-old. Refused while another connection holds a sqlite
    database or while the tables change during the upgrade: stop the agents that use it first.
    An event whose pickled actions cannot be decoded stops the upgrade (exit 1, named) unless
    --keep-undecodable; --drop-old refuses unless the new tables hold every old session and event.
    """
    from veadk_mem.sessions.upgrade import default_backup, upgrade_store

    state = _state(ctx, db_url, json_flag)
    target = backup or default_backup()
    store = _store(state)
    with state.recording("session upgrade", store.db.display_url, dry_run=dry_run) as change:
        report = run(
            upgrade_store(
                store,
                backup=target,
                dry_run=dry_run,
                drop_old=drop_old,
                progress=state.render.progress,
                keep_undecodable=keep_undecodable,
            )
        )
        if report.layout == "v0":  # upgraded (a dry run records nothing)
            change.count(sessions=report.sessions, events=report.events)
        change.count(rewritten_events=report.rewritten, dropped_tables=len(report.dropped))
    _warn_all(state, report.warnings)
    if state.json_mode:
        state.render.json(report.to_json())
        return
    for line in upgrade_lines(report):
        state.render.message(line)


def upgrade_lines(report: Any) -> list[str]:
    """What `session upgrade` did or would do, for people (stderr lines)."""
    counts = (
        f"{counted(report.sessions, 'session')}, {counted(report.events, 'event')}, "
        f"{counted(report.app_states, 'app state')}, {counted(report.user_states, 'user state')}"
    )
    kept = ", ".join(report.old_tables)
    if report.layout != "v0" and report.mixed_events:
        return _reshape_lines(report, counts)
    if report.layout != "v0":
        lines = [f"{report.database}: already in the current layout, {report.description}; nothing to upgrade"]
        if report.dropped:
            lines.append(f"dropped the old tables {', '.join(report.dropped)}")
        elif report.old_tables and report.status == "dry_run":
            lines.append(f"dry run: would drop the old tables {kept}; nothing changed")
        elif report.old_tables:
            lines.append(f"old tables kept from the upgrade: {kept}; `vmem session upgrade --drop-old` drops them")
        return lines
    renames = ", ".join(f"{a} -> {b}" for a, b in report.renamed.items())
    if report.status == "dry_run":
        lines = [
            f"{report.database}: {report.description}",
            f"would back up {counts} to {report.backup}, read it back and count it",
            f"would copy them into new tables {', '.join(report.new_tables)} (ADK schema v1)",
            f"would then, in one step, rename {renames} and the new tables into place",
        ]
        if report.leftovers:
            lines.append(f"would first remove the tables of an interrupted upgrade: {', '.join(report.leftovers)}")
        if report.drop_old:
            lines.append(f"would then drop the old tables {', '.join([*report.old_tables, *report.renamed.values()])}")
        lines.append("dry run: nothing changed")
        return lines
    lines = [
        f"{report.database}: upgraded from {report.description} to ADK schema v1",
        f"backup: {report.backup} ({counts}, read back and counted)",
        f"copied {counts}; renamed {renames}",
    ]
    if report.kept_raw:
        lines.append(
            f"{counted(len(report.kept_raw), 'event')} kept with undecodable actions as raw pickle bytes "
            "(customMetadata.vmem_raw_actions, named above)"
        )
    if report.dropped:
        lines.append(f"dropped the old tables {', '.join(report.dropped)}")
    else:
        lines.append(f"old tables kept as {kept}: `vmem session upgrade --drop-old` drops them")
    return lines


def _reshape_lines(report: Any, counts: str) -> list[str]:
    """`session upgrade` of a current layout whose event rows are in a mixed shape."""
    mixed = counted(report.mixed_events, "event")
    what = f"{mixed} stored in a mixed shape (camelCase keys beside ADK's snake_case, as vmem 0.1 restored them)"
    if report.status == "dry_run":
        return [
            f"{report.database}: {report.description}, {what}",
            f"would back up {counts} to {report.backup}, read it back and count it",
            f"would then rewrite those {mixed} in the shape ADK stores; dry run: nothing changed",
        ]
    return [
        f"{report.database}: {report.description}, {what}",
        f"backup: {report.backup} ({counts}, read back and counted)",
        f"rewrote {counted(report.rewritten, 'event')} in the shape ADK stores",
    ]


# --- stats -------------------------------------------------------------------------------


def _n(value: Any) -> str:
    return f"{value:,}" if isinstance(value, int) else str(value)


def _bytes(value: Any) -> str:

    return human_bytes(value)


TOKEN_COLUMNS = [
    Column("prompt tok", "prompt_tokens", _n, justify="right"),
    Column("output tok", "candidates_tokens", _n, justify="right"),
    Column("thought tok", "thoughts_tokens", _n, justify="right"),
    Column("total tok", "total_tokens", _n, justify="right"),
]
FIGURE_COLUMNS = [
    Column("sessions", "sessions", _n, justify="right"),
    Column("events", "events", _n, justify="right"),
    Column("bytes", "bytes", _bytes, justify="right", no_wrap=True),
    *TOKEN_COLUMNS,
]
KIND_COLUMNS = [
    Column(name.replace("_", " "), name, _n, justify="right")
    for name in ("user_text", "model_text", "function_call", "function_response", "compaction", "other")
]
GROUP_KEYS = {
    "app": [Column.id("app", "app_name")],
    "user": [Column.id("app", "app_name"), Column.id("user", "user_id")],
    "day": [Column.id("day", "day")],
    "week": [Column.id("week of", "week")],
    "age": [Column.id("last update", "age")],
}
TOP_COLUMNS = [
    Column.id("app", "app_name"),
    Column.id("user", "user_id"),
    Column.id("session id", "id"),
    Column("events", "events", _n, justify="right", drop=4),
    Column("bytes", "bytes", _bytes, justify="right", no_wrap=True),
    *(replace(c, drop=drop) for c, drop in zip(TOKEN_COLUMNS, (6, 7, 8, 3), strict=True)),
    Column.time("updated", "update_time", drop=5),
]  # on a narrow terminal: thought, output, prompt tokens, then updated, events and the total go first
GROUP_FIGURES = [
    FIGURE_COLUMNS[0],
    replace(FIGURE_COLUMNS[1], drop=4),
    FIGURE_COLUMNS[2],
    *(replace(c, drop=drop) for c, drop in zip(TOKEN_COLUMNS, (6, 7, 8, 3), strict=True)),
]  # a group's figures on a narrow terminal: as TOP_COLUMNS, the last update going after the tokens
AGE_COLUMNS = [
    Column.id("last update", "age"),
    Column("sessions", "sessions", _n, justify="right"),
    Column("events", "events", _n, justify="right", drop=2),
    Column("bytes", "bytes", _bytes, justify="right", no_wrap=True),
    Column("", "bar", no_wrap=True, people_only=True, drop=3),
    Column("older sessions", "older_sessions", _n, justify="right"),
    Column("older bytes", "older_bytes", _bytes, justify="right", drop=1),
]  # on a narrow terminal: the bar, then events, then older bytes go first (#45 item 1: one line per age)
SPARK_DAYS = 30  # days the terminal's sparkline covers


def _group_columns(by: str, people: bool) -> list[Column]:
    if by == "age":
        return AGE_COLUMNS if people else [c for c in AGE_COLUMNS if c.key != "bar"]
    cols = [*GROUP_KEYS[by], *GROUP_FIGURES, *([] if people else KIND_COLUMNS)]  # kinds: in the totals
    if by in ("app", "user"):
        cols.append(Column.time("last update", "last_update", drop=5))
    return cols


def _with_bars(rows: list[dict[str, Any]], key: str = "bytes") -> list[dict[str, Any]]:

    largest = max((r[key] for r in rows), default=0)
    return [{**r, "bar": bar(r[key], largest)} for r in rows]


@app.command("stats")
@table_shaped
def stats_cmd(
    ctx: typer.Context,
    app_name: AppOpt = None,
    user: UserOpt = None,
    since: SinceOpt = None,
    until: UntilOpt = None,
    by: Annotated[
        str | None,
        typer.Option(
            "--by",
            metavar="app|user|day|week|age",
            help="Also group: per app or user (largest first), per UTC day or week (newest first), per age.",
        ),
    ] = None,
    top: Annotated[
        int | None, typer.Option("--top", min=0, metavar="N", help="The N largest sessions (by bytes); default 10.")
    ] = None,
    db_url: DbUrlOption = None,
    json_flag: JsonOption = False,
) -> None:
    """Sizes, growth and token spend of a session database, computed in the database.

    Totals (apps, users, sessions, events, bytes of event data, tokens the models reported in
    usage_metadata, events by kind), the largest sessions, sessions by age of their last update
    (what `session delete --older-than` would free) and events per day. --since/--until select
    sessions by last update. --json prints all of it as one object; --jsonl/--csv/--tsv print the
    --by groups, else the --top sessions, else the totals as one record.
    """
    from veadk_mem.sessions.stats import GROUPINGS

    state = _state(ctx, db_url, json_flag)
    if by is not None and by not in GROUPINGS:
        raise BadInput(f"--by: expected one of {', '.join(GROUPINGS)}, got {by!r}")
    flt = _filter(app_name, user, since, until)

    async def go() -> Any:
        async with _store(state) as store:
            return await store.stats(flt, by=by, top=10 if top is None else top), store.db.display_url

    stats, where = run(go())
    render = state.render
    for text in stats.unavailable:
        render.warn(f"not available in this layout: {text}")
    odd = stats.odd_warning()
    if odd is not None:
        render.warn(odd)
    if state.json_mode:
        render.json(stats.to_json())
        return
    if render.fmt is not None:
        _stats_records(state, stats, explicit_top=top is not None)
        return
    _stats_for_people(state, stats, where)


def _totals_record(stats: Any) -> dict[str, Any]:
    t = stats.totals
    return {
        "apps": stats.apps,
        "users": stats.users,
        "sessions": t.sessions,
        "events": t.events,
        "bytes": t.bytes,
        **{f"{k}_tokens": v for k, v in t.tokens.items()},
        **t.kinds,
    }


TOTAL_COLUMNS = [
    Column("apps", "apps", _n, justify="right"),
    Column("users", "users", _n, justify="right"),
    *FIGURE_COLUMNS,
    *KIND_COLUMNS,
]


def _stats_records(state: AppState, stats: Any, *, explicit_top: bool) -> None:
    """The one table a machine format prints: the groups, else the largest sessions, else the totals."""
    from veadk_mem.sessions.stats import session_record

    if stats.by is not None:
        state.render.table(stats.groups, _group_columns(stats.by, people=False), empty="no sessions match")
    elif explicit_top:
        state.render.table([session_record(s) for s in stats.top], TOP_COLUMNS, empty="no sessions match")
    else:
        state.render.table([_totals_record(stats)], TOTAL_COLUMNS)


def _stats_for_people(state: AppState, stats: Any, where: str) -> None:
    from veadk_mem.sessions.stats import session_record

    render = state.render
    t = stats.totals
    tokens = t.tokens
    people = render.out.is_terminal  # off one, numbers plain: no 1,234 or 327.5 KB in a pipe
    n = _n if people else str
    render.fields(
        [
            ("database", f"{where} [{stats.layout}]"),
            ("apps", n(stats.apps)),
            ("users", n(stats.users)),
            ("sessions", n(t.sessions)),
            ("events", n(t.events)),
            ("event data", human_bytes(t.bytes) if people else str(t.bytes)),
            (
                "tokens",
                f"{n(tokens['total'])} total ({n(tokens['prompt'])} prompt, {n(tokens['candidates'])} output, "
                f"{n(tokens['thoughts'])} thoughts)",
            ),
        ]
    )
    kinds = [{"kind": k.replace("_", " "), "events": v} for k, v in t.kinds.items()]
    render.table(
        _with_bars(kinds, "events"),
        [
            Column("event kind", "kind", no_wrap=True),
            Column("events", "events", _n, justify="right"),
            Column("", "bar", people_only=True),
        ],
        title="events by kind",
    )
    render.table(_with_bars(stats.ages), AGE_COLUMNS, title="sessions by last update (older: what --older-than frees)")
    active = [d for d in stats.days if d["events"]]
    if active:
        from datetime import date, timedelta

        per_day = {d["day"]: d["events"] for d in active}
        last = date.fromisoformat(active[0]["day"])  # the newest day with events
        span = [(last - timedelta(days=i)).isoformat() for i in range(SPARK_DAYS - 1, -1, -1)]
        values = [per_day.get(d, 0) for d in span]
        chart = f"{sparkline(values)}  (max {max(values):,} a day)" if people else " ".join(map(str, values))
        render.fields([(f"events per day, {span[0]} to {span[-1]}", chart)])
    if stats.by is not None:
        render.table(
            _safe(_with_bars(stats.groups)),
            _group_columns(stats.by, people=True),
            title=f"by {stats.by}",
            empty="no groups",
        )
    if stats.top:
        render.table(
            _safe([session_record(s) for s in stats.top]), TOP_COLUMNS, title=f"largest {len(stats.top)} sessions"
        )


# --- watch -------------------------------------------------------------------------------


@app.command("watch")
def watch_cmd(
    ctx: typer.Context,
    app_name: Annotated[
        str, typer.Argument(metavar="APP|ID_OR_PREFIX", help="App name; alone, a session id or its start.")
    ],
    user: Annotated[str | None, typer.Argument(metavar="USER", help="User id.", show_default=False)] = None,
    session_id: Annotated[
        str | None,
        typer.Argument(metavar="SESSION_ID", help="Session id; default: the user's newest, switching to newer ones."),
    ] = None,
    since: Annotated[
        str | None,
        typer.Option("--since", metavar="TIME", help="Start with the events at or after this time (ISO, or 10m ago)."),
    ] = None,
    events: Annotated[
        int,
        typer.Option("--events", min=0, metavar="N", help="Start with the last N events already there (0: only new)."),
    ] = 10,
    interval: Annotated[
        float, typer.Option("--interval", min=0.05, metavar="SECONDS", help="Poll interval while events come.")
    ] = 0.5,
    max_interval: Annotated[
        float,
        typer.Option("--max-interval", min=0.05, metavar="SECONDS", help="Longest poll interval when idle (backoff)."),
    ] = 5.0,
    db_url: DbUrlOption = None,
    json_flag: JsonOption = False,
) -> None:
    """Follow a session live: print its events as the agent appends them, until Ctrl-C.

    Draws the timeline `session get` draws, on a terminal one line per event under one
    header, in widths that stay put (# is the event's place in the session); --json prints
    one ADK event JSON per line (camelCase, flushed per line). Each poll is one short read after the last event seen,
    so the agent never waits on it. One argument is a session id or its start, as in `session get`.
    Exits 3 when the session is deleted.
    """
    import contextlib

    state = _state(ctx, db_url, json_flag)
    start = parse_time(since, "--since") if since else None
    named: tuple[str, str, str | None] | str = app_name if user is None else (app_name, user, session_id)
    with contextlib.suppress(KeyboardInterrupt):
        run(_watch(state, named, start, events, interval, max_interval))


async def _watch(
    state: AppState,
    named: tuple[str, str, str | None] | str,
    since: float | None,
    last: int,
    interval: float,
    max_interval: float,
) -> None:
    from veadk_mem.adkjson import printed_event
    from veadk_mem.jsonio import compact_json_out as dumps
    from veadk_mem.sessions.timeline import Timeline
    from veadk_mem.sessions.watch import WatchEvent

    render = state.render
    async with _store(state) as store:
        session_id: str | None
        if isinstance(named, str):
            key = await store.resolve_id(named)
            app_name, user, session_id = key.app_name, key.user_id, key.id
        else:
            app_name, user, session_id = named
        watcher = store.watch(
            app_name,
            user,
            session_id,
            since=since,
            last=None if since is not None else last,
            interval=interval,
            max_interval=max_interval,
        )
        _stop_on_signals(watcher)
        timeline = Timeline(1)
        lines = _live_lines(state)
        header = True
        async for batch in watcher.follow():
            rows: list[dict[str, Any]] = []
            for item in batch:
                if isinstance(item, WatchEvent):
                    if state.json_mode:
                        render.jsonl([dumps(printed_event(item.data))])  # flushed per line: `jq` sees each as it comes
                    else:
                        row = _safe(timeline.row_of(item.data))
                        row["n"] = item.position  # the event's place in the session, as `session get` numbers it
                        rows.append(row)
                    continue
                header = _print_rows(state, lines, rows, header)  # events before a notice are printed before it
                rows = []
                render.message(item.text)
                if item.kind == "session":
                    timeline = Timeline(1)
            header = _print_rows(state, lines, rows, header)
            _warn_all(state, watcher.take_warnings())


def _stop_on_signals(watcher: Any) -> None:
    """Ctrl-C (and SIGTERM) end the watch after the poll in flight, exit 0; a second Ctrl-C
    interrupts at once. Cancelling the task instead could land inside the driver, which may
    swallow it while it recovers a connection."""
    import asyncio
    import contextlib
    import signal

    loop = asyncio.get_running_loop()

    def stop(sig: int) -> None:
        watcher.stop()
        loop.remove_signal_handler(sig)  # the next one is Python's own KeyboardInterrupt

    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError, RuntimeError):  # not the main thread, or no signals here
            loop.add_signal_handler(sig, stop, sig)


def _live_lines(state: AppState) -> Any:
    """The fixed-width lines of a watch on a terminal (one header, widths that stay put), or
    None: off a terminal, under --records or a machine format, the ordinary table path."""
    render = state.render
    if state.json_mode or render.fmt or render.as_records or not render.out.is_terminal:
        return None
    from veadk_mem.cli.live import LiveLines

    return LiveLines(render.out, EVENT_COLUMNS, wide=render.wide)


def _print_rows(state: AppState, lines: Any, rows: list[dict[str, Any]], header: bool) -> bool:
    """A poll's timeline rows, the header only before the first row; whether the header is still to come."""
    if not rows:
        return header
    if lines is not None:
        lines.rows(rows)
    else:
        state.render.table(rows, EVENT_COLUMNS, continued=not header)
    return False
