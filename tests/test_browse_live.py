"""`vmem browse` (issue 47 items 2-4): `f` follows a session while real google-adk appends to it,
a memory is deleted only after its plan and a yes, and the search box's mode is the mode searched."""

from __future__ import annotations

from typing import Any

import pytest
from sessions_helpers import APP, adk_service, sqlite_url
from test_browse import SESSIONS, browser, listed, memories_of_u1, status, until

pytest.importorskip("textual")  # CI installs every extra: a skip there fails the run (skip_policy)

from google.adk.events import Event
from google.genai import types
from textual.widgets import DataTable, Select

from veadk_mem.cli.browse.tui import Confirm, MemoriesScreen, SessionScreen, TimelineView
from veadk_mem.config import load_settings
from veadk_mem.ltm.facade import LongTermMemory


@pytest.fixture(params=["sqlite", "postgres"])
def live_db(request: pytest.FixtureRequest, tmp_path: Any) -> str:
    from sessions_helpers import build

    url = sqlite_url(tmp_path / "adk.db") if request.param == "sqlite" else str(request.getfixturevalue("pg_url"))
    build(url, SESSIONS)
    return url


@pytest.fixture
def one_db(tmp_path: Any) -> str:
    from sessions_helpers import build

    url = sqlite_url(tmp_path / "adk.db")
    build(url, SESSIONS)
    return url


@pytest.fixture
def seeded(monkeypatch: pytest.MonkeyPatch) -> None:
    """Three memories of u1 in the local store, with the deterministic embedder (as test_browse's)."""
    from test_ltm_cli import seed

    monkeypatch.setenv("MODEL_EMBEDDING_PROVIDER", "hash")
    seed({"u1": [("s1", "I am allergic to peanuts"), ("s2", "I like trains"), ("s2", "I live in Hangzhou")]}, APP)


async def adk_append(url: str, user: str, sid: str, text: str) -> None:
    """One user turn appended by ADK's own DatabaseSessionService, as a live agent does."""
    service = adk_service(url)
    try:
        session = await service.get_session(app_name=APP, user_id=user, session_id=sid)
        assert session is not None
        content = types.Content(role="user", parts=[types.Part(text=text)])
        await service.append_event(session, Event(author="user", invocation_id="live", content=content))
    finally:
        await service.close()


def timeline_count(app: Any) -> int:
    view = app.screen.query(TimelineView)
    screen = app.screen
    if not view or not isinstance(screen, SessionScreen) or screen.timeline is None:
        return -1
    return int(screen.timeline.count)


@pytest.mark.slow  # a Textual app per test: seconds each
async def test_f_follows_the_session_as_adk_appends_and_f_again_stops(live_db: str) -> None:
    app = browser(live_db)
    async with app.run_test(size=(120, 40)) as pilot:
        ids = await listed(pilot, app, 3)
        app.screen.query_one("#sessions", DataTable).move_cursor(row=ids.index("s-beta"))
        await pilot.press("enter")
        await until(pilot, lambda: timeline_count(app) == SESSIONS[("u1", "s-beta")], "the 3-event timeline")
        await until(pilot, lambda: "3 events; updated" in status(app), "the open's own status line")
        await pilot.press("f")
        await until(pilot, lambda: getattr(app.screen, "watcher", None) is not None, "follow started")
        await adk_append(live_db, "u1", "s-beta", "a live turn")
        await until(pilot, lambda: timeline_count(app) == 4, "the appended event in the timeline", timeout=30)
        screen = app.screen
        assert isinstance(screen, SessionScreen) and screen.timeline is not None
        assert "a live turn" in screen.timeline.row(3).json
        await pilot.press("f")
        await until(pilot, lambda: getattr(app.screen, "watcher", 0) is None, "follow stopped")
        assert "follow: stopped" in status(app)
        await adk_append(live_db, "u1", "s-beta", "after the stop")
        await pilot.pause(2.0)  # the watcher polls every 0.5 s: four polls would have shown it
        assert timeline_count(app) == 4


@pytest.mark.slow
async def test_a_memory_is_deleted_only_after_its_plan_and_a_yes(one_db: str, seeded: None) -> None:
    app = browser(one_db, app_name=APP, user_id="u1")
    async with app.run_test(size=(120, 40)) as pilot:
        screen = await memories_of_u1(pilot, app)
        await until(pilot, lambda: len(screen.rows) == 3, "three memories")
        doomed = screen.rows[0]
        await pilot.press("d")
        dialog = await until(pilot, lambda: isinstance(app.screen, Confirm) and app.screen, "the question")
        assert doomed.id in dialog.plan and "1 memory" in dialog.question
        await pilot.press("n")
        await until(pilot, lambda: "nothing was deleted" in status(app), "the refusal said")
        ltm = LongTermMemory.from_settings(load_settings().settings)
        kept = {m["id"] for m in await ltm.list_memories(user_id="u1", app_name=APP)}
        assert doomed.id in kept and len(kept) == 3
        await pilot.press("d")
        await until(pilot, lambda: isinstance(app.screen, Confirm), "the question again")
        await pilot.press("y")
        await until(pilot, lambda: isinstance(app.screen, MemoriesScreen) and len(screen.rows) == 2, "two left")
    left = {m["id"] for m in await ltm.list_memories(user_id="u1", app_name=APP)}
    assert left == kept - {doomed.id}
    from veadk_mem.ops.history import HistoryLog, default_path

    [entry] = HistoryLog(default_path()).entries()
    assert (entry["command"], entry["counts"], entry["ids"]) == ("ltm delete", {"memories": 1}, [doomed.id])


@pytest.mark.slow
@pytest.mark.parametrize(("mode", "kind"), [("vector", "cosine"), ("keyword", "bm25"), ("hybrid", "fused")])
async def test_the_search_box_searches_by_the_mode_chosen(one_db: str, seeded: None, mode: str, kind: str) -> None:
    app = browser(one_db, app_name=APP, user_id="u1")
    async with app.run_test(size=(120, 40)) as pilot:
        screen = await memories_of_u1(pilot, app)
        await until(pilot, lambda: len(screen.rows) == 3, "three memories")
        screen.query_one("#mode", Select).value = mode
        await pilot.press("slash", *"peanuts", "enter")
        await until(pilot, lambda: screen.ranked, "a search answer")
        assert screen.rows and {r.score_kind for r in screen.rows} == {kind}
        assert f"by {mode}" in status(app)
