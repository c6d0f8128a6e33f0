"""Retention as a policy: what `[retention]`'s rules remove now, and `session prune` applying them.

A plan is made from one query (every session's key, times, event count and event bytes) and the
rules, in Python: `max_age` (sessions not updated for that long), then `max_sessions_per_user`
(the newest kept per app and user), `keep_apps` / `keep_users` never touched. The sessions a
plan removes are deleted by `Deletes.delete_sessions` exactly as `session delete` deletes them:
batches of short transactions, each session re-checked on its locked row, so one an agent
resumed meanwhile is kept and named, and an interrupted run says what it committed.
"""

from __future__ import annotations

import asyncio
import time
from collections import defaultdict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from veadk_mem.errors import BadInput, Interrupted, VmemError
from veadk_mem.sessions.layout import Layout, to_epoch
from veadk_mem.sessions.pruned import TrimStep, ensure_table, record_step
from veadk_mem.sessions.records import BATCH, DeleteReport, SessionKey, SessionSummary
from veadk_mem.sessions.timespec import parse_duration

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from veadk_mem.config import RetentionRule, RetentionSettings
    from veadk_mem.sessions.engine import Database
    from veadk_mem.sessions.store import SessionStore

SESSION_RULES = ("max_age", "max_sessions_per_user")  # the rules that remove whole sessions, in the order applied


@dataclass(frozen=True)
class StoredSession:
    """One session as the plan sees it: key, times (epoch seconds), events and their stored bytes."""

    app_name: str
    user_id: str
    id: str
    create_time: float
    update_time: float
    events: int
    bytes: int

    def summary(self) -> SessionSummary:
        """The delete's view of it: the update time it re-checks against, the events it counts."""
        return SessionSummary(self.app_name, self.user_id, self.id, {}, self.events, self.create_time, self.update_time)


@dataclass
class Removal:
    """What one rule removes in one app."""

    sessions: int = 0
    events: int = 0
    bytes: int = 0

    def add(self, s: StoredSession) -> None:
        self.sessions += 1
        self.events += s.events
        self.bytes += s.bytes

    def to_json(self) -> dict[str, int]:
        return {"sessions": self.sessions, "events": self.events, "bytes": self.bytes}


@dataclass
class AppPlan:
    """One app under its rule: what each rule removes now, what stays, the oldest session kept."""

    app_name: str
    rule: dict[str, Any]
    excluded: str = ""  # why the app is left alone (keep_apps), else ""
    sessions: int = 0
    events: int = 0
    bytes: int = 0
    removals: dict[str, Removal] = field(default_factory=lambda: {r: Removal() for r in SESSION_RULES})
    kept_users: int = 0  # sessions of keep_users left alone
    oldest_kept: float | None = None
    doomed: list[StoredSession] = field(default_factory=list)
    trim_candidates: int = 0  # kept sessions with more events than keep_last_events
    trim_events: int = 0  # ... and the events beyond it (at most: trimming keeps whole invocations)
    trim_bytes: int = 0  # ... and their stored bytes (at most, likewise; see `add_trim_bytes`)
    trims: list[StoredSession] = field(default_factory=list)  # those sessions
    keep_last_events: int | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "app_name": self.app_name,
            "rule": self.rule,
            "excluded": self.excluded or None,
            "sessions": self.sessions,
            "events": self.events,
            "bytes": self.bytes,
            "remove": {name: r.to_json() for name, r in self.removals.items()},
            "remove_total": self.total().to_json(),
            "kept_users_sessions": self.kept_users,
            "oldest_kept": self.oldest_kept,
            "keep_last_events": {
                "sessions": self.trim_candidates,
                "events_at_most": self.trim_events,
                "bytes_at_most": self.trim_bytes,
            },
        }

    def total(self) -> Removal:
        out = Removal()
        for r in self.removals.values():
            out.sessions += r.sessions
            out.events += r.events
            out.bytes += r.bytes
        return out


@dataclass
class RetentionPlan:
    """What `[retention]` removes now, per app; `doomed` the sessions, oldest update first."""

    apps: list[AppPlan]
    now: float

    @property
    def doomed(self) -> list[StoredSession]:
        return sorted((s for a in self.apps for s in a.doomed), key=lambda s: s.update_time)

    def to_json(self) -> dict[str, Any]:
        return {"now": self.now, "apps": [a.to_json() for a in self.apps]}


@dataclass
class PruneReport:
    """`session prune`: the plan, and what the delete committed (None for a dry run)."""

    plan: RetentionPlan
    deleted: DeleteReport | None = None
    trimmed_sessions: int = 0  # sessions whose oldest events keep_last_events removed
    trimmed_events: int = 0

    @property
    def dry_run(self) -> bool:
        return self.deleted is None

    def to_json(self) -> dict[str, Any]:
        """`session prune --json`: vmem's own report, snake_case."""
        doomed = self.plan.doomed
        out: dict[str, Any] = {
            "dry_run": self.dry_run,
            "apps": [a.to_json() for a in self.plan.apps],
            "planned": {"sessions": len(doomed), "events": sum(s.events for s in doomed)},
        }
        d = self.deleted
        out["deleted"] = None if d is None else {"sessions": len(d.sessions), "events": d.events}
        out["trimmed"] = None if d is None else {"sessions": self.trimmed_sessions, "events": self.trimmed_events}
        out["kept_resumed"] = (
            [] if d is None else [{"app_name": k.app_name, "user_id": k.user_id, "id": k.id} for k in d.skipped]
        )
        return out


def rule_json(rule: RetentionRule) -> dict[str, Any]:
    """A rule's keys that are set, as the config file writes them."""
    return {k: v for k, v in rule.model_dump().items() if v not in (None, [])}


def dangerous(rule: RetentionRule) -> list[str]:
    """The keys of `rule` that remove everything of an app (max_age 0, keep_last_events 0, ...)."""
    out = []
    if rule.max_age and parse_duration(rule.max_age, "retention.max_age") == 0:
        out.append(f"max_age = {rule.max_age!r}")
    for key in ("keep_last_events", "max_sessions_per_user"):
        if getattr(rule, key) == 0:
            out.append(f"{key} = 0")
    return out


def refuse_dangerous(plan: RetentionPlan, *, app: str | None, yes: bool) -> None:
    """BadInput (exit 2) for a rule that removes every session (or event) of an app, unless
    that app is named with --app and --yes is given: such a rule is more often a typo than a wish."""
    from veadk_mem.config import RetentionRule

    for a in plan.apps:
        if a.excluded:
            continue
        bad = dangerous(RetentionRule(**a.rule))
        if bad and not (yes and app == a.app_name):
            raise BadInput(
                f"retention rule of {a.app_name}: {', '.join(bad)} removes every session of the app; "
                f"to mean it, run prune with --app {a.app_name} --yes"
            )


def event_size(db: Database) -> Any:
    """One event's stored bytes as SQL: its `event_data` (PostgreSQL: the stored, possibly
    compressed size); 0 in a v0 layout, whose per-column events (a pickle among them) have no one size."""
    from sqlalchemy import Integer, LargeBinary, cast, func, literal

    t = db.tables
    e = t.events.c
    if t.layout not in (Layout.V1, Layout.SQLITE) or "event_data" not in e:
        return literal(0, Integer())
    if db.dialect == "postgresql":
        return func.pg_column_size(e.event_data)
    if db.dialect == "mysql":
        return func.length(e.event_data)
    return func.length(cast(e.event_data, LargeBinary))


async def stored(db: Database, app: str | None = None) -> list[StoredSession]:
    """Every session (of `app`) with its event count and bytes: the plan's one query."""
    from sqlalchemy import Integer, and_, cast, func, select

    t = db.tables
    s, e = t.sessions.c, t.events.c
    size = event_size(db)
    counts = (
        select(
            e.app_name,
            e.user_id,
            e.session_id,
            func.count().label("n"),
            cast(func.sum(func.coalesce(size, 0)), Integer()).label("b"),
        )
        .group_by(e.app_name, e.user_id, e.session_id)
        .subquery()
    )
    joined = t.sessions.outerjoin(
        counts, and_(counts.c.app_name == s.app_name, counts.c.user_id == s.user_id, counts.c.session_id == s.id)
    )
    stmt = select(s.app_name, s.user_id, s.id, s.create_time, s.update_time, counts.c.n, counts.c.b).select_from(joined)
    if app is not None:
        stmt = stmt.where(db.key_eq(s.app_name, app))
    with db.failures():
        async with db.reader.connect() as conn:
            rows = (await conn.execute(stmt)).all()
    return [
        StoredSession(a, u, i, to_epoch(c), to_epoch(up), int(n or 0), int(b or 0)) for a, u, i, c, up, n, b in rows
    ]


def plan(sessions: list[StoredSession], settings: RetentionSettings, *, now: float | None = None) -> RetentionPlan:
    """Apply the rules to `sessions`: per app, what max_age and then max_sessions_per_user remove."""
    now = time.time() if now is None else now
    by_app: dict[str, list[StoredSession]] = defaultdict(list)
    for s in sessions:
        by_app[s.app_name].append(s)
    for name in settings.apps:  # an app with a rule of its own is shown even when it has no session
        by_app.setdefault(name, [])
    apps = []
    for name in sorted(by_app):
        rule = settings.rule_for(name)
        ap = AppPlan(name, rule_json(rule))
        ap.sessions = len(by_app[name])
        ap.events = sum(s.events for s in by_app[name])
        ap.bytes = sum(s.bytes for s in by_app[name])
        if name in settings.keep_apps:
            ap.excluded = "keep_apps"
            ap.oldest_kept = min((s.update_time for s in by_app[name]), default=None)
        else:
            _apply(ap, rule, by_app[name], now)
        apps.append(ap)
    return RetentionPlan(apps, now)


def _apply(ap: AppPlan, rule: RetentionRule, sessions: list[StoredSession], now: float) -> None:
    """Fill `ap` with what `rule` removes of this app's `sessions`."""
    cutoff = now - parse_duration(rule.max_age, "retention.max_age") if rule.max_age else None
    kept: list[StoredSession] = []
    per_user: dict[str, list[StoredSession]] = defaultdict(list)
    for s in sessions:
        if s.user_id in rule.keep_users:
            ap.kept_users += 1
            kept.append(s)
        elif cutoff is not None and s.update_time < cutoff:
            ap.removals["max_age"].add(s)
            ap.doomed.append(s)
        else:
            per_user[s.user_id].append(s)
    for user_sessions in per_user.values():
        user_sessions.sort(key=lambda s: (s.update_time, s.id), reverse=True)  # newest first
        limit = rule.max_sessions_per_user
        keep = user_sessions if limit is None else user_sessions[:limit]
        kept.extend(keep)
        for s in user_sessions[len(keep) :]:
            ap.removals["max_sessions_per_user"].add(s)
            ap.doomed.append(s)
    ap.oldest_kept = min((s.update_time for s in kept), default=None)
    if rule.keep_last_events is not None:
        over = [s for s in kept if s.user_id not in rule.keep_users and s.events > rule.keep_last_events]
        ap.trim_candidates = len(over)
        ap.trim_events = sum(s.events - rule.keep_last_events for s in over)
        ap.trims = over
        ap.keep_last_events = rule.keep_last_events


async def retention_plan(store: SessionStore, settings: RetentionSettings, *, app: str | None = None) -> RetentionPlan:
    """What `[retention]` removes now from the store (of `app`), from one query (and a second one
    for the bytes keep_last_events trims, only when some kept session is over its rule)."""
    found = await stored(store.db, app)
    result = plan(found, settings)
    if app is not None:
        result.apps = [a for a in result.apps if a.app_name == app]
    await add_trim_bytes(store.db, result)
    return result


async def add_trim_bytes(db: Database, result: RetentionPlan) -> None:
    """Fill each app's `trim_bytes`: the stored bytes of its over-long sessions' events beyond
    their newest `keep_last_events` (as `stored` measures them), in one query numbering each
    session's events newest first. An upper bound, as `trim_events` is: a trim also keeps the
    whole invocation of the oldest event kept and the latest compaction. 0 in a v0 layout (not trimmed)."""
    from sqlalchemy import Integer, case, cast, func, or_, select

    over = [a for a in result.apps if a.trims and a.keep_last_events is not None]
    t = db.tables
    if not over or t.layout not in (Layout.V1, Layout.SQLITE):
        return
    e = t.events.c
    key = (e.app_name, e.user_id, e.session_id)
    rn = func.row_number().over(partition_by=key, order_by=(e.timestamp.desc(), e.id.desc()))
    keep = case(*((db.key_eq(e.app_name, a.app_name), a.keep_last_events) for a in over), else_=None)
    numbered = (
        select(*key, rn.label("rn"), keep.label("keep"), event_size(db).label("size"))
        .where(or_(*(db.key_eq(e.app_name, a.app_name) for a in over)))
        .subquery()
    )
    n = numbered.c
    stmt = (
        select(n.app_name, n.user_id, n.session_id, cast(func.sum(func.coalesce(n.size, 0)), Integer()))
        .where(n.rn > n.keep)
        .group_by(n.app_name, n.user_id, n.session_id)
    )
    with db.failures():
        async with db.reader.connect() as conn:
            beyond = {(a, u, i): int(b or 0) for a, u, i, b in await conn.execute(stmt)}
    for a in over:
        a.trim_bytes = sum(beyond.get((s.app_name, s.user_id, s.id), 0) for s in a.trims)


async def prune(
    store: SessionStore,
    settings: RetentionSettings,
    *,
    app: str | None = None,
    dry_run: bool = False,
    yes: bool = False,
    confirm: Callable[[RetentionPlan], None] | None = None,
    batch: int | None = None,
    planned: RetentionPlan | None = None,
    first: Callable[[RetentionPlan], Awaitable[None]] | None = None,
) -> PruneReport:
    """`session prune`: plan, refuse a rule that removes everything (unless named), confirm, delete.

    The delete is `session delete`'s (`Deletes.delete_sessions` with the re-check on): batches of
    short transactions; a session updated since the plan (an agent resumed it) is kept and named
    in the report; a failure or Ctrl-C part-way raises saying how many sessions were committed,
    and running prune again finishes (the plan is made anew).

    `planned` is a plan made already (a caller that showed it); `first` runs after the
    confirmation and before anything here is deleted (erasure deletes the memories there).
    """
    result = planned if planned is not None else await retention_plan(store, settings, app=app)
    refuse_dangerous(result, app=app, yes=yes)
    doomed = result.doomed
    trims = [(s, a.keep_last_events) for a in result.apps for s in a.trims if a.keep_last_events is not None]
    if dry_run:
        return PruneReport(result, None)
    if not doomed and not trims:
        return PruneReport(result, DeleteReport(sessions=[], events=0))
    if confirm is not None:
        confirm(result)
    if first is not None:
        await first(result)
    if doomed:
        deleted = await store.delete_sessions([s.summary() for s in doomed], recheck=True, batch=batch)
    else:
        deleted = DeleteReport(sessions=[], events=0)
    report = PruneReport(result, deleted)
    try:
        for s, keep in trims:
            gone = await trim_session(store.db, s, keep)
            if gone:
                report.trimmed_sessions += 1
                report.trimmed_events += gone
    except BaseException as exc:
        raise _trim_partial(exc, report, len(trims), store.db) from None
    return report


def _trim_partial(exc: BaseException, report: PruneReport, planned: int, db: Database) -> BaseException:
    """The error for `exc` raised while trimming: it says what the prune committed before it."""
    d = report.deleted
    done = (
        f"{len(d.sessions) if d else 0:,} session(s) deleted, {report.trimmed_sessions:,} of {planned:,} "
        f"session(s) trimmed ({report.trimmed_events:,} event(s)) and committed before it; "
        "run the same command again to finish"
    )
    if isinstance(exc, (KeyboardInterrupt, asyncio.CancelledError)):
        return Interrupted(f"interrupted: {done}")
    if not isinstance(exc, Exception):
        return exc
    error = exc if isinstance(exc, VmemError) else db.fail(exc)
    error.message = f"{error.message} -- {done}"
    error.args = (error.message,)
    return error


@dataclass(frozen=True)
class EventMark:
    """What a trim needs of one event: its id, its invocation, whether it is an ADK compaction."""

    id: str
    invocation_id: str
    compaction: bool


def cut_point(events: list[EventMark], keep: int) -> int:
    """The index of the oldest event a trim to `keep` events keeps (events oldest first).

    The newest `keep` events, and then more so that ADK resumes the session as it was: the
    latest compaction event and every event after it (the compaction summarises what went
    before it), and the whole invocation of the oldest event kept (a function call never
    without its response, a turn never without its user message).
    """
    n = len(events)
    if n <= keep:
        return 0
    cut = n - keep
    compactions = [i for i, mark in enumerate(events) if mark.compaction]
    if compactions and compactions[-1] < cut:
        cut = compactions[-1]
    while 0 < cut < n and events[cut].invocation_id and events[cut - 1].invocation_id == events[cut].invocation_id:
        cut -= 1
    return cut


TRIM_STEP = 5_000  # events deleted per short transaction of a trim


async def trimmed_event_ids(db: Database, s: StoredSession, keep: int) -> list[str]:
    """The ids of the events a trim of session `s` to `keep` removes (see `cut_point`), oldest first;
    none in a v0 layout (pickled actions: compactions unknown), which is not trimmed."""
    from sqlalchemy import select

    from veadk_mem.sessions.compactions import is_compaction

    t = db.tables
    if t.layout not in (Layout.V1, Layout.SQLITE):
        return []
    e = t.events.c
    of_session = (db.key_eq(e.app_name, s.app_name), db.key_eq(e.user_id, s.user_id), db.key_eq(e.session_id, s.id))
    stmt = select(e.id, e.invocation_id, is_compaction(db)).where(*of_session).order_by(e.timestamp, e.id)
    with db.failures():
        async with db.reader.connect() as conn:
            marks = [EventMark(i, inv or "", bool(c)) for i, inv, c in await conn.execute(stmt)]
    return [m.id for m in marks[: cut_point(marks, keep)]]


async def planned_trims(store: SessionStore, plan: RetentionPlan) -> dict[SessionKey, frozenset[str]]:
    """The ids of the events `plan`'s keep_last_events trims remove, by session: what an erasure of
    their memories looks for before the prune runs."""
    trims: dict[SessionKey, frozenset[str]] = {}
    for a in plan.apps:
        keep = a.keep_last_events
        if keep is None:
            continue
        for s in a.trims:
            trims[s.summary().key] = frozenset(await trimmed_event_ids(store.db, s, keep))
    return trims


async def trim_session(db: Database, s: StoredSession, keep: int) -> int:
    """Delete the oldest events of session `s` beyond `keep` (see `cut_point`); how many went.

    The session row and its state, and app and user state, are not touched: ADK reads state
    from those rows (its update time too, so an agent holding the session appends as before).
    The events are read once (id, invocation, compaction mark), then deleted oldest first,
    `TRIM_STEP` a short transaction: meanwhile ADK reads the session with fewer of its oldest
    events, never with a gap. Each transaction also adds its count to vmem's own table
    (`pruned.py`), so `session get` says how many older events are gone. v0 layouts (pickled
    actions: compactions unknown) are not trimmed.
    """
    from sqlalchemy import delete, select

    from veadk_mem.sessions.compactions import is_compaction
    from veadk_mem.sessions.engine import sqlite_gap

    t = db.tables
    if t.layout not in (Layout.V1, Layout.SQLITE):
        return 0
    e, c = t.events.c, t.sessions.c
    of_session = (db.key_eq(e.app_name, s.app_name), db.key_eq(e.user_id, s.user_id), db.key_eq(e.session_id, s.id))
    stmt = select(e.id, e.invocation_id, is_compaction(db)).where(*of_session).order_by(e.timestamp, e.id)
    created_stmt = select(c.create_time).where(
        db.key_eq(c.app_name, s.app_name), db.key_eq(c.user_id, s.user_id), db.key_eq(c.id, s.id)
    )
    with db.failures():
        async with db.reader.connect() as conn:
            marks = [EventMark(i, inv or "", bool(cmp)) for i, inv, cmp in await conn.execute(stmt)]
            created = (await conn.execute(created_stmt)).scalar()
        cut = cut_point(marks, keep)
        doomed = [m.id for m in marks[:cut]]
        if not doomed or created is None:  # nothing to trim, or the session is gone meanwhile
            return 0
        table = await ensure_table(db)
    first_kept = marks[cut].id if cut < len(marks) else ""
    gone, held = 0, 0.0
    for start in range(0, len(doomed), TRIM_STEP):
        if held:
            await sqlite_gap(db.dialect, held)
        began = time.monotonic()
        step = doomed[start : start + TRIM_STEP]
        after = doomed[start + TRIM_STEP] if start + TRIM_STEP < len(doomed) else first_kept
        with db.failures():
            async with db.engine.connect() as conn:
                conn = await conn.execution_options(vmem_write=True)
                async with conn.begin():
                    done = 0
                    for i in range(0, len(step), BATCH):
                        res = await conn.execute(delete(t.events).where(*of_session, e.id.in_(step[i : i + BATCH])))
                        done += max(res.rowcount or 0, 0)
                    key = (s.app_name, s.user_id, s.id)
                    await record_step(conn, db, table, TrimStep(key, created, step[0], after, done))
        gone += done  # committed
        held = time.monotonic() - began
    return gone
