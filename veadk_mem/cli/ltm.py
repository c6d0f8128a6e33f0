"""`vmem ltm` and `vmem forget`: long-term memory.

Thin: each command builds the LongTermMemory facade from the settings, calls it, and
hands the result to the renderer. numpy, embedders and backends load inside commands.
"""

from __future__ import annotations

from enum import StrEnum
from typing import TYPE_CHECKING, Annotated, Any

import typer

from veadk_mem.cli.columns import Column
from veadk_mem.cli.erasure import PolicyOpt, forget_session
from veadk_mem.cli.render import counted
from veadk_mem.cli.state import AppState, DbUrlOption, JsonOption, confirm_deletion, get_state, run
from veadk_mem.cli.wiring import table_shaped
from veadk_mem.errors import BadInput, NotFound
from veadk_mem.ltm.bounds import batch_bytes
from veadk_mem.ltm.provenance import NOT_RECORDED, from_fields
from veadk_mem.ltm.scope import elsewhere as _elsewhere
from veadk_mem.ltm.scope import whole_index
from veadk_mem.ops.forget import forget_user, plan_forget
from veadk_mem.ops.from_store import count_store_sessions, store_sessions
from veadk_mem.ops.history import ltm_store
from veadk_mem.sessions.timespec import parse_time

if TYPE_CHECKING:
    from veadk_mem.ltm.facade import LongTermMemory

app = typer.Typer(help="Save sessions into long-term memory, search and manage it.", no_args_is_help=True)

UserOpt = Annotated[
    str, typer.Option("--user", "-u", metavar="USER", help="The user whose memories to use (required).")
]
AppOpt = Annotated[
    str | None,
    typer.Option("--app", "-a", metavar="APP", help="App name; picks the index when long_term_memory.index is empty."),
]


SavedSinceOpt = Annotated[
    str | None, typer.Option("--since", metavar="TIME", help="Saved at or after: ISO date/time (UTC) or 7d ago.")
]
SavedUntilOpt = Annotated[
    str | None, typer.Option("--until", metavar="TIME", help="Saved before: ISO date/time (UTC) or 7d ago.")
]


def _window(since: str | None, until: str | None) -> tuple[float | None, float | None]:
    """--since/--until as epoch seconds (exit 2 naming the option on a bad value)."""

    return (parse_time(since, "--since") if since else None, parse_time(until, "--until") if until else None)


def _ltm(state: AppState, app_name: str = "") -> LongTermMemory:
    from veadk_mem.ltm.facade import LongTermMemory

    render = state.render
    return LongTermMemory.from_settings(state.loaded.settings, app_name=app_name, warn=render.warn, notice=render.warn)


def _score(value: Any) -> str:
    return "" if value is None else f"{value:.3f}"


def _rows(entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    from veadk_mem.ltm.convert import entry_text

    rows = []
    for entry in entries:
        meta = entry["custom_metadata"]
        origin = meta.get("origin", {})
        rows.append(
            {
                "id": entry.get("id") or "",
                "score": meta.get("score"),
                "score_kind": meta.get("score_kind") or "",
                "role": entry["content"].get("role", ""),
                "author": entry.get("author", ""),
                "text": entry_text(entry),
                "session": origin.get("session_id", ""),
                "saved": entry.get("timestamp"),
                "type": origin.get("memory_type") or "",
                "source": _source_label(entry.get("source")),
            }
        )
    return rows


def _source_label(source: dict[str, Any] | None) -> str:
    """Where a memory came from, in one cell: `policy: session/event` (`+N` more events), or
    `not recorded` (saved by an agent, or by a vmem before provenance)."""
    found = from_fields(source)
    if found is None:
        return NOT_RECORDED
    label = found.label()
    return f"{found.policy}: {label}" if found.policy else label


SEARCH_COLUMNS = [
    Column("score", "score", _score, justify="right"),
    Column("role", "role", drop=3),
    Column("author", "author", drop=2),
    Column.text("text", "text", max_width=80),
    Column.id("session", "session"),
    Column.time("saved", "saved", drop=1),
    Column.id("id", "id"),  # what `ltm delete --id` takes (#45 item 7); after the first seven, as cut -f1-7 was
    Column("source", "source", no_wrap=True, drop=9),
]  # drop: what a terminal too narrow hides first (source, role, then author, then saved)
LIST_COLUMNS = [
    Column.id("id", "id"),
    Column("role", "role", drop=4),
    Column("author", "author", drop=3),
    Column.text("text", "text", max_width=80),
    Column("session", "session", no_wrap=True, drop=1),
    Column.time("saved", "saved", drop=2),
    Column("source", "source", no_wrap=True, drop=9),
]  # the memory id is the key (`ltm delete --id`); source, role, author, saved, then the session go first


# --- save ----------------------------------------------------------------------------


@app.command("save")
def save(
    ctx: typer.Context,
    sources: Annotated[
        list[str] | None,
        typer.Argument(
            metavar="FILE|DIR|-...",
            help="Session JSON files, directories (*.json, *.jsonl) or '-'. With --from-store: APP USER ID.",
        ),
    ] = None,
    from_store: Annotated[
        bool, typer.Option("--from-store", help="Read sessions from the session database instead of files.")
    ] = False,
    app_name: Annotated[
        str | None, typer.Option("--app", "-a", metavar="APP", help="With --from-store: every session of this app.")
    ] = None,
    user: Annotated[
        str | None, typer.Option("--user", "-u", metavar="USER", help="With --from-store --app: only this user.")
    ] = None,
    since: Annotated[
        str | None,
        typer.Option(
            "--since", metavar="TIME", help="With --from-store --app: sessions updated since (ISO time or 7d)."
        ),
    ] = None,
    until: Annotated[
        str | None,
        typer.Option("--until", metavar="TIME", help="With --from-store --app: sessions updated before (ISO or 7d)."),
    ] = None,
    db_url: DbUrlOption = None,
    policy: Annotated[
        str | None,
        typer.Option("--policy", "-p", metavar="POLICY", help="Preset, [policy.NAME], JSON/TOML file or inline JSON."),
    ] = None,
    include_assistant: Annotated[
        bool, typer.Option("--include-assistant", help="Keep assistant text events too (as openviking does).")
    ] = False,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Show what would be saved; change nothing.")] = False,
    no_infer: Annotated[
        bool, typer.Option("--no-infer", help="mem0: store the text verbatim; the platform does not rewrite it.")
    ] = False,
    json_flag: JsonOption = False,
) -> None:
    """Save sessions' memories through the save policy.

    Idempotent: a memory the user's index already holds is skipped, so replaying the same
    sessions stores nothing new. One failing session is reported and the rest go on.
    """
    from veadk_mem.ltm.replay import aiter_items, count_sessions, expand_sources, file_sessions, replay

    state = get_state(ctx, json_flag=json_flag)
    limit = batch_bytes()
    state.use_db_url(db_url)
    state.override("database.mem0.infer", False if no_infer else None)
    total: int | None = None
    if from_store:
        items = _store_items(state, sources or [], app_name, user, since, until)
        total = 1 if sources else None  # the sessions matching --app ...: counted first, on the loop
    else:
        if app_name or user or since or until:
            raise BadInput(
                "--app, --user, --since and --until select sessions in the database: use them with --from-store"
            )
        if not sources:
            raise BadInput("give session files, a directory or '-' (or --from-store)")
        files = expand_sources(sources)
        total = count_sessions(files)
        items = aiter_items(file_sessions(files))
    ltm = _ltm(state)
    resolved = ltm.resolve_policy(policy, include_assistant=include_assistant)
    render = state.render

    so_far = {"sessions": 0, "saved": 0}  # what a Ctrl-C reports

    async def go() -> Any:
        async with ltm:
            count = total
            if from_store and not sources:
                count = await _count_matching(state, app_name, user, since, until)
            with render.progress("saving sessions", total=count) as advance:

                def done(report: Any) -> None:
                    if report.error is not None:
                        where, message = report.source or report.session_id, str(report.error)
                        render.warn(message if message.startswith(f"{where}:") else f"{where}: {message}")
                    else:
                        so_far["saved"] += report.saved
                    so_far["sessions"] += 1
                    if report.saved:  # what the store acknowledged, a failed session's part included
                        change.count(sessions=1, memories=report.saved)
                        change.add_ids(report.ids[: report.saved])
                        indexes.add(report.index)
                        change.store = ltm_store(ltm.backend_name, indexes)
                    advance(1)

                return await replay(ltm, items, resolved, dry_run=dry_run, on_done=done, batch_bytes=limit)

    indexes: set[str] = set()
    with state.recording("ltm save", ltm.backend_name, dry_run=dry_run) as change:
        try:
            summary = run(go())
        except KeyboardInterrupt:
            saved = "nothing saved (dry run)" if dry_run else f"{counted(so_far['saved'], 'memory')} saved"
            render.error(f"interrupted after {counted(so_far['sessions'], 'session')}: {saved}")
            if not dry_run:
                render.hint("run the same command again to resume: what is saved already is skipped")
            raise typer.Exit(130) from None
        _render_summary(state, summary, dry_run)
        if summary.aborted:
            render.error(summary.aborted)
        if summary.failed:
            raise typer.Exit(summary.exit_code or 1)  # 2 for a model mismatch, 4 for a backend not available


async def _count_matching(
    state: AppState, app_name: str | None, user: str | None, since: str | None, until: str | None
) -> int:
    """The sessions `--from-store --app ...` will save (the progress bar's total); an app with no
    session in the database is not found (exit 3), a window that matches none says so."""

    settings = state.loaded.settings
    matching, of_app = await count_store_sessions(settings, app_name=app_name, user_id=user, since=since, until=until)
    if not of_app:
        from veadk_mem.config import mask_url
        from veadk_mem.sessions.url import given_db_url, session_db_url

        where = mask_url(given_db_url(settings, session_db_url(settings)))
        raise NotFound(f"no sessions matched: app {app_name!r} has no sessions in {where}")
    if not matching:
        state.render.message("no sessions matched --user/--since/--until: nothing to save")
    return matching


def _store_items(
    state: AppState, ids: list[str], app_name: str | None, user: str | None, since: str | None, until: str | None
) -> Any:
    """Sessions straight from the session database (needs veadk_mem.sessions)."""

    if ids and (app_name or user or since or until):
        raise BadInput("--from-store takes either APP USER ID or --app A [--user U] [--since T], not both")
    if ids and len(ids) != 3:
        raise BadInput("--from-store APP USER ID: give exactly three values")
    if not ids and not app_name:
        raise BadInput("--from-store needs APP USER ID, or --app A [--user U] [--since T]")

    return store_sessions(state.loaded.settings, ids=ids, app_name=app_name, user_id=user, since=since, until=until)


SUMMARY_COLUMNS = [
    Column("sessions", "sessions", justify="right"),
    Column("events", "events", justify="right"),
    Column("memories saved", "saved", justify="right"),
    Column("duplicates skipped", "duplicates", justify="right"),
    Column("dropped by policy", "dropped", justify="right"),
    Column("failed", "failed", justify="right"),
]
DRY_SESSION_COLUMNS = [
    Column.id("app", "app_name"),
    Column.id("user", "user_id"),
    Column.id("session", "session_id"),
    Column("events", "events", justify="right"),
    Column("would save", "saved", justify="right"),
    Column("duplicates", "duplicates", justify="right"),
    Column("dropped", "dropped", justify="right"),
]
DRY_USER_COLUMNS = [
    Column.id("app", "app_name"),
    Column.id("user", "user_id"),
    Column("index", "index"),
    Column("sessions", "sessions", justify="right"),
    Column("would save", "saved", justify="right"),
    Column("duplicates", "duplicates", justify="right"),
    Column("dropped", "dropped", justify="right"),
]


LEDGER_COLUMN = Column("skipped by ledger", "ledger_skipped", justify="right")


def _with_ledger(columns: list[Column], shown: bool) -> list[Column]:
    """The columns, plus the ledger's count before the last one when the ledger skipped anything."""
    return [*columns[:-1], LEDGER_COLUMN, columns[-1]] if shown else columns


def _render_summary(state: AppState, summary: Any, dry_run: bool) -> None:
    render = state.render
    totals = summary.totals()
    ledger = totals["ledger_skipped"] > 0
    if render.json_mode:
        render.json(
            {
                "dry_run": dry_run,
                "aborted": summary.aborted,
                "totals": totals,
                "users": summary.per_user(),
                "sessions": [r.as_dict() for r in summary.reports],
            }
        )
        return
    if dry_run:
        ok = [r.as_dict() for r in summary.reports if r.error is None]
        render.table(ok, _with_ledger(DRY_SESSION_COLUMNS, ledger), title="dry run: per session", empty="no sessions")
        render.table(
            summary.per_user(), _with_ledger(DRY_USER_COLUMNS, ledger), title="dry run: per user", empty="no users"
        )
    render.table(  # a summary, as every command's: stderr (--json puts it on stdout)
        [totals],
        _with_ledger(SUMMARY_COLUMNS, ledger),
        title="dry run: nothing was saved" if dry_run else None,
        to_stderr=True,
    )
    if ledger:
        for r in summary.reports:
            if r.ledger_skipped:
                events = ", ".join(r.ledger_skipped)
                render.message(
                    f"ledger: {r.app_name}/{r.user_id}/{r.session_id}: sent before, skipped: events {events}"
                )
        render.message(
            f"vmem's replay ledger skipped {counted(totals['ledger_skipped'], 'memory')} it sent to this store "
            "before (the store cannot say what it holds); `vmem ltm delete` and `vmem forget` clear its entries"
        )


# --- search / list / profile ---------------------------------------------------------


class SearchMode(StrEnum):
    """`ltm search --mode`: which ranking finds the memories."""

    vector = "vector"
    keyword = "keyword"
    hybrid = "hybrid"


@app.command("search")
@table_shaped
def search(
    ctx: typer.Context,
    query: Annotated[
        str | None, typer.Argument(metavar="QUERY", help="What to look for, in plain words (or --queries).")
    ] = None,
    user: Annotated[
        str | None,
        typer.Option("--user", "-u", metavar="USER", help="The user whose memories to search (required for QUERY)."),
    ] = None,
    app_name: AppOpt = None,
    top_k: Annotated[
        int | None, typer.Option("--top-k", "-k", min=1, metavar="N", help="Memories to return (default: top_k).")
    ] = None,
    mode: Annotated[
        SearchMode | None,
        typer.Option(
            "--mode",
            "-m",
            case_sensitive=False,
            help="vector (what the agent retrieves), keyword (BM25) or hybrid (both fused); default search_mode.",
        ),
    ] = None,
    queries: Annotated[
        str | None,
        typer.Option(
            "--queries",
            metavar="FILE|-",
            help='Many queries, one a line or JSONL {"query","user","app","top_k"}: one JSONL result line each.',
        ),
    ] = None,
    min_score: Annotated[
        float | None,
        typer.Option(
            "--min-score",
            metavar="SCORE",
            help="Drop results scoring below this (the score shown; hybrid: fused, 0-1).",
        ),
    ] = None,
    since: SavedSinceOpt = None,
    until: SavedUntilOpt = None,
    json_flag: JsonOption = False,
) -> None:
    """Search a user's memories by meaning, by keywords, or both.

    The local backend ranks by both (hybrid) unless --mode or long_term_memory.search_mode
    says otherwise; Redis and OpenSearch search as the agent does (vector) unless asked.
    Each score says which ranking made it: cosine, bm25, or fused (hybrid: 0-1, the cosine
    and BM25 beside it in --json as vector_score, keyword_score). --since/--until
    keep the closest among the memories saved in that range. --json prints a list of ADK
    MemoryEntry objects.
    """

    state = get_state(ctx, json_flag=json_flag)
    after, before = _window(since, until)
    mode_name = mode.value if mode is not None else None
    if queries is not None:
        if query is not None:
            raise BadInput("give a QUERY or --queries FILE, not both")
        _search_batch(
            state, queries, user, app_name, mode_name, top_k=top_k, min_score=min_score, since=after, until=before
        )
        return
    if query is None:
        raise BadInput("give a QUERY (or --queries FILE)")
    if not user:
        raise BadInput("--user is required: whose memories to search")
    ltm = _ltm(state, app_name or "")

    async def go() -> tuple[list[dict[str, Any]], str | None]:
        async with ltm:
            found = await ltm.search_memory(
                app_name=app_name,
                user_id=user,
                query=query,
                top_k=top_k,
                min_score=min_score,
                since=after,
                until=before,
                mode=mode_name,
            )
            return found, None if found else await _elsewhere(ltm, app_name, user)

    with state.render.spinner("searching"):
        entries, elsewhere = run(go())
    rows = _rows(entries)
    columns = SEARCH_COLUMNS
    if any(r["score_kind"] for r in rows):  # say which ranking made each score
        columns = [columns[0], Column("by", "score_kind", drop=4), *columns[1:]]
    # Hosted stores (viking) say what kind of memory each result is; local vectors do not.
    if any(r["type"] for r in rows):
        columns = [Column("type", "type", drop=5), *columns]
    state.render.records(rows, columns, json_rows=entries, empty="no memories found")
    if elsewhere:
        state.render.message(elsewhere)


def _search_batch(
    state: AppState, source: str, user: str | None, app_name: str | None, mode: str | None, **options: Any
) -> None:
    """`--queries`: every query searched in one process, one JSONL line each as it completes
    (exit 1 when any failed)."""
    from veadk_mem.ltm.queries import SearchTally, open_queries, search_each

    limit = batch_bytes()
    queries = open_queries(source, user_id=user, app_name=app_name)
    ltm = _ltm(state, app_name or "")
    tally = SearchTally()

    async def go() -> None:
        async with ltm:
            async for request in search_each(ltm, queries.requests(), mode=mode, batch_bytes=limit, **options):
                tally.add(request)
                state.render.jsonl([request.as_dict()])  # written, and flushed, as each query completes

    try:
        run(go())
    finally:
        queries.close()
    for query, message in tally.failures:
        state.render.warn(f"query {query!r}: {message}")
    if tally.failed:
        raise typer.Exit(tally.exit_code)


@app.command("list")
@table_shaped
def list_(
    ctx: typer.Context,
    user: UserOpt,
    app_name: AppOpt = None,
    limit: Annotated[
        int, typer.Option("--limit", "-n", min=0, metavar="N", help="Show at most N, newest first (0: all).")
    ] = 0,
    since: SavedSinceOpt = None,
    until: SavedUntilOpt = None,
    json_flag: JsonOption = False,
) -> None:
    """A user's memories, newest first."""
    state = get_state(ctx, json_flag=json_flag)
    ltm = _ltm(state, app_name or "")
    after, before = _window(since, until)

    async def go() -> tuple[list[dict[str, Any]], str | None]:
        async with ltm:
            found = await ltm.list_memories(
                app_name=app_name, user_id=user, limit=limit or None, since=after, until=before
            )
            return found, None if found else await _elsewhere(ltm, app_name, user)

    with state.render.spinner("listing memories"):
        entries, elsewhere = run(go())
    state.render.records(_rows(entries), LIST_COLUMNS, json_rows=entries, empty="no memories")
    if elsewhere:
        state.render.message(elsewhere)


@app.command("profile")
def profile(
    ctx: typer.Context,
    user: Annotated[str, typer.Argument(metavar="USER", help="The user.")],
    app_name: AppOpt = None,
    json_flag: JsonOption = False,
) -> None:
    """The backend's profile of a user.

    Only viking keeps one; every other backend exits 4.
    """
    state = get_state(ctx, json_flag=json_flag)
    ltm = _ltm(state, app_name or "")

    async def go() -> str:
        async with ltm:
            return await ltm.get_user_profile(app_name=app_name, user_id=user)

    text = run(go())
    if not text:
        raise NotFound(f"no profile of user {user!r} yet: the store derives it from saved sessions")
    if state.render.json_mode:
        state.render.json({"user_id": user, "profile": text})
    else:
        state.render.text(text)


# --- delete / forget -----------------------------------------------------------------


DELETE_COLUMNS = [
    Column("index", "index"),
    Column.id("id", "id"),
    Column.id("session", "session"),
    Column.text("text", "text", max_width=80),
]


def _record_rows(index: str, records: list[Any]) -> list[dict[str, Any]]:
    from veadk_mem.ltm.convert import searchable_text

    return [{"index": index, "id": r.id, "session": r.session_id, "text": searchable_text(r.text)} for r in records]


@app.command("delete")
def delete(
    ctx: typer.Context,
    user: UserOpt,
    ids: Annotated[
        list[str] | None, typer.Option("--id", metavar="ID", help="Memory id to delete (repeatable).")
    ] = None,
    session: Annotated[
        str | None,
        typer.Option("--session", "-s", metavar="SESSION_ID", help="Delete memories saved from this session."),
    ] = None,
    everything: Annotated[bool, typer.Option("--all", help="Delete every memory of the user in the index.")] = False,
    app_name: AppOpt = None,
    since: SavedSinceOpt = None,
    until: SavedUntilOpt = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="List what would be deleted; delete nothing.")] = False,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Do not ask for confirmation.")] = False,
    json_flag: JsonOption = False,
) -> None:
    """Delete a user's memories.

    By id, by the session they came from, or all of them (narrowed by --since/--until);
    asks first unless --yes.
    """
    after, before = _window(since, until)
    state = get_state(ctx, json_flag=json_flag)
    ltm = _ltm(state, app_name or "")
    render = state.render

    async def go() -> tuple[str, list[Any], int]:
        # One event loop for select, confirm and delete: async clients (redis, opensearch)
        # hold connections bound to the loop that opened them.
        async with ltm:
            index = await ltm.user_index(app_name, user)
            found = await ltm.select(
                app_name=app_name,
                user_id=user,
                ids=ids,
                session_id=session,
                everything=everything,
                index=index,
                since=after,
                until=before,
            )
            if dry_run or not found:
                return index, found, 0
            confirm_deletion(
                state, f"delete {counted(len(found), 'memory')} of user {user!r} from index {index!r}?", yes=yes
            )
            whole = whole_index(everything=everything, since=after, until=before)
            deleted = await ltm.delete(app_name=app_name, user_id=user, records=found, index=index, everything=whole)
            return index, found, deleted

    with state.recording("ltm delete", ltm.backend_name, dry_run=dry_run) as change:
        index, records, deleted = run(go())
        change.store = ltm_store(ltm.backend_name, [index])
        change.count(memories=deleted)
        change.add_ids(r.id for r in records[:deleted] if deleted)
    rows = _record_rows(index, records)
    if render.json_mode:
        render.json({"dry_run": dry_run, "index": index, "user_id": user, "deleted": deleted, "memories": rows})
        return
    # a dry run's plan is its data (stdout); what a deletion did is a summary, on stderr like every command's
    render.table(
        rows,
        DELETE_COLUMNS,
        title="would delete" if dry_run else "deleted",
        empty="no matching memories",
        to_stderr=not dry_run,
    )
    render.message(
        f"dry run: would delete {counted(len(records), 'memory')}"
        if dry_run
        else f"deleted {counted(deleted, 'memory')}"
    )


@app.command("edit")
def edit(
    ctx: typer.Context,
    memory_id: Annotated[str, typer.Argument(metavar="ID", help="The memory's id (ltm list, ltm search).")],
    text: Annotated[str, typer.Option("--text", "-t", metavar="TEXT", help="The memory's corrected text.")],
    user: Annotated[
        str | None, typer.Option("--user", "-u", metavar="USER", help="The memory's user (else looked up).")
    ] = None,
    app_name: AppOpt = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Show the old and new text; change nothing.")] = False,
    json_flag: JsonOption = False,
) -> None:
    """Replace a wrong memory's text: re-embedded, its source kept, the old text in the history.

    On backends that keep the text they are sent (local, redis, opensearch, mem0 with
    infer = false); exit 4 on a service that rewrites it, 3 for an id the store does not hold.
    """
    from veadk_mem.ltm.edit import edit_memory

    state = get_state(ctx, json_flag=json_flag)
    ltm = _ltm(state, app_name or "")
    render = state.render

    async def go() -> Any:
        async with ltm:
            return await edit_memory(
                ltm, memory_id=memory_id, text=text, user_id=user, app_name=app_name, dry_run=dry_run
            )

    with state.recording("ltm edit", ltm.backend_name, dry_run=dry_run) as change:
        done = run(go())
        change.store = ltm_store(ltm.backend_name, [done.index])
        change.count(memories=1)
        change.add_ids([done.old.id, *([done.new_id] if done.new_id else [])])
        change.detail("old_text", done.old.text)
        change.detail("new_text", done.new.text)
    if render.json_mode:
        render.json(done.to_json())
        return
    from veadk_mem.ltm.convert import searchable_text

    rows = [{"which": "old", "id": done.old.id, "text": searchable_text(done.old.text)}]
    new_id = done.new_id or ("(dry run)" if dry_run else "(held already)")
    rows.append({"which": "new", "id": new_id, "text": searchable_text(done.new.text)})
    render.table(rows, EDIT_COLUMNS, title="would edit" if dry_run else "edited", to_stderr=not dry_run)
    render.message("dry run: nothing changed" if dry_run else f"edited memory {done.old.id} of user {done.user_id!r}")


EDIT_COLUMNS = [Column("", "which"), Column.id("id", "id"), Column.text("text", "text")]


def forget(
    ctx: typer.Context,
    user: Annotated[str, typer.Argument(metavar="USER", help="The user to forget.")],
    app_name: AppOpt = None,
    session: Annotated[
        str | None,
        typer.Option(
            "--session",
            "-s",
            metavar="SESSION_ID",
            help="Only this session of the user, with the memories made from it.",
        ),
    ] = None,
    policy: PolicyOpt = None,
    db_url: DbUrlOption = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="List what would go from where; delete nothing.")] = False,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Do not ask for confirmation.")] = False,
    json_flag: JsonOption = False,
) -> None:
    """Remove a user's sessions and memories everywhere.

    Right to be forgotten: the session database and every long-term memory index, in one
    command. --dry-run lists what would go from where. --session ID: one session and the
    memories made from it, verified gone.
    """

    state = get_state(ctx, json_flag=json_flag)
    state.use_db_url(db_url)
    if session is not None:
        forget_session(state, user=user, session_id=session, app_name=app_name, policy=policy, dry_run=dry_run, yes=yes)
        return
    if policy is not None:
        raise BadInput("forget: --policy chooses the memories of --session: give both")
    render = state.render
    ltm = _ltm(state, app_name or "")
    settings = state.loaded.settings

    async def go() -> Any:
        # Plan, confirm and forget on one event loop (see `delete`).
        async with ltm:
            plan = await plan_forget(settings, ltm, user_id=user, app_name=app_name)
            if not dry_run and plan.total:
                confirm_deletion(state, f"forget user {user!r}: {plan.describe()}?", yes=yes)
                plan = await forget_user(settings, ltm, plan)
            return plan

    with state.recording("forget", ltm.backend_name, dry_run=dry_run) as change:
        plan = run(go())
        change.store = f"{ltm_store(plan.backend, plan.memories)}; sessions {plan.session_db}"
        if plan.done:
            change.count(sessions=plan.deleted_sessions, memories=plan.deleted_memories)
            change.add_ids([user])
    if render.json_mode:
        render.json(plan.as_dict(dry_run))
        return
    render.table(
        plan.rows(),
        [Column.id("store", "store"), Column.free("where", "where"), Column("items", "items", justify="right")],
        title=f"dry run: forget {user}" if dry_run else f"forgot {user}",
        empty=f"nothing stored for user {user!r}",
        to_stderr=not dry_run,  # the plan is a dry run's data; what was done is a summary (stderr)
    )
