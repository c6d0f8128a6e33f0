"""`vmem ltm sync`: VeADK's auto-save from outside the agent (the work is in `veadk_mem.ops.sync`).

Thin: parses the options, resolves the policy (a bad one is exit 2 before any store is
touched), runs the job once, as a follower, or reads its status, and renders what it did.
"""

from __future__ import annotations

import time
from typing import Annotated, Any

import typer

from veadk_mem.cli.columns import Column
from veadk_mem.cli.render import counted
from veadk_mem.cli.state import AppState, DbUrlOption, JsonOption, get_state, run
from veadk_mem.errors import BadInput, VmemError
from veadk_mem.ops.history import Change, record
from veadk_mem.ops.sync import Outage, SyncBatch, SyncJob, follow

PROGRESS_EVERY = 10.0  # seconds between follow's progress lines on stderr

TOTAL_COLUMNS = [
    Column("sessions synced", "synced", justify="right"),
    Column("held", "held", justify="right"),
    Column("events", "events", justify="right"),
    Column("memories saved", "saved", justify="right"),
    Column("duplicates", "duplicates", justify="right"),
    Column("dropped", "dropped", justify="right"),
    Column("failed", "failed", justify="right"),
]


def sync(
    ctx: typer.Context,
    app_name: Annotated[
        str | None, typer.Option("--app", "-a", metavar="APP", help="Only this app's sessions (default: every app).")
    ] = None,
    user: Annotated[str | None, typer.Option("--user", "-u", metavar="USER", help="Only this user's sessions.")] = None,
    policy: Annotated[
        str | None,
        typer.Option("--policy", "-p", metavar="POLICY", help="Preset, [policy.NAME], JSON/TOML file or inline JSON."),
    ] = None,
    once: Annotated[bool, typer.Option("--once", help="Sync what changed since the cursor, then exit (cron).")] = False,
    follow_: Annotated[
        bool, typer.Option("--follow", help="Keep syncing as agents write, until SIGTERM or Ctrl-C (a service).")
    ] = False,
    status: Annotated[
        bool, typer.Option("--status", help="Print the cursor, the lag and counts; sync nothing.")
    ] = False,
    db_url: DbUrlOption = None,
    json_flag: JsonOption = False,
) -> None:
    """Save new session events into long-term memory as VeADK's auto-save would.

    Lists the sessions changed since a durable cursor (`config show`: tuning.sync_cursor),
    keeps the events the save policy keeps and saves only memories the store lacks, with
    their source. VeADK's thresholds hold a session still being written (auto_save.*);
    a user's previous session is saved when the user moves on. --once exits when caught
    up; --follow polls, backs off when idle and rides out store outages; --json gives
    one JSON line per batch.
    """
    state = get_state(ctx, json_flag=json_flag)
    if sum((once, follow_, status)) != 1:
        raise BadInput("choose one of --once, --follow and --status")
    state.use_db_url(db_url)
    settings = state.loaded.settings
    resolved = None
    if not status:
        from veadk_mem.ltm.facade import LongTermMemory

        resolved = LongTermMemory.from_settings(settings, warn=state.render.warn).resolve_policy(policy)
    render = state.render
    job = SyncJob(settings, resolved, app=app_name, user=user, warn=render.warn, notice=render.message)
    if status:
        _status(state, job)
    elif once:
        _once(state, job)
    else:
        run(_follow(state, job))


def _status(state: AppState, job: Any) -> None:
    async def go() -> dict[str, Any]:
        try:
            syncer = await job.open(probe=False)
            return dict(await syncer.status())
        finally:
            await job.close()

    report = run(go())
    render = state.render
    if render.json_mode:
        render.json(report)
        return
    pos = report["position"]
    lag = report["lag_seconds"]
    render.fields(
        [
            ("database", report["database"]),
            ("scope", f"app {report['app_name'] or '(any)'}, user {report['user_id'] or '(any)'}"),
            ("cursor file", report["cursor_file"]),
            (
                "position",
                "never synced"
                if pos is None
                else f"{_when(pos['update_time'])} {pos['app_name']}/{pos['user_id']}/{pos['session_id']}",
            ),
            ("last sync", "never" if pos is None else _when(pos["synced_at"])),
            (
                "lag",
                "caught up"
                if lag is None
                else f"{lag:.1f} s (oldest unsynced change {_when(report['oldest_unsynced'])})",
            ),
            ("synced", _totals_line(report)),
        ]
    )


def _when(epoch: float) -> str:
    from datetime import UTC, datetime

    return datetime.fromtimestamp(epoch, UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


def _totals_line(report: dict[str, Any]) -> str:
    t, s = report["totals"], report["sessions"]
    return (
        f"{counted(t['sessions_synced'], 'session')}, {counted(t['events'], 'event')}, "
        f"{counted(t['memories_saved'], 'memory')}; {s['held']} held, {s['failed']} failed "
        f"of {counted(s['tracked'], 'session')} tracked"
    )


def _stop_on_signals(stopping: Any) -> None:
    """SIGTERM and Ctrl-C end the sync after the batch in flight (exit 0); a second Ctrl-C interrupts."""
    import asyncio
    import contextlib
    import signal

    loop = asyncio.get_running_loop()

    def stop(sig: int) -> None:
        stopping.set()
        loop.remove_signal_handler(sig)

    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, stop, sig)


def _once(state: AppState, job: Any) -> None:
    """One pass; its history entry is failed (exit 1) when a session failed or the pass stopped."""

    async def go() -> tuple[Any, dict[str, Any]]:
        import asyncio

        stopping = asyncio.Event()
        _stop_on_signals(stopping)
        try:
            syncer = await job.open()
            await syncer.check_app()
            totals = await syncer.run_once(stop=stopping.is_set)
            return totals, dict(await syncer.status())
        finally:
            await job.close()

    with state.recording("ltm sync", job.settings.long_term_memory.backend) as change:
        try:
            totals, report = run(go())
        except VmemError as exc:  # what it saved first is in exc.committed; the entry names the error
            change.detail("error", exc.message)
            raise
        _count(change, totals)
        _render_once(state, totals, report)
        if totals.failed:  # a partial pass: recorded failed with its exit code, each failed session named
            change.detail("failed", totals.errors)
            raise typer.Exit(1)


def _render_once(state: AppState, totals: SyncBatch, report: dict[str, Any]) -> None:
    render = state.render
    if render.json_mode:
        render.json({"totals": totals.to_json(), "status": report})
        return
    render.table([totals.to_json()], TOTAL_COLUMNS, to_stderr=True)
    lag = report["lag_seconds"]
    held = report["sessions"]["held"]
    if held:
        render.message(f"{counted(held, 'session')} held by VeADK's thresholds: saved by a later sync")
    if lag is not None:
        render.message(f"lag: {lag:.1f} s")


async def _follow(state: AppState, job: Any) -> None:
    import asyncio
    import contextlib

    render = state.render
    tuning = job.settings.tuning
    stopping = asyncio.Event()
    _stop_on_signals(stopping)
    totals = SyncBatch()
    journal = _Journal(state, job)
    said = time.monotonic()
    waiting = False
    try:
        async for item in follow(job, stopping, poll=tuning.sync_poll, poll_max=tuning.sync_poll_max):
            if isinstance(item, Outage):
                if render.json_mode:
                    render.jsonl([item.to_json()])
                else:
                    (render.warn if item.kind == "lost" else render.message)(item.message)
                continue
            totals.add(item)
            journal.add(item)
            if render.json_mode and (item.busy or item.errors):
                render.jsonl([{"event": "batch", **item.to_json()}])
            if not waiting and job.app and not totals.listed and job.syncer is not None:
                waiting = True
                render.message(f"app {job.app!r}: no sessions yet; waiting for them")
            if time.monotonic() - said >= PROGRESS_EVERY:
                said = time.monotonic()
                lag = None
                with contextlib.suppress(VmemError):  # a store gone meanwhile: the next poll says so
                    lag = await job.syncer.lag() if job.syncer is not None else None
                render.message(_progress(totals, lag))
    finally:
        journal.flush()
        await job.close()
    if render.json_mode:
        render.jsonl([{"event": "stopped", **totals.to_json()}])
    else:
        render.message(f"stopped: {_progress(totals, None)}")


def _progress(totals: Any, lag: float | None) -> str:
    line = (
        f"synced {counted(totals.synced + totals.moved_on + totals.due, 'session')}, "
        f"saved {counted(totals.saved, 'memory')}, {totals.held} held"
    )
    if lag is not None:
        line += f", lag {lag:.1f} s"
    return line


def _count(change: Any, batch: SyncBatch) -> None:
    """A sync's history counts: the sessions whose events it saved and the memories stored."""
    change.count(sessions=batch.synced + batch.moved_on + batch.due, memories=batch.saved)


class _Journal:
    """A follow's history: one entry a minute at most while it saves, and the rest when it stops
    (an entry per poll would fill the history of a busy service with rows of one memory)."""

    EVERY = 60.0

    def __init__(self, state: AppState, job: Any) -> None:
        self.state, self.job = state, job
        self.pending = SyncBatch()
        self.since = time.monotonic()

    def add(self, batch: SyncBatch) -> None:
        self.pending.add(batch)
        if time.monotonic() - self.since >= self.EVERY:
            self.flush()

    def flush(self) -> None:
        change = Change("ltm sync", self.job.settings.long_term_memory.backend)
        _count(change, self.pending)
        if change.changed:
            settings = self.state.loaded.settings.history
            record(settings, change, argv=self.state.argv or ["vmem"], warn=self.state.render.warn)
        self.pending, self.since = SyncBatch(), time.monotonic()
