"""`vmem browse` (issue 47) driven by Textual's headless pilot against databases google-adk wrote:
navigation, the filter boxes, a large session read a page at a time, delete with its plan and
question (and --read-only refusing), export, memory search; and the command's own edges (the
missing extra, no Textual import anywhere else)."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from sessions_helpers import APP, build, sqlite_url
from test_sessions_import_stream import big_session
from typer.testing import CliRunner

from veadk_mem.cli.app import app as cli
from veadk_mem.cli.state import AppState
from veadk_mem.errors import NotFound
from veadk_mem.sessions.store import SessionStore, iter_import_records

pytest.importorskip("textual")  # CI installs every extra: a skip there fails the run (skip_policy)

from textual.widgets import DataTable, Input

from veadk_mem.cli.browse import data
from veadk_mem.cli.browse.tui import BrowseApp, Confirm, MemoriesScreen, SessionScreen, StatusBar, TimelineView

SESSIONS = {("u1", "s-alpha"): 12, ("u1", "s-beta"): 3, ("u2", "s-gamma"): 6}


@pytest.fixture(params=["sqlite", "postgres"])
def db(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A database google-adk's DatabaseSessionService wrote: three sessions of two users."""
    url = sqlite_url(tmp_path / "adk.db") if request.param == "sqlite" else str(request.getfixturevalue("pg_url"))
    build(url, SESSIONS)
    return url


@pytest.fixture
def sqlite_db(tmp_path: Path) -> str:
    url = sqlite_url(tmp_path / "adk.db")
    build(url, SESSIONS)
    return url


BIG = 5 * data.EVENT_PAGE + 17


@pytest.fixture
def big_db(sqlite_db: str, tmp_path: Path) -> str:
    """ADK's three sessions and one of BIG events, written by `session import` (the rows ADK writes)."""
    path = tmp_path / "big.jsonl"
    path.write_text(json.dumps(big_session("s-big", BIG)) + "\n", encoding="utf-8")

    async def go() -> None:
        async with SessionStore(sqlite_db) as store:
            await store.import_records(iter_import_records(path))

    asyncio.run(go())
    return sqlite_db


@pytest.fixture
def evil_db(tmp_path: Path) -> str:
    """A session whose user and id hold terminal escape sequences, as ADK stores them."""
    url = sqlite_url(tmp_path / "evil.db")
    build(url, {("u\x1b]0;pwned\x07", "s\x1b[2J"): 2})
    return url


@pytest.fixture
def memories(monkeypatch: pytest.MonkeyPatch) -> None:
    """Three memories of u1 in the local store, with the deterministic embedder."""
    from test_ltm_cli import seed

    monkeypatch.setenv("MODEL_EMBEDDING_PROVIDER", "hash")
    seed({"u1": [("s1", "I am allergic to peanuts"), ("s2", "I like trains"), ("s2", "I live in Hangzhou")]}, APP)


def browser(url: str, **kw: Any) -> BrowseApp:
    state = AppState()
    state.use_db_url(url)
    return BrowseApp(state, **kw)


async def until(pilot: Any, ok: Callable[[], Any], what: str, timeout: float = 15.0) -> Any:
    """Let the app run until `ok()` is true (the reads are workers)."""
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout
    while loop.time() < end:
        await pilot.pause(0.02)
        value = ok()
        if value:
            return value
    raise AssertionError(f"timed out waiting for {what}")


def found(app: BrowseApp, selector: Any) -> Any:
    """The first widget on the screen that matches, or None."""
    nodes = app.screen.query(selector)
    return nodes.first() if nodes else None


def table_ids(app: BrowseApp) -> list[str]:
    table = app.screen.query_one("#sessions", DataTable)
    return [str(table.get_row_at(i)[0]).removeprefix("* ") for i in range(table.row_count)]


def status(app: BrowseApp) -> str:
    return str(app.screen.query_one(StatusBar).render())


async def listed(pilot: Any, app: BrowseApp, n: int) -> list[str]:
    await until(pilot, lambda: len(table_ids(app)) == n, f"{n} sessions listed")
    return table_ids(app)


@pytest.mark.slow  # a Textual app per test: seconds each
async def test_navigation_sessions_to_timeline_to_event_json(db: str) -> None:
    app = browser(db)
    async with app.run_test(size=(120, 40)) as pilot:
        ids = await listed(pilot, app, 3)
        assert set(ids) == {"s-alpha", "s-beta", "s-gamma"}
        async with SessionStore(db) as store:  # newest first, as `session list` orders them
            assert ids == [s.id for s in await store.list_sessions()]
        table = app.screen.query_one("#sessions", DataTable)
        table.move_cursor(row=ids.index("s-alpha"))
        await pilot.press("enter")
        view = await until(pilot, lambda: found(app, TimelineView), "the timeline")
        assert isinstance(app.screen, SessionScreen) and view.timeline.count == 12
        await pilot.press("down", "down")
        await until(pilot, lambda: "event #3 of 12" in str(app.screen.query_one("#json").render()), "event 3")
        async with SessionStore(db) as store:
            whole = json.loads("".join([p async for p in store.session_json(APP, "u1", "s-alpha")]))
        assert json.loads(view.timeline.row(2).json) == whole["events"][2]  # what `session get --json` prints
        assert view.timeline.row(2).kind == "function_call" and "lookup(" in view.timeline.row(2).text
        assert view.timeline.row(1).delta.startswith("turn=1")
        await pilot.press("s")  # the merged state
        shown = str(app.screen.query_one("#json").render())
        assert '"app:region": "cn"' in shown and '"user:lang": "zh"' in shown
        await pilot.press("escape")
        await until(pilot, lambda: not isinstance(app.screen, SessionScreen), "back to the list")
        await pilot.press("q")


@pytest.mark.slow  # a Textual app per test: seconds each
async def test_the_filter_box_and_the_time_filter(sqlite_db: str) -> None:
    app = browser(sqlite_db)
    async with app.run_test(size=(100, 30)) as pilot:
        await listed(pilot, app, 3)
        await pilot.press("slash")
        await pilot.press(*"u2")
        assert await listed(pilot, app, 1) == ["s-gamma"]
        app.screen.query_one("#filter", Input).value = "alp"
        assert await listed(pilot, app, 1) == ["s-alpha"]
        app.screen.query_one("#filter", Input).value = ""
        await listed(pilot, app, 3)
        await pilot.press("enter")  # back to the list
        await pilot.press("t", *"2099-01-01", "enter")  # nothing updated since then
        await listed(pilot, app, 0)
        since = app.screen.query_one("#since", Input)
        since.value = ""
        await pilot.press("t", "enter")
        await listed(pilot, app, 3)


@pytest.mark.slow  # a Textual app per test: seconds each
async def test_a_scope_from_the_apps_tree_and_a_fixed_user(sqlite_db: str) -> None:
    app = browser(sqlite_db, user_id="u1")
    async with app.run_test(size=(100, 30)) as pilot:
        assert sorted(await listed(pilot, app, 2)) == ["s-alpha", "s-beta"]


@pytest.mark.slow  # a Textual app per test: seconds each
async def test_a_large_session_is_read_a_page_at_a_time(big_db: str) -> None:
    n, sqlite_db = BIG, big_db
    app = browser(sqlite_db)
    async with app.run_test(size=(100, 30)) as pilot:
        ids = await listed(pilot, app, 4)
        app.screen.query_one("#sessions", DataTable).move_cursor(row=ids.index("s-big"))
        await pilot.press("enter")
        view = await until(pilot, lambda: found(app, TimelineView), "the timeline")
        timeline = view.timeline
        assert timeline.count == n and list(timeline.pages) == [0] and timeline.reads == 1  # one page, not all
        await pilot.press("end")
        await until(pilot, lambda: timeline.row(n - 1) is not None, "the last page")
        assert list(timeline.pages) == [0, 5]  # the pages between were never read
        shown = f"event #{n} of {n:,}"  # the detail pane follows once the page's rows are in
        await until(pilot, lambda: shown in str(app.screen.query_one("#json").render()), "the last event's JSON")
        await pilot.press("home", *["pagedown"] * 12)  # 240 rows down: page 1 comes into view
        await until(pilot, lambda: 1 in timeline.pages, "page 1")
        async with SessionStore(sqlite_db) as store:
            whole = json.loads("".join([p async for p in store.session_json(APP, "u-big", "s-big")]))
        for i in (0, data.EVENT_PAGE - 1, data.EVENT_PAGE, n - 1):
            assert json.loads(timeline.row(i).json) == whole["events"][i]
        assert 2 not in timeline.pages and 3 not in timeline.pages


@pytest.mark.slow  # a Textual app per test: seconds each
async def test_delete_shows_the_plan_and_asks(db: str) -> None:
    app = browser(db)
    async with app.run_test(size=(120, 40)) as pilot:
        ids = await listed(pilot, app, 3)
        app.screen.query_one("#sessions", DataTable).move_cursor(row=ids.index("s-beta"))
        await pilot.press("d")
        dialog = await until(pilot, lambda: isinstance(app.screen, Confirm) and app.screen, "the question")
        assert "to delete" in dialog.plan and "s-beta" in dialog.plan and "1 session, 3 events" in dialog.plan
        assert dialog.question == "Delete 1 session and 3 events?"
        await pilot.press("n")
        await until(pilot, lambda: "nothing was deleted" in status(app), "the refusal said")
        async with SessionStore(db) as store:
            await store.get_summary(APP, "u1", "s-beta")  # still there
        await pilot.press("d")
        await until(pilot, lambda: isinstance(app.screen, Confirm), "the question again")
        await pilot.press("y")
        assert sorted(await listed(pilot, app, 2)) == ["s-alpha", "s-gamma"]
    async with SessionStore(db) as store:
        with pytest.raises(NotFound):
            await store.get_summary(APP, "u1", "s-beta")
    from veadk_mem.ops.history import HistoryLog, default_path

    [entry] = HistoryLog(default_path()).entries()  # the refusal recorded nothing; the delete, once
    assert (entry["command"], entry["counts"], entry["ids"]) == (
        "session delete",
        {"sessions": 1, "events": 3},
        [f"{APP}/u1/s-beta"],
    )


@pytest.mark.slow  # a Textual app per test: seconds each
async def test_read_only_refuses_every_action(sqlite_db: str, tmp_path: Path) -> None:
    app = browser(sqlite_db, read_only=True)
    async with app.run_test(size=(100, 30)) as pilot:
        await listed(pilot, app, 3)
        for key in ("d", "e"):
            await pilot.press(key)
            await pilot.pause(0.1)
            assert not isinstance(app.screen, Confirm) and "read-only" in status(app)
        await pilot.press("enter")
        await until(pilot, lambda: found(app, TimelineView), "the timeline")
        await pilot.press("d")
        await pilot.pause(0.1)
        assert isinstance(app.screen, SessionScreen) and "read-only" in status(app)
    async with SessionStore(sqlite_db) as store:
        assert len(await store.list_sessions()) == 3


@pytest.mark.slow  # a Textual app per test: seconds each
async def test_export_writes_what_session_export_writes_for_them(sqlite_db: str, tmp_path: Path) -> None:
    out = tmp_path / "picked.jsonl"
    app = browser(sqlite_db)
    async with app.run_test(size=(120, 40)) as pilot:
        ids = await listed(pilot, app, 3)
        app.screen.query_one("#sessions", DataTable).move_cursor(row=ids.index("s-alpha"))
        await pilot.press("space")  # marked, and the cursor moves on
        app.screen.query_one("#sessions", DataTable).move_cursor(row=ids.index("s-gamma"))
        await pilot.press("space", "e")
        path = await until(pilot, lambda: found(app, "#path"), "the file question")
        path.value = str(out)
        await pilot.press("enter")
        dialog = await until(pilot, lambda: isinstance(app.screen, Confirm) and app.screen, "the plan")
        assert "2 sessions, 18 events" in dialog.plan
        await pilot.press("y")
        await until(pilot, lambda: "exported 2 sessions" in status(app), "the export")
    async with SessionStore(sqlite_db) as store:
        every = "".join([p async for p in store.export_jsonl()])
    got = out.read_text(encoding="utf-8").splitlines()
    kept = {json.loads(line).get("id") for line in got} - {None}
    assert kept == {"s-alpha", "s-gamma"}
    assert all(line in every.splitlines() for line in got)  # byte for byte the lines `session export` writes
    kinds = sorted(json.loads(line).get("kind", "session") for line in got)
    assert kinds == ["app_state", "session", "session", "session_times", "session_times", "user_state", "user_state"]


@pytest.mark.slow  # a Textual app per test: seconds each
async def memories_of_u1(pilot: Any, app: BrowseApp) -> MemoriesScreen:
    """From the sessions list (u1's two sessions) to the user's memories screen, by its key."""
    await listed(pilot, app, 2)
    await pilot.press("m")
    screen: MemoriesScreen = await until(
        pilot, lambda: isinstance(app.screen, MemoriesScreen) and app.screen, "memories"
    )
    return screen


@pytest.mark.slow  # a Textual app per test: seconds each
async def test_memories_list_and_search_with_rank_score_and_source(sqlite_db: str, memories: None) -> None:
    app = browser(sqlite_db, app_name=APP, user_id="u1")
    async with app.run_test(size=(120, 40)) as pilot:
        screen = await memories_of_u1(pilot, app)
        await until(pilot, lambda: len(screen.rows) == 3, "three memories")
        assert "newest first" in status(app)
        await pilot.press("slash", *"peanuts allergic", "enter")
        await until(pilot, lambda: screen.ranked, "a search answer")
        assert [r.rank for r in screen.rows] == list(range(1, len(screen.rows) + 1))
        assert "peanuts" in screen.rows[0].text and screen.rows[0].score is not None
        assert screen.rows[0].score_kind in ("fused", "cosine", "bm25")
        await pilot.press("enter")
        assert "session: s1" in str(screen.query_one("#text").render())  # what the store's fields hold


@pytest.mark.slow
async def test_a_memory_shows_its_source_and_opens_the_session_it_came_from(
    sqlite_db: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Memories `ltm save --from-store` made carry their source (#42); `o` opens that session."""
    monkeypatch.setenv("MODEL_EMBEDDING_PROVIDER", "hash")
    args = ["ltm", "save", "--from-store", APP, "u1", "s-alpha", "--policy", "all", "--db-url", sqlite_db]
    saved = await asyncio.to_thread(CliRunner().invoke, cli, args)  # the command runs its own loop
    assert saved.exit_code == 0, saved.output
    app = browser(sqlite_db, app_name=APP, user_id="u1")
    async with app.run_test(size=(120, 40)) as pilot:
        screen = await memories_of_u1(pilot, app)
        await until(pilot, lambda: screen.rows, "the memories")
        await pilot.press("enter")
        shown = str(screen.query_one("#text").render())
        assert "session: s-alpha" in shown and "policy: all" in shown and "events: " in shown, shown
        await pilot.press("o")
        opened = await until(pilot, lambda: isinstance(app.screen, SessionScreen) and app.screen, "its session")
        assert (opened.summary.app_name, opened.summary.user_id, opened.summary.id) == (APP, "u1", "s-alpha")


@pytest.mark.slow
async def test_a_memory_whose_session_is_gone_says_so_in_one_line(sqlite_db: str, memories: None) -> None:
    app = browser(sqlite_db, app_name=APP, user_id="u1")
    async with app.run_test(size=(120, 40)) as pilot:
        screen = await memories_of_u1(pilot, app)
        await until(pilot, lambda: len(screen.rows) == 3, "three memories")
        await pilot.press("o")  # the seeded memories name sessions s1 / s2, which this database lacks
        await until(pilot, lambda: "not found" in status(app) or "no session" in status(app), "one status line")
        assert isinstance(app.screen, MemoriesScreen)


def test_a_missing_extra_is_exit_4_with_the_install_line(monkeypatch: pytest.MonkeyPatch, sqlite_db: str) -> None:
    monkeypatch.setitem(sys.modules, "textual", None)  # what find_spec reports for a package not installed
    result = CliRunner().invoke(cli, ["browse", "--db-url", sqlite_db])
    assert result.exit_code == 4
    assert "textual is not installed" in result.stderr and "pip install 'veadk-mem[tui]'" in result.stderr


def test_no_other_command_imports_textual() -> None:
    code = (
        "import sys, contextlib, io\n"
        "import veadk_mem.cli.app as a\n"
        "assert 'textual' not in sys.modules, 'import'\n"
        "with contextlib.redirect_stdout(io.StringIO()), contextlib.suppress(SystemExit):\n"
        "    a.app(['--help'], prog_name='vmem')\n"
        "with contextlib.redirect_stdout(io.StringIO()), contextlib.suppress(SystemExit):\n"
        "    a.app(['browse', '--help'], prog_name='vmem')\n"
        "assert not [m for m in sys.modules if m.split('.')[0] == 'textual'], '--help'\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr


def test_the_tui_extra_pins_textual() -> None:
    import tomllib

    root = Path(__file__).resolve().parents[1]
    extras = tomllib.loads((root / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    [pin] = extras["tui"]
    assert pin.startswith("textual>=") and ",<" in pin
    for script in (".ci/test", ".ci/wheel-venv"):  # the test venv and the wheel's install both have it
        [extras_line] = [line for line in (root / script).read_text().splitlines() if line.startswith("EXTRAS=")]
        assert "tui" in extras_line.removeprefix("EXTRAS=").split(",")


@pytest.mark.slow  # a Textual app per test: seconds each
async def test_a_lost_database_is_one_status_line_and_a_retry(sqlite_db: str, tmp_path: Path) -> None:
    import os

    path = Path(sqlite_db.split("///", 1)[1])
    app = browser(sqlite_db)
    async with app.run_test(size=(100, 30)) as pilot:
        await listed(pilot, app, 3)
        os.replace(path, tmp_path / "away.db")  # the database is gone (a new connection finds no tables)
        await app.store_lost()  # and its connections with it: a pooled one would still read the moved file
        await pilot.press("r")
        said = await until(pilot, lambda: "retrying in" in status(app) and status(app), "the failure said", 30)
        assert "\n" not in said and "Traceback" not in said
        os.replace(tmp_path / "away.db", path)
        await until(pilot, lambda: "answers again" in status(app) or "3 sessions" in status(app), "the retry", 30)
        await listed(pilot, app, 3)


@pytest.mark.slow  # a Textual app per test: seconds each
async def test_control_characters_in_stored_data_are_made_visible(evil_db: str) -> None:
    app = browser(evil_db)
    async with app.run_test(size=(100, 30)) as pilot:
        [shown] = await listed(pilot, app, 1)
        assert shown == "s\\x1b[2J" and "\x1b" not in shown
        table = app.screen.query_one("#sessions", DataTable)
        assert str(table.get_row_at(0)[1]) == "u\\x1b]0;pwned\\x07"
        await pilot.press("enter")
        view = await until(pilot, lambda: found(app, TimelineView), "the timeline")
        await until(pilot, lambda: view.timeline.row(0), "the first event")
        assert "\x1b" not in view.timeline.row(0).json and "\x1b" not in str(app.screen.query_one("#head").render())


def test_an_event_row_neutralises_control_characters_and_reads_tokens() -> None:
    printed = {
        "author": "agent\x1b[31m",
        "invocationId": "i",
        "timestamp": 1.0,
        "content": {"role": "model", "parts": [{"text": "hi\x9b2J [bold]x[/bold]"}]},
        "usageMetadata": {"totalTokenCount": 42},
        "actions": {"stateDelta": {"k": "v\u202e"}},
    }
    row = data.EventRow.of(1, printed)
    assert row.author == "agent\\x1b[31m" and row.text == "hi\\x9b2J [bold]x[/bold]"
    assert row.delta == 'k="v\\u202e"' and row.tokens == 42 and "\x1b" not in row.json


@pytest.mark.slow  # a Textual app per test: seconds each
async def test_delete_with_memories_shows_the_erasure_plan_and_verifies(
    sqlite_db: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """D: `session delete --with-memories` through the same core call (#47 item 3); --read-only refuses it."""
    monkeypatch.setenv("MODEL_EMBEDDING_PROVIDER", "hash")
    for sid in ("s-alpha", "s-beta"):  # both say "question 0"; only s-alpha says "question 6"
        args = ["ltm", "save", "--from-store", APP, "u1", sid, "--db-url", sqlite_db]
        result = await asyncio.to_thread(CliRunner().invoke, cli, args)  # the CLI runs its own event loop
        assert result.exit_code == 0, result.stderr
    refusing = browser(sqlite_db, read_only=True)
    async with refusing.run_test(size=(120, 40)) as pilot:
        await listed(pilot, refusing, 3)
        await pilot.press("D")
        await pilot.pause(0.1)
        assert not isinstance(refusing.screen, Confirm) and "read-only" in status(refusing)
    app = browser(sqlite_db)
    async with app.run_test(size=(120, 40)) as pilot:
        ids = await listed(pilot, app, 3)
        app.screen.query_one("#sessions", DataTable).move_cursor(row=ids.index("s-alpha"))
        await pilot.press("D")
        dialog = await until(pilot, lambda: isinstance(app.screen, Confirm) and app.screen, "the question")
        assert "question 6" in dialog.plan and "s-alpha" in dialog.plan
        assert "kept memory" in dialog.plan and "s-beta, which stays" in dialog.plan  # question 0: s-beta's too
        assert dialog.question == "Delete 1 session, 12 events and 1 memory from local?"
        await pilot.press("y")
        assert sorted(await listed(pilot, app, 2)) == ["s-beta", "s-gamma"]
    result = await asyncio.to_thread(CliRunner().invoke, cli, ["ltm", "list", "-u", "u1", "-a", APP, "--json"])
    assert [e["content"]["parts"][0]["text"] for e in json.loads(result.stdout)] == ["question 0: 你好 ☃"]
    async with SessionStore(sqlite_db) as store:
        with pytest.raises(NotFound):
            await store.get_summary(APP, "u1", "s-alpha")
