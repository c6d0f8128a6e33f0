"""Reachability checks behind `vmem doctor`: one per configured store, none raising."""

from __future__ import annotations

import time

from veadk_mem.check_outcome import Check
from veadk_mem.config import VmemSettings, mask_url
from veadk_mem.errors import VmemError
from veadk_mem.ltm.doctor import check_ltm
from veadk_mem.sessions.indexes import check_indexes

__all__ = ["Check", "check_session_db", "run_checks"]


async def check_session_db(settings: VmemSettings) -> Check:
    """Connect to the session database and run one trivial query."""
    from veadk_mem.sessions.url import (
        configured_dialect,
        given_db_url,
        read_only_sqlite_url,
        session_db_url,
        sqlite_file,
        url_dialect,
    )

    try:
        url = session_db_url(settings)
    except VmemError as exc:  # named by the database the URL names, as written (--db-url wins)
        name = f"short_term_memory ({configured_dialect(settings)})"
        return Check(name, "skip" if exc.exit_code == 4 else "fail", exc.message)
    from veadk_mem.sessions.store import SessionStore

    # the kind of database actually checked (--db-url may name another than the configured backend)
    name = f"short_term_memory ({url_dialect(url)})"
    shown = mask_url(given_db_url(settings, url))  # as the user named it, not the driver URL
    path = sqlite_file(url)
    given = url  # the store's own URL: vmem's reads create and change nothing in an existing file
    if path is not None:
        from pathlib import Path

        if not Path(path).exists():  # connecting would create an empty file: report instead
            return Check(name, "fail", f"{shown}: no such sqlite file (VeADK creates it on first use)", store=shown)
        if not Path(path).is_file():  # a directory, or a FIFO whose open would block
            return Check(name, "fail", f"{shown}: not a regular file, expected a sqlite file", store=shown)
        url = read_only_sqlite_url(path)
    started = time.perf_counter()
    try:
        health = await SessionStore(url).db.health()
    except Exception as exc:  # any driver error is a failed check, said as every session command says it
        took = (time.perf_counter() - started) * 1000
        return Check(name, "fail", _said(exc, shown, url), store=shown, latency_ms=took)
    counts = health.counts
    facts = health.as_facts()
    orphans = ""
    if counts:
        try:
            by_app = await _orphans_by_app(given)
        except Exception as exc:  # the tables were read just now: name it, as any driver error
            took = (time.perf_counter() - started) * 1000
            return Check(name, "fail", _said(exc, shown, url), store=shown, latency_ms=took)
        facts["orphan_events"] = by_app
        orphans = _orphan_note(by_app)
    took = (time.perf_counter() - started) * 1000
    held = f", {counts['sessions']:,} sessions, {counts['events']:,} events" if counts else ""
    detail = f"{shown}: {health.layout_description}{held} ({took:.0f} ms){orphans}"
    # a layout neither vmem nor ADK can open (an unknown schema_version, a foreign `sessions`) fails
    status = "ok" if health.layout is not None else "fail"
    return Check(name, status, detail, store=shown, latency_ms=took, facts=facts)


async def _orphans_by_app(url: str) -> dict[str, int]:
    """Event rows without a session row, per app (`StoredRows.orphan_events`)."""
    from veadk_mem.sessions.store import SessionStore

    by_app: dict[str, int] = {}
    async with SessionStore(url) as store:
        for key, n in (await store.rows.orphan_events()).items():
            by_app[key.app_name] = by_app.get(key.app_name, 0) + n
    return dict(sorted(by_app.items()))


def _orphan_note(by_app: dict[str, int]) -> str:
    """What doctor says of event rows without a session, and how to remove them; "" when there are none."""
    if not by_app:
        return ""
    total = sum(by_app.values())
    apps = ", ".join(f"{app} {n:,}" for app, n in by_app.items())
    return (
        f"; {total:,} event rows without a session ({apps}): a killed import's staging, which ADK hands "
        "to a session later created under the same id; `vmem forget USER` or `vmem session delete APP USER ID` "
        "removes them, or import the file again"
    )


def _said(exc: BaseException, shown: str, url: str) -> str:
    """A driver's failure as the session commands report it (`describe_db_error`: authentication
    failed, cannot connect ...), its hint after a semicolon; never the driver's raw wrapper."""
    from veadk_mem.sessions.dberrors import describe_db_error

    try:
        from sqlalchemy.engine import make_url

        password = str(make_url(url).password or "")
    except Exception:  # a URL the driver took cannot fail here; be safe all the same
        password = ""
    err = describe_db_error(exc, shown, password)
    return f"{err.message}; hint: {err.hint}" if err.hint else err.message


async def run_checks(settings: VmemSettings) -> list[Check]:
    """Every check the configuration calls for, in a stable order."""

    sessions = await check_session_db(settings)
    checks = [sessions, await check_ltm(settings)]
    if sessions.status == "ok":  # the indexes ADK's queries need: a row of its own, last
        indexes = await check_indexes(settings)
        checks += [indexes] if indexes is not None else []
    return checks
