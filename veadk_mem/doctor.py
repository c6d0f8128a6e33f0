"""Reachability checks behind `vmem doctor`: one per configured store, none raising."""

from __future__ import annotations

import time
from typing import Any

from veadk_mem.check import Check
from veadk_mem.config import VmemSettings, mask_url
from veadk_mem.errors import VmemError

__all__ = ["Check", "check_session_db", "run_checks"]


async def check_session_db(settings: VmemSettings) -> Check:
    """Connect to the session database and run one trivial query."""
    from veadk_mem.sessions.url import given_db_url, session_db_url, sqlite_file

    name = f"short_term_memory ({settings.short_term_memory.backend})"
    try:
        url = session_db_url(settings)
    except VmemError as exc:
        return Check(name, "skip" if exc.exit_code == 4 else "fail", exc.message)
    from sqlalchemy import text
    from sqlalchemy.ext.asyncio import create_async_engine

    shown = given_db_url(settings, url)  # as the user named it, not the driver URL
    path = sqlite_file(url)
    if path is not None:
        from pathlib import Path

        if not Path(path).exists():  # connecting would create an empty file: report instead
            return Check(name, "fail", f"{mask_url(shown)}: no such sqlite file (VeADK creates it on first use)")
        url = f"sqlite+aiosqlite:///file:{path}?mode=ro&uri=true"
    started = time.perf_counter()
    engine = create_async_engine(url)
    try:
        async with engine.connect() as conn:
            await conn.execute(text("SELECT 1"))
            layout = await conn.run_sync(_layout)
    except Exception as exc:  # any driver error is a failed check
        return Check(name, "fail", f"{mask_url(shown)}: {type(exc).__name__}: {_first_line(exc)}")
    finally:
        await engine.dispose()
    took = (time.perf_counter() - started) * 1000
    return Check(name, "ok", f"{mask_url(shown)}: {layout} ({took:.0f} ms)")


def _layout(sync_conn: Any) -> str:
    """The database's session layout, with the ADK releases it corresponds to (v0 column sets)."""
    from veadk_mem.sessions.layout import build_tables, inspect_layout

    try:
        layout, columns = inspect_layout(sync_conn)
    except ValueError as exc:
        return str(exc)
    return build_tables(layout, columns).describe()


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0][:200] if text else ""


async def run_checks(settings: VmemSettings) -> list[Check]:
    """Every check the configuration calls for, in a stable order."""
    from veadk_mem.ltm.doctor import check_ltm

    return [await check_session_db(settings), await check_ltm(settings)]
