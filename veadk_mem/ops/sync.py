"""`vmem ltm sync`: VeADK's auto-save (`auto_save_session=True`) from outside the agent.

VeADK 1.1.19 saves a session from the agent's after-agent callback
(`veadk/memory/save_session_callback.py`): the first time a session is seen, all its events; later
only the events new since the last save, and only once MIN_MESSAGES_THRESHOLD (10) new events
arrived or MIN_TIME_THRESHOLD (60 s) passed since that save; when a user's callback runs in a new
session, the previous session's unsaved events are saved first. Each save hands the new events
to `LongTermMemory.add_session_to_memory`, which keeps the events the save policy keeps, as the
same memory strings.

`Syncer` does the same from the session database: it lists the sessions changed since its
cursor (`sessions.changes`: a keyset over the sessions table, a page at a time), and for each
reads the events after the last one it saved (a keyset over ADK's events index, a page at a
time), saves their memories through the facade (content hashes, or the replay ledger, skip what
the store holds) and moves the cursor (`sync_cursor.SyncCursor`) after each page the store
acknowledged. A session whose new events are below both thresholds is held; it is saved once
the time threshold passes (measured from its last save: VeADK would save it at the agent's next
turn) or when its user has a newer session.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from veadk_mem.errors import (
    NotFound,
    PartialWrite,
    StoreAuthError,
    StoreError,
    StoreThrottled,
    StoreUnreachable,
    VmemError,
)
from veadk_mem.ltm.ledger import LedgerError
from veadk_mem.masking import mask_url
from veadk_mem.ops.history import summary
from veadk_mem.ops.sync_cursor import START, CursorError, SessionMark, SyncCursor
from veadk_mem.sessions.records import SessionFilter

if TYPE_CHECKING:
    from veadk_mem.config import VmemSettings
    from veadk_mem.ltm.facade import LongTermMemory
    from veadk_mem.sessions.changes import Change, Changes
    from veadk_mem.sessions.store import SessionStore


@dataclass(frozen=True)
class Thresholds:
    """VeADK's MIN_MESSAGES_THRESHOLD and MIN_TIME_THRESHOLD (`[auto_save]`)."""

    messages: int = 10
    seconds: float = 60.0


MAX_ERRORS = 100  # error lines a run's totals keep (the latest)


@dataclass
class SyncBatch:
    """What one batch of a sync did: a page of changed sessions, then the held sessions now due."""

    listed: int = 0  # sessions the page listed
    unchanged: int = 0  # listed again (the overlap) with nothing new
    synced: int = 0  # sessions with events saved
    held: int = 0  # sessions whose new events wait for VeADK's thresholds
    moved_on: int = 0  # held sessions saved because their user has a newer session
    due: int = 0  # held sessions saved because the time threshold passed
    events: int = 0  # events read and handed to the policy
    saved: int = 0  # memories the store acknowledged
    duplicates: int = 0  # memories the store (or the ledger) already held
    dropped: int = 0  # events the policy dropped
    failed: int = 0
    errors: list[str] = field(default_factory=list)
    position: tuple[float, str, str, str] | None = None
    started: float = field(default_factory=time.time)
    finished: float | None = None

    @property
    def busy(self) -> bool:
        """Whether the batch found anything to do (an idle follow backs off)."""
        return bool(self.synced or self.held or self.failed)

    def add(self, other: SyncBatch) -> None:
        """Fold another batch's counts into this one (the totals of a run)."""
        for name in ("listed", "unchanged", "synced", "held", "moved_on", "due", "events", "saved"):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        for name in ("duplicates", "dropped", "failed"):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        self.errors = [*self.errors, *other.errors][-MAX_ERRORS:]  # a follow's totals stay bounded
        self.position = other.position or self.position
        self.finished = other.finished

    def to_json(self) -> dict[str, Any]:
        """vmem's own report, snake_case."""
        pos = self.position
        return {
            "listed": self.listed,
            "unchanged": self.unchanged,
            "synced": self.synced,
            "held": self.held,
            "moved_on": self.moved_on,
            "due": self.due,
            "events": self.events,
            "saved": self.saved,
            "duplicates": self.duplicates,
            "dropped": self.dropped,
            "failed": self.failed,
            "errors": self.errors,
            "position": None
            if pos is None
            else {"update_time": pos[0], "app_name": pos[1], "user_id": pos[2], "session_id": pos[3]},
            "started": self.started,
            "finished": self.finished,
        }


def cursor_path(settings: VmemSettings) -> Path:
    """The cursor file: `[tuning] sync_cursor`, else sync.db in vmem's data directory."""
    from veadk_mem.config import data_dir

    given = settings.tuning.sync_cursor
    return Path(given).expanduser() if given else data_dir() / "sync.db"


def cursor_key(store: SessionStore) -> tuple[str, str | None]:
    """The session database as the cursor keys it, and an older key to take over (or None).

    A sqlite file by its absolute, resolved path (`--db-url s.db` from two directories is two
    databases); a server by its URL with the password masked, plus the PostgreSQL schema when one
    is configured. Cursors of earlier versions were keyed by the displayed URL: taken over when it
    named the database unambiguously (a server, an absolute sqlite path), never for a relative one.
    """
    from veadk_mem.sessions.url import plain_url

    db = store.db
    old = store.db.display_url
    path = db.sqlite_path()
    if path is not None:
        key = f"sqlite:{Path(path).expanduser().resolve()}"
        return key, (old if Path(path).expanduser().is_absolute() and old != key else None)
    key = mask_url(plain_url(db.url))
    if db.schema:
        key += f" schema={db.schema}"
    return key, (old if old != key else None)


def systemic(exc: BaseException) -> bool:
    """An error every later session would meet too (a store gone, credentials refused, a rate limit
    or quota still hit after the retries, the ledger or cursor unusable): the batch stops with the
    cursor where it was, so the next run tries the same sessions again. Marked failed instead, they
    would be passed over until an agent changed them."""
    if isinstance(exc, PartialWrite):
        return exc.lost
    return isinstance(exc, StoreUnreachable | StoreAuthError | StoreThrottled | LedgerError | CursorError)


_P = TypeVar("_P")


class _SessionGone(Exception):
    """The session database no longer has the session being read (deleted since it was listed)."""


async def _read_pages(pages: AsyncIterator[_P]) -> AsyncIterator[_P]:
    """`pages` with the session database's NotFound as _SessionGone: a NotFound the long-term store
    raises while a page is saved (VikingDB's missing collection) stays a failure of the save."""
    try:
        async for page in pages:
            yield page
    except NotFound:
        raise _SessionGone from None


class Syncer:
    """One sync scope (session database, --app, --user) over an open store and facade."""

    def __init__(
        self,
        store: SessionStore,
        ltm: LongTermMemory,
        cursor: SyncCursor,
        policy: Any,
        *,
        app: str | None = None,
        user: str | None = None,
        thresholds: Thresholds | None = None,
        page: int = 200,
        overlap: float = 10.0,
        clock: Callable[[], float] = time.time,
        warn: Callable[[str], None] | None = None,
    ) -> None:
        self.store = store
        self.ltm = ltm
        self.cursor = cursor
        self.policy = policy
        self.app = app
        self.user = user
        self.thresholds = thresholds or Thresholds()
        self.page = page
        self.overlap = overlap
        self.clock = clock
        self.warn = warn
        self._changes: Changes | None = None

    @property
    def changes(self) -> Changes:
        if self._changes is None:
            self._changes = self.store.changes()
        return self._changes

    @property
    def scope(self) -> tuple[str, str]:
        """The cursor's scope key: ('' for any app or user)."""
        return (self.app or "", self.user or "")

    async def check_app(self) -> None:
        """NotFound (exit 3) when --app names an app with no session in the database."""
        if self.app is None:
            return
        if not (await self.store.list_sessions(SessionFilter(app=self.app), count_only=True)).total:
            raise NotFound(f"app {self.app!r} has no sessions in {self.store.db.display_url}")

    def start(self) -> tuple[float, str, str, str]:
        """Where a pass lists from: the position less the overlap (commits that land late)."""
        pos = self.cursor.position(*self.scope)
        if pos is None:
            return START
        return (max(pos.update_time - self.overlap, 0.0), "", "", "")

    async def batch(self, after: tuple[float, str, str, str]) -> tuple[SyncBatch, bool]:
        """Sync one page of sessions changed after `after`, then the held sessions now due.
        Returns the batch and whether the listing reached its end."""
        out = SyncBatch()
        found = await self.changes.changed_sessions(after, app=self.app, user=self.user, limit=self.page)
        out.listed = len(found)
        newest: dict[tuple[str, str], float] = {}
        for change in found:
            key = (change.app_name, change.user_id)
            newest[key] = max(newest.get(key, 0.0), change.update_time)
        try:
            for change in found:
                moved_on = newest[(change.app_name, change.user_id)] > change.update_time
                await self._one(change, out, moved_on=moved_on)
            await self._held(out)
        except VmemError as exc:  # the sessions saved before it are saved: the history counts them
            _saved_before(exc, out)
            raise
        if found:
            out.position = found[-1].position
            self.cursor.advance(
                *self.scope,
                found[-1].position,
                sessions=out.synced + out.moved_on + out.due,
                events=out.events,
                memories=out.saved,
                failed=out.failed,
            )
        out.finished = self.clock()
        return out, len(found) < self.page

    async def _one(self, change: Change, out: SyncBatch, *, moved_on: bool) -> None:
        """A listed session: skipped (nothing new), held (below the thresholds) or saved."""
        app, user, sid = change.app_name, change.user_id, change.id
        mark = self.cursor.mark(app, user, sid)
        if mark is not None and mark.seen_update >= change.update_time:  # a held one: `_held` decides
            out.unchanged += 1
            return
        reason = "synced"  # VeADK's first save of a session, or MIN_MESSAGES_THRESHOLD new events
        if mark is not None and mark.bound is not None:
            new = await self.changes.count_after(app, user, sid, mark.bound)
            if new == 0:
                self.cursor.saved(app, user, sid, seen=change.update_time, at=self.clock())
                out.unchanged += 1
                return
            if new < self.thresholds.messages:
                if moved_on or self.cursor.newer_session(app, user, sid, change.update_time):
                    reason = "moved_on"
                elif self.clock() - (mark.last_save or 0.0) >= self.thresholds.seconds:
                    reason = "due"
                else:
                    self.cursor.hold(app, user, sid, seen=change.update_time, since=change.update_time)
                    out.held += 1
                    return
        if await self._save(app, user, sid, change.update_time, mark, out):
            setattr(out, reason, getattr(out, reason) + 1)

    async def _held(self, out: SyncBatch) -> None:
        """Save the held sessions whose time threshold passed or whose user moved on."""
        now = self.clock()
        for mark in self.cursor.held(due_before=now - self.thresholds.seconds, app=self.app, user=self.user):
            moved = (mark.last_save or 0.0) > now - self.thresholds.seconds
            if await self._save(mark.app_name, mark.user_id, mark.session_id, mark.seen_update, mark, out):
                if moved:
                    out.moved_on += 1
                else:
                    out.due += 1

    async def _save(
        self, app: str, user: str, session_id: str, seen: float, mark: SessionMark | None, out: SyncBatch
    ) -> bool:
        """Save the session's events after its bound, page by page, the cursor moved after each page.
        A failure of this session alone is recorded on it (not tried again until it changes); one
        every session would meet (`systemic`) stops the batch."""
        from veadk_mem import events as ev

        bound = mark.bound if mark is not None else None
        try:
            async for page in _read_pages(self.changes.events_after(app, user, session_id, bound, page=self.page)):
                session = ev.Session(
                    id=session_id, app_name=app, user_id=user, state={}, events=page.events, last_update_time=seen
                )
                report = await self.ltm.add_session_to_memory(session, self.policy)
                self.cursor.saved_page(
                    app, user, session_id, seen=seen, bound=page.bound, events=len(page.events), memories=report.saved
                )
                out.events += len(page.events)
                out.saved += report.saved
                out.duplicates += report.duplicates
                out.dropped += report.dropped
        except _SessionGone:  # deleted since it was listed: nothing to save
            self.cursor.saved(app, user, session_id, seen=seen, at=self.clock())
            return False
        except VmemError as exc:
            if systemic(exc):
                raise
            message = f"{app}/{user}/{session_id}: {exc.message}"
            self.cursor.failed(app, user, session_id, seen=seen, error=message)
            out.failed += 1
            out.errors.append(message)
            if self.warn is not None:
                self.warn(message)
            return False
        self.cursor.saved(app, user, session_id, seen=seen, at=self.clock())
        return True

    async def run_once(self, *, stop: Callable[[], bool] = lambda: False) -> SyncBatch:
        """Batches until the listing is caught up (or `stop()` says so between batches); their totals."""
        total = SyncBatch()
        after = self.start()
        while True:
            try:
                batch, done = await self.batch(after)
            except VmemError as exc:
                _saved_before(exc, total)
                _say_what_was_saved(exc)
                raise
            total.add(batch)
            if batch.position is not None:
                after = batch.position
            if done or stop():
                return total

    async def status(self) -> dict[str, Any]:
        """The cursor of this scope, the lag (oldest change not yet synced) and counts."""
        pos = self.cursor.position(*self.scope)
        first = await self.changes.changed_sessions(pos.key if pos else START, app=self.app, user=self.user, limit=1)
        counts = self.cursor.summary(self.app, self.user)
        pending = [t for t in (first[0].update_time if first else None, counts["oldest_held"]) if t is not None]
        oldest = min(pending) if pending else None
        now = self.clock()
        return {
            "database": self.cursor.db,
            "app_name": self.app,
            "user_id": self.user,
            "cursor_file": str(self.cursor.path),
            "position": None
            if pos is None
            else {
                "update_time": pos.update_time,
                "app_name": pos.app_name,
                "user_id": pos.user_id,
                "session_id": pos.session_id,
                "synced_at": pos.synced_at,
            },
            "oldest_unsynced": oldest,
            "lag_seconds": None if oldest is None else max(now - oldest, 0.0),
            "totals": {
                "sessions_synced": pos.sessions if pos else 0,
                "events": pos.events if pos else 0,
                "memories_saved": pos.memories if pos else 0,
                "failed": pos.failed if pos else 0,
            },
            "sessions": {
                "tracked": counts["sessions"],
                "held": counts["held"],
                "failed": counts["failed"],
            },
        }

    async def lag(self) -> float | None:
        """Seconds since the oldest change not yet synced (None: caught up)."""
        return (await self.status())["lag_seconds"]


def _saved_before(exc: VmemError, done: SyncBatch) -> None:
    """Add what `done` saved to `exc.committed`: a pass stopped part-way still changed the store, and
    the history (ops/history.py) records those counts with the failure."""
    committed = dict(exc.committed or {})
    for name, n in (("sessions", done.synced + done.moved_on + done.due), ("memories", done.saved)):
        committed[name] = int(committed.get(name, 0)) + n
    exc.committed = committed


def _say_what_was_saved(exc: VmemError) -> None:
    """Make `exc`'s message say what the pass had saved before it stopped (when anything), so a
    reader does not take the failure for a pass that changed nothing."""
    counts = {k: v for k, v in (exc.committed or {}).items() if k in ("sessions", "memories") and v}
    if counts:
        exc.message = (
            f"{exc.message} -- {summary(counts)} had been saved before it stopped; the next sync goes on from there"
        )
        exc.args = (exc.message,)


def is_outage(exc: BaseException) -> bool:
    """A store that went away (the session database or long-term memory): follow waits for it."""
    if isinstance(exc, PartialWrite):
        return exc.lost
    return isinstance(exc, StoreError) and not isinstance(exc, CursorError)


class SyncJob:
    """A sync as a command runs it: the session store, the facade and the cursor, opened (and
    probed) together; closed and opened again after an outage."""

    def __init__(
        self,
        settings: VmemSettings,
        policy: Any,
        *,
        app: str | None = None,
        user: str | None = None,
        warn: Callable[[str], None] | None = None,
        notice: Callable[[str], None] | None = None,
    ) -> None:
        self.settings = settings
        self.policy = policy
        self.app = app
        self.user = user
        self.warn = warn
        self.notice = notice
        self.syncer: Syncer | None = None

    async def open(self, *, probe: bool = True) -> Syncer:
        """The syncer, its stores open; with `probe`, long-term memory answered once (StoreUnreachable
        when it is down) and the cursor file read once (a damaged one fails before anything is saved)."""
        from veadk_mem.ltm.facade import LongTermMemory
        from veadk_mem.sessions.store import SessionStore

        if self.syncer is not None:
            return self.syncer
        store = SessionStore.from_settings(self.settings)
        await store.open()
        ltm = LongTermMemory.from_settings(self.settings, warn=self.warn, notice=self.notice)
        try:
            key, older = cursor_key(store)
            cursor = SyncCursor(cursor_path(self.settings), key)
            cursor.check()
            if older is not None:
                cursor.adopt(older)
            if probe:
                await ltm.backend_for(self.app).health()
        except BaseException:
            await ltm.close()
            await store.close()
            raise
        tuning = self.settings.tuning
        auto = self.settings.auto_save
        self.syncer = Syncer(
            store,
            ltm,
            cursor,
            self.policy,
            app=self.app,
            user=self.user,
            thresholds=Thresholds(auto.min_messages_threshold, float(auto.min_time_threshold)),
            page=tuning.sync_page,
            overlap=tuning.sync_overlap,
            warn=self.warn,
        )
        return self.syncer

    async def close(self, *, lost: bool = False) -> None:
        """Close what `open` opened; after an outage (`lost`) without waiting on a server that is gone."""
        import contextlib

        syncer, self.syncer = self.syncer, None
        if syncer is None:
            return
        syncer.cursor.close()
        with contextlib.suppress(Exception):
            await syncer.ltm.close()
        if lost:
            with contextlib.suppress(Exception):
                await syncer.store.db.drop_connections()
        with contextlib.suppress(Exception):
            await syncer.store.close()


@dataclass(frozen=True)
class Outage:
    """A follow's store went away (`lost`) or came back (`back`): one of each per outage."""

    kind: str
    message: str
    at: float = field(default_factory=time.time)

    def to_json(self) -> dict[str, Any]:
        return {"event": "outage" if self.kind == "lost" else "reconnected", "message": self.message, "at": self.at}


async def follow(
    job: SyncJob, stopping: Any, *, poll: float = 1.0, poll_max: float = 30.0
) -> Any:  # AsyncIterator[SyncBatch | Outage]
    """Sync batches as agents write, until `stopping` (an asyncio.Event) is set: a pass lists the
    changes since the cursor, batch by batch, each yielded; an idle pass doubles the wait up to
    `poll_max`, a busy one starts over at `poll`. A store that goes away is one `Outage` ("lost"),
    retried with the same backoff, then one "back" when it answers again."""
    import asyncio
    import contextlib

    async def pause(seconds: float) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stopping.wait(), seconds)

    delay = poll
    lost: float | None = None
    while not stopping.is_set():
        busy = False
        try:
            syncer = await job.open()
            after = syncer.start()
            while True:
                batch, done = await syncer.batch(after)
                if lost is not None:
                    yield Outage("back", f"stores reachable again after {time.time() - lost:.0f} s: syncing on")
                    lost = None
                busy = busy or batch.busy
                yield batch
                after = batch.position or after
                if done or stopping.is_set():
                    break
        except Exception as exc:
            if not is_outage(exc):
                raise
            await job.close(lost=True)
            if lost is None:
                lost = time.time()
                message = exc.message if isinstance(exc, VmemError) else str(exc)
                yield Outage("lost", f"{message}; retrying until it is back")
            delay = min(poll_max, max(delay, poll) * 2)
            await pause(delay)
            continue
        delay = poll if busy else min(poll_max, delay * 2)
        await pause(delay)
