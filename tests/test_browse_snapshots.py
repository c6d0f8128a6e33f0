"""SVG snapshots of `vmem browse`'s main screens at 80x24 and 120x40 (issue 47), against a database
google-adk wrote (plus one session imported with fixed event ids, so the event JSON is stable).

Update them with `pytest tests/test_browse_snapshots.py --snapshot-update`, then look at the
pictures (tests/__snapshots__/): a snapshot is reviewed as a picture, not as text.
"""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

import pytest
from sessions_helpers import build, sqlite_url
from test_sessions_import_stream import big_session

from veadk_mem.cli.state import AppState
from veadk_mem.sessions.store import SessionStore, iter_import_records

pytest.importorskip("textual")

from textual.widgets import DataTable

from veadk_mem.cli.browse.tui import BrowseApp, TimelineView

pytestmark = pytest.mark.slow
SIZES = [(80, 24), (120, 40)]


@pytest.fixture
def snap_db(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    url = sqlite_url(tmp_path / "snap.db")
    build(url, {("u1", "s-alpha"): 12, ("u2", "s-gamma"): 6})
    path = tmp_path / "one.jsonl"
    path.write_text(json.dumps(big_session("s-fixed", 40)) + "\n", encoding="utf-8")

    async def go() -> None:
        async with SessionStore(url) as store:
            await store.import_records(iter_import_records(path))

    asyncio.run(go())
    return url


def browser(url: str) -> BrowseApp:
    state = AppState()
    state.use_db_url(url)
    return BrowseApp(state)


async def _listed(pilot: Any) -> None:
    for _ in range(500):
        await pilot.pause(0.02)
        screen = pilot.app.screen
        if screen.query("#sessions") and screen.query_one("#sessions", DataTable).row_count == 3:
            tree = screen.query_one("#scope")
            if len(tree.root.children) == 1 and tree.root.children[0].children:
                await _settled(pilot, screen.query_one("#sessions", DataTable))
                return
    raise AssertionError("the sessions were not listed")


async def _settled(pilot: Any, table: DataTable[Any]) -> None:
    """Until the table's column widths have taken in its rows (DataTable measures them on an idle
    message): under load the screenshot was taken with the widths of the header labels alone
    (`2026-09`, `dem`). Every column as wide as its widest cell, then three polls alike."""
    from rich.text import Text

    seen: list[Any] = []
    for _ in range(500):
        await pilot.pause(0.02)
        rows = [table.get_row_at(i) for i in range(table.row_count)]
        widest = [
            max((Text.from_markup(str(r[i])).cell_len for r in rows), default=0) for i in range(len(table.columns))
        ]
        widths = [c.content_width for c in table.columns.values()]
        if any(w < need for w, need in zip(widths, widest, strict=True)):
            seen.clear()
            continue
        seen.append((table.virtual_size, widths))
        if len(seen) >= 3 and seen[-1] == seen[-2] == seen[-3]:
            return
    raise AssertionError("the sessions table did not settle")


async def _open_fixed(pilot: Any) -> None:
    await _listed(pilot)
    table = pilot.app.screen.query_one("#sessions", DataTable)
    rows = [str(table.get_row_at(i)[0]) for i in range(table.row_count)]
    table.move_cursor(row=rows.index("s-fixed"))
    await pilot.press("enter")
    for _ in range(500):
        await pilot.pause(0.02)
        if pilot.app.screen.query(TimelineView):
            break
    await pilot.press("down", "down", "down")
    await pilot.pause(0.2)


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_sessions_screen(snap_compare: Any, snap_db: str, size: tuple[int, int]) -> None:
    assert snap_compare(browser(snap_db), terminal_size=size, run_before=_listed)


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_timeline_screen(snap_compare: Any, snap_db: str, size: tuple[int, int]) -> None:
    assert snap_compare(browser(snap_db), terminal_size=size, run_before=_open_fixed)


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_delete_question(snap_compare: Any, snap_db: str, size: tuple[int, int]) -> None:
    async def ask(pilot: Any) -> None:
        await _open_fixed(pilot)
        await pilot.press("d")
        await pilot.pause(0.5)

    assert snap_compare(browser(snap_db), terminal_size=size, run_before=ask)


def test_help_screen(snap_compare: Any, snap_db: str) -> None:
    async def helped(pilot: Any) -> None:
        await _listed(pilot)
        await pilot.press("question_mark")
        await pilot.pause(0.2)

    assert snap_compare(browser(snap_db), terminal_size=(80, 24), run_before=helped)
