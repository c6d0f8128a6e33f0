"""The Textual screens of `vmem browse`: sessions, a session's timeline, memories, and the dialogs.

A view over `data.py`: every read and action is a call there, run in a worker; a failure
(a lost database, a store error) is one line in the status bar, and a read that failed is
tried again with a growing pause until it works. Stored text is shown as `Text` (never as
markup) after `terminal_safe`, so neither escape sequences nor `[brackets]` in it act.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from rich.cells import set_cell_size
from rich.segment import Segment
from rich.style import Style
from rich.text import Text
from textual import on, work
from textual.app import App, ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, ScrollableContainer, Vertical, VerticalScroll
from textual.geometry import Size
from textual.message import Message
from textual.reactive import reactive
from textual.screen import ModalScreen, Screen
from textual.scroll_view import ScrollView
from textual.strip import Strip
from textual.widgets import DataTable, Footer, Input, Select, Static, Tree

from veadk_mem.cli.browse import data
from veadk_mem.cli.render import counted, terminal_safe
from veadk_mem.errors import BadInput, VmemError
from veadk_mem.ops.history import ltm_store
from veadk_mem.sessions.records import SessionFilter
from veadk_mem.sessions.timespec import parse_time
from veadk_mem.timefmt import format_time

if TYPE_CHECKING:
    from contextlib import AbstractContextManager

    from veadk_mem.cli.state import AppState
    from veadk_mem.ltm.facade import LongTermMemory
    from veadk_mem.ops.history import Change
    from veadk_mem.sessions.records import SessionSummary
    from veadk_mem.sessions.store import SessionStore

RETRY_FIRST, RETRY_MAX = 1.0, 10.0  # seconds between tries of a failed read


def _short_time(epoch: float | None) -> str:
    if epoch is None:
        return ""
    return time.strftime("%m-%d %H:%M:%S", time.localtime(epoch))


def _message(exc: BaseException) -> str:
    """One line for the status bar, secrets redacted."""
    from veadk_mem.config import redact

    text = exc.message if isinstance(exc, VmemError) else f"{type(exc).__name__}: {exc}"
    return terminal_safe(redact(" ".join(str(text).split())))


class StatusBar(Static):
    """One line: what the screen shows, or what went wrong."""

    DEFAULT_CSS = "StatusBar { height: 1; background: $panel; padding: 0 1; }"

    def say(self, text: str) -> None:
        self.update(Text(text, no_wrap=True, overflow="ellipsis"))


class Pane(Screen[None]):
    """A screen with a status bar, whose reads retry while the database is unreachable."""

    @property
    def browser(self) -> BrowseApp:
        app = self.app
        assert isinstance(app, BrowseApp)
        return app

    def say(self, text: str) -> None:
        for bar in self.query(StatusBar):
            bar.say(text)

    async def guarded(self, what: str, call: Callable[[], Awaitable[Any]], *, retry: bool = True) -> Any:
        """`call()`, and on failure one status line; a read (`retry`) is tried again until it works."""
        delay = RETRY_FIRST
        failed = False
        while True:
            try:
                result = await call()
            except Exception as exc:
                if not retry:
                    self.say(f"{what}: {_message(exc)}")
                    return None
                failed = True
                self.say(f"{what}: {_message(exc)}; retrying in {delay:.0f} s")
                await self.browser.store_lost()
                import asyncio

                await asyncio.sleep(delay)
                delay = min(RETRY_MAX, delay * 2)
                continue
            if failed:
                self.say(f"{what}: the database answers again")
            return result


# --- dialogs -------------------------------------------------------------------------------


class Confirm(ModalScreen[bool]):
    """The plan the CLI prints, and the question: y does it, n or escape does not."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("y", "answer(True)", "yes, do it"),
        Binding("n,escape", "answer(False)", "no"),
    ]
    DEFAULT_CSS = """
    Confirm { align: center middle; }
    Confirm > Vertical { width: 90%; max-height: 90%; height: auto; border: thick $warning; background: $surface; }
    Confirm ScrollableContainer { height: auto; max-height: 16; overflow-x: auto; }
    Confirm ScrollableContainer > Static { width: auto; }
    Confirm .question { padding: 1 1 0 1; text-style: bold; }
    """

    def __init__(self, plan: str, question: str) -> None:
        super().__init__()
        self.plan, self.question = plan, question

    def compose(self) -> ComposeResult:
        with Vertical():
            with ScrollableContainer():
                yield Static(Text(self.plan, no_wrap=True))
            yield Static(Text(f"{self.question}  [y/n]"), classes="question")
        yield Footer()

    def action_answer(self, yes: bool) -> None:
        self.dismiss(yes)


class AskPath(ModalScreen[str | None]):
    """The file an export writes (enter), or escape."""

    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape", "cancel", "cancel")]
    DEFAULT_CSS = """
    AskPath { align: center middle; }
    AskPath > Vertical { width: 80%; height: auto; border: thick $accent; background: $surface; padding: 0 1; }
    """

    def __init__(self, default: str) -> None:
        super().__init__()
        self.default = default

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Static(Text("export to file (enter to go on, escape to cancel):"))
            yield Input(value=self.default, id="path")
        yield Footer()

    @on(Input.Submitted, "#path")
    def _submitted(self, event: Input.Submitted) -> None:
        self.dismiss(event.value.strip() or None)

    def action_cancel(self) -> None:
        self.dismiss(None)


HELP = """\
vmem browse: the sessions and memories of ADK / VeADK agents

sessions   enter open, / filter (id or user), t updated since (7d, ISO)
           space mark, d delete (D: with its memories), e export,
           m the user's memories
           r reload; tab moves between the tree, the boxes, the list
timeline   up/down, pgup/pgdn, home/end move; s state or event JSON
           f follow (as session watch), d delete (D: with its
           memories), e export, m memories
memories   / search, enter where a memory came from, o its session,
           d delete, l list
anywhere   escape back, ? this help, q quit

--read-only turns every action (delete, export) off. A lost database
is one line in the status bar; the read is tried again until it works.
"""


class Help(ModalScreen[None]):
    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape,q,question_mark", "close", "close")]
    DEFAULT_CSS = """
    Help { align: center middle; }
    Help > VerticalScroll { width: 76; max-width: 100%; height: auto; max-height: 100%;
                            border: thick $accent; background: $surface; padding: 0 1; }
    """

    def compose(self) -> ComposeResult:
        with VerticalScroll():
            yield Static(Text(HELP))

    def action_close(self) -> None:
        self.dismiss(None)


# --- sessions ------------------------------------------------------------------------------


class SessionsScreen(Pane):
    """Apps and users on the left; the sessions the filters select, newest first, on the right."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("enter", "open", "open", show=False),
        Binding("slash", "focus_filter", "filter"),
        Binding("t", "focus_since", "since"),
        Binding("space", "mark", "mark"),
        Binding("d", "delete", "delete"),
        Binding("D", "delete_with_memories", "delete with memories", show=False),
        Binding("e", "export", "export"),
        Binding("m", "memories", "memories"),
        Binding("r", "reload", "reload"),
    ]
    DEFAULT_CSS = """
    SessionsScreen #main { height: 1fr; }
    SessionsScreen #scope { width: 24; border-right: solid $panel; }
    SessionsScreen #boxes { height: 3; }
    SessionsScreen #filter { width: 2fr; }
    SessionsScreen #since { width: 1fr; }
    SessionsScreen DataTable { height: 1fr; }
    """

    def __init__(self) -> None:
        super().__init__()
        self.listing: data.SessionList | None = None
        self.shown: list[SessionSummary] = []
        self.marked: set[tuple[str, str, str]] = set()
        self.since: float | None = None

    def compose(self) -> ComposeResult:
        with Horizontal(id="main"):
            tree: Tree[tuple[str | None, str | None]] = Tree("all apps", data=(None, None), id="scope")
            tree.show_root = True
            yield tree
            with Vertical():
                with Horizontal(id="boxes"):
                    yield Input(placeholder="filter: session id or user", id="filter")
                    yield Input(placeholder="updated since: 7d, 2026-01-31", id="since")
                table: DataTable[Any] = DataTable(id="sessions", cursor_type="row", zebra_stripes=False)
                yield table
        yield StatusBar()
        yield Footer()

    def on_mount(self) -> None:
        table = self.query_one("#sessions", DataTable)
        table.add_column("session id", key="id")
        table.add_column("user", key="user")
        table.add_column("events", key="events")
        table.add_column("updated", key="updated")
        table.add_column("app", key="app")
        table.focus()
        self.reload()
        self.load_scope()

    # --- reads ---

    def _filter(self) -> SessionFilter:

        b = self.browser
        return SessionFilter(app=b.app_name, user=b.user_id, since=self.since)

    @work(exclusive=True, group="sessions", exit_on_error=False)
    async def reload(self) -> None:
        """The first page of sessions under the current scope and time filter."""
        listing = data.SessionList(self._filter())
        self.listing = listing
        await self.guarded("listing sessions", lambda: self._more(listing))
        await self._fill_filtered()
        self._redraw()

    @work(exclusive=True, group="sessions", exit_on_error=False)
    async def more(self) -> None:
        listing = self.listing
        if listing is None or listing.done:
            return
        await self.guarded("listing sessions", lambda: self._more(listing))
        self._redraw()

    async def _fill_filtered(self) -> None:
        """With a filter box text, read on (a bounded number of pages) until a screenful matches."""
        text = self.query_one("#filter", Input).value
        listing = self.listing
        if not text or listing is None:
            return
        for _ in range(20):
            if listing.done or sum(data.matches(s, text) for s in listing.rows) >= 50:
                return
            await self.guarded("listing sessions", lambda: self._more(listing))

    async def _more(self, listing: data.SessionList) -> list[SessionSummary]:
        return await listing.more(await self.browser.ready())

    @work(exclusive=True, group="scope", exit_on_error=False)
    async def load_scope(self) -> None:
        """Apps and their users with session counts (`session stats --by user`), in the background."""

        b = self.browser
        flt = SessionFilter(app=b.fixed_app, user=b.fixed_user)

        async def read() -> Any:
            return await (await b.ready()).stats(flt, by="user", top=0)

        stats = await self.guarded("reading apps and users", read)
        if not self.is_attached:  # left (or the app quit) while it read
            return
        tree = self.query_one("#scope", Tree)
        tree.clear()
        apps: dict[str, Any] = {}
        for group in stats.groups:
            app, user = group["app_name"], group["user_id"]
            if app not in apps:
                apps[app] = tree.root.add(Text(terminal_safe(app)), data=(app, None), expand=True)
            apps[app].add_leaf(Text(f"{terminal_safe(user)} ({group['sessions']})"), data=(app, user))
        tree.root.expand()

    # --- drawing ---

    def _redraw(self) -> None:
        listing = self.listing
        if listing is None or not self.is_attached:
            return
        text = self.query_one("#filter", Input).value
        self.shown = [s for s in listing.rows if not text or data.matches(s, text)]
        table = self.query_one("#sessions", DataTable)
        keep = table.cursor_row
        table.clear()
        for s in self.shown:
            mark = "* " if (s.app_name, s.user_id, s.id) in self.marked else ""
            table.add_row(
                Text(mark + terminal_safe(s.id), no_wrap=True),
                Text(terminal_safe(s.user_id), no_wrap=True),
                Text(f"{s.event_count:,}", justify="right"),
                Text(format_time(s.update_time)),
                Text(terminal_safe(s.app_name), no_wrap=True),
            )
        if self.shown:
            table.move_cursor(row=min(keep, len(self.shown) - 1))
        more = "" if listing.done else "+ (more below)"
        scope = self.browser.scope_text() + (f", since {format_time(self.since)}" if self.since else "")
        marked = f", {len(self.marked)} marked" if self.marked else ""
        self.say(f"{counted(len(self.shown), 'session')}{more} in {scope}{marked}")

    def current(self) -> SessionSummary | None:
        table = self.query_one("#sessions", DataTable)
        if not self.shown or table.cursor_row < 0:
            return None
        return self.shown[min(table.cursor_row, len(self.shown) - 1)]

    def chosen(self) -> list[SessionSummary]:
        """The marked sessions, else the one under the cursor."""
        listing = self.listing
        picked = [s for s in (listing.rows if listing else []) if (s.app_name, s.user_id, s.id) in self.marked]
        here = self.current()
        return picked or ([here] if here else [])

    # --- events ---

    @on(DataTable.RowHighlighted, "#sessions")
    def _near_end(self, event: DataTable.RowHighlighted) -> None:
        listing = self.listing
        if listing is not None and not listing.done and event.cursor_row >= len(self.shown) - 5:
            self.more()

    @on(DataTable.RowSelected, "#sessions")
    def _selected(self, event: DataTable.RowSelected) -> None:
        self.action_open()

    @on(Input.Changed, "#filter")
    def _filter_changed(self, event: Input.Changed) -> None:
        self._redraw()
        self.refill()

    @work(exclusive=True, group="sessions", exit_on_error=False)
    async def refill(self) -> None:
        await self._fill_filtered()
        self._redraw()

    @on(Input.Submitted, "#filter")
    def _filter_done(self, event: Input.Submitted) -> None:
        self.query_one("#sessions", DataTable).focus()

    @on(Input.Submitted, "#since")
    def _since(self, event: Input.Submitted) -> None:

        try:
            self.since = parse_time(event.value.strip(), "since") if event.value.strip() else None
        except BadInput as exc:
            self.say(_message(exc))
            return
        self.query_one("#sessions", DataTable).focus()
        self.reload()

    @on(Tree.NodeSelected, "#scope")
    def _scope(self, event: Tree.NodeSelected[tuple[str | None, str | None]]) -> None:
        b = self.browser
        app, user = event.node.data or (None, None)
        b.app_name, b.user_id = app or b.fixed_app, user or b.fixed_user
        self.marked.clear()
        self.reload()

    # --- actions ---

    def action_open(self) -> None:
        summary = self.current()
        if summary is not None:
            self.app.push_screen(SessionScreen(summary))

    def action_focus_filter(self) -> None:
        self.query_one("#filter", Input).focus()

    def action_focus_since(self) -> None:
        self.query_one("#since", Input).focus()

    def action_reload(self) -> None:
        self.reload()
        self.load_scope()

    def action_mark(self) -> None:
        summary = self.current()
        if summary is None:
            return
        key = (summary.app_name, summary.user_id, summary.id)
        self.marked.symmetric_difference_update({key})
        self._redraw()
        table = self.query_one("#sessions", DataTable)
        table.move_cursor(row=min(table.cursor_row + 1, len(self.shown) - 1))

    def action_memories(self) -> None:
        b = self.browser
        summary = self.current()
        user = b.user_id or (summary.user_id if summary else None)
        if user is None:
            self.say("no user: pick one in the tree or a session of theirs")
            return
        self.app.push_screen(MemoriesScreen(b.app_name or (summary.app_name if summary else None), user))

    def action_delete(self) -> None:
        self.browser.delete_sessions(self, self.chosen(), self._deleted)

    def action_delete_with_memories(self) -> None:
        self.browser.delete_sessions(self, self.chosen(), self._deleted, with_memories=True)

    def _deleted(self) -> None:
        self.marked.clear()
        self.reload()
        self.load_scope()

    def action_export(self) -> None:
        self.browser.export_sessions(self, self.chosen())

    def on_screen_resume(self) -> None:
        if self.browser.sessions_changed:
            self.browser.sessions_changed = False
            self._deleted()


if TYPE_CHECKING:
    from veadk_mem.sessions.records import SessionFilter


# --- one session ---------------------------------------------------------------------------


class TimelineView(ScrollView):
    """A session's events as one line each, drawn from the rows read so far; rows coming into
    view that are not read yet are asked for by page (a placeholder shows meanwhile)."""

    can_focus = True

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("up,k", "move(-1)", "up", show=False),
        Binding("down,j", "move(1)", "down", show=False),
        Binding("pageup", "move(-20)", "page up", show=False),
        Binding("pagedown", "move(20)", "page down", show=False),
        Binding("home,g", "edge(0)", "first", show=False),
        Binding("end,G", "edge(1)", "last", show=False),
    ]
    DEFAULT_CSS = "TimelineView { height: 1fr; }"
    cursor: reactive[int] = reactive(0)

    class Moved(Message):
        def __init__(self, index: int) -> None:
            super().__init__()
            self.index = index

    def __init__(self, timeline: data.Timeline, **kw: Any) -> None:
        super().__init__(**kw)
        self.timeline = timeline
        self._pending: set[int] = set()

    def on_mount(self) -> None:
        self.grow()

    def grow(self) -> None:
        """The scroll range after the count changed (a follow appended events)."""
        self.virtual_size = Size(self.size.width, self.timeline.count)
        self.refresh()

    def on_resize(self) -> None:
        self.virtual_size = Size(self.size.width, self.timeline.count)

    def render_line(self, y: int) -> Strip:
        width = self.size.width
        index = self.scroll_offset.y + y
        if index >= self.timeline.count:
            return Strip([Segment(" " * width, Style())], width)  # a style: the NO_COLOR filter needs one
        row = self.timeline.row(index)
        digits = len(str(self.timeline.count))
        if row is None:
            self._ask(index)
            line = f"{index + 1:>{digits}} …"
        else:
            line = self._line(row, digits, width)
        style = Style(reverse=True) if index == self.cursor and self.has_focus else Style()
        if index == self.cursor and not self.has_focus:
            style = Style(bold=True)
        return Strip([Segment(set_cell_size(line, width), style)], width)

    @staticmethod
    def _line(row: data.EventRow, digits: int, width: int) -> str:
        author = set_cell_size(row.author, 10)
        kind = set_cell_size(row.kind, 15)
        rest = row.text
        if row.delta:
            rest += f"  Δ {row.delta}"
        if row.tokens is not None:
            rest += f"  [{row.tokens} tok]"
        if width < 100:
            return f"{row.n:>{digits}} {_short_time(row.time)[6:]} {author} {kind} {rest}"
        return f"{row.n:>{digits}} {_short_time(row.time)} {author} {kind} {rest}"

    def _ask(self, index: int) -> None:
        height = max(1, self.size.height)
        for page in self.timeline.missing(index, index + height):
            if page not in self._pending:
                self._pending.add(page)
                self.fetch(page)

    @work(group="pages", exit_on_error=False)
    async def fetch(self, page: int) -> None:
        screen = self.screen
        assert isinstance(screen, SessionScreen)
        await screen.guarded("reading events", lambda: self.timeline.load(page))
        self._pending.discard(page)
        self.refresh()
        if page == self.cursor // data.EVENT_PAGE:
            self.post_message(self.Moved(self.cursor))

    def watch_cursor(self, old: int, new: int) -> None:
        top, height = self.scroll_offset.y, max(1, self.size.height)
        if new < top:
            self.scroll_to(y=new, animate=False)
        elif new >= top + height:
            self.scroll_to(y=new - height + 1, animate=False)
        self.refresh()
        self.post_message(self.Moved(new))

    def action_move(self, by: int) -> None:
        if self.timeline.count:
            self.cursor = max(0, min(self.timeline.count - 1, self.cursor + by))

    def action_edge(self, end: int) -> None:
        if self.timeline.count:
            self.cursor = self.timeline.count - 1 if end else 0

    def on_click(self, event: Any) -> None:
        index = self.scroll_offset.y + event.y
        if 0 <= index < self.timeline.count:
            self.cursor = index

    def on_focus(self) -> None:
        self.refresh()

    def on_blur(self) -> None:
        self.refresh()


class SessionScreen(Pane):
    """One session: its timeline on top, the selected event's JSON (or the merged state) below."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape,backspace", "back", "back"),
        Binding("s", "toggle_state", "state/event"),
        Binding("f", "follow", "follow"),
        Binding("d", "delete", "delete"),
        Binding("D", "delete_with_memories", "delete with memories", show=False),
        Binding("e", "export", "export"),
        Binding("m", "memories", "memories"),
    ]
    DEFAULT_CSS = """
    SessionScreen #head { height: 1; background: $boost; padding: 0 1; }
    SessionScreen #body { height: 1fr; }
    SessionScreen #detail { height: 40%; border-top: solid $panel; }
    """

    def __init__(self, summary: SessionSummary) -> None:
        super().__init__()
        self.summary = summary
        self.timeline: data.Timeline | None = None
        self.showing_state = False
        self.watcher: Any = None

    def compose(self) -> ComposeResult:
        yield Static(Text(self._head(), no_wrap=True, overflow="ellipsis"), id="head")
        yield Vertical(id="body")
        with VerticalScroll(id="detail"):
            yield Static(Text(""), id="json")
        yield StatusBar()
        yield Footer()

    def _head(self) -> str:
        s = self.summary
        return terminal_safe(f"{s.app_name} / {s.user_id} / {s.id}   {s.event_count:,} events")

    def on_mount(self) -> None:
        self.open()

    @work(exclusive=True, group="open", exit_on_error=False)
    async def open(self) -> None:
        """The session's summary now (its count may have grown since listed), then its first page."""
        s = self.summary

        async def summary() -> SessionSummary:
            return await (await self.browser.ready()).get_summary(s.app_name, s.user_id, s.id)

        fresh = await self.guarded("opening the session", summary)
        store = self.browser.store
        self.summary = fresh
        self.timeline = data.Timeline(store, fresh)
        await self.guarded("reading events", lambda: self.timeline.load(0) if self.timeline else _nothing())
        view = TimelineView(self.timeline, id="timeline")
        await self.query_one("#body", Vertical).mount(view)
        view.focus()
        self.query_one("#head", Static).update(Text(self._head(), no_wrap=True, overflow="ellipsis"))
        self._show(0)
        self.say(f"{counted(fresh.event_count, 'event')}; updated {format_time(fresh.update_time)}")

    @on(TimelineView.Moved)
    def _moved(self, event: TimelineView.Moved) -> None:
        if not self.showing_state:
            self._show(event.index)

    def _show(self, index: int) -> None:
        if self.timeline is None:
            return
        target = self.query_one("#json", Static)
        if self.showing_state:
            target.update(Text("merged state (app:, user: and session keys):\n" + data.state_text(self.summary)))
            return
        row = self.timeline.row(index)
        if row is None:
            target.update(Text("no events" if self.timeline.count == 0 else "reading…"))
        else:
            target.update(Text(f"event #{row.n} of {self.timeline.count:,}\n{row.json}"))

    def action_toggle_state(self) -> None:
        self.showing_state = not self.showing_state
        view = self.query(TimelineView)
        self._show(view.first().cursor if view else 0)

    def action_back(self) -> None:
        self.app.pop_screen()

    async def on_unmount(self) -> None:
        if self.watcher is not None:
            self.watcher.stop()
        if self.timeline is not None:
            await self.timeline.close()

    # --- follow ---

    def action_follow(self) -> None:
        if self.watcher is not None:
            self.watcher.stop()
            self.watcher = None
            self.say("follow: stopped")
            return
        if self.timeline is None:
            return
        s = self.summary
        self.watcher = self.browser.store.watch(s.app_name, s.user_id, s.id, last=0, interval=0.5)
        self.say("follow: watching for new events (f stops)")
        self.follow(self.watcher)

    @work(group="follow", exit_on_error=False)
    async def follow(self, watcher: Any) -> None:
        """`session watch APP USER ID --events 0`: each new event appended, the cursor kept at the end."""
        from veadk_mem.adkjson import printed_event
        from veadk_mem.sessions.watch import WatchEvent

        try:
            async for batch in watcher.follow():
                timeline = self.timeline
                if timeline is None:
                    return
                for item in batch:
                    if isinstance(item, WatchEvent):
                        timeline.append(printed_event(item.data))
                    elif item.kind != "session":
                        self.say(f"follow: {terminal_safe(item.text)}")
                view = self.query_one(TimelineView)
                at_end = view.cursor >= timeline.count - 2 - len(batch)
                view.grow()
                if at_end:
                    view.cursor = max(0, timeline.count - 1)
                self.say(f"follow: {counted(timeline.count, 'event')} (f stops)")
        except Exception as exc:
            self.say(f"follow: {_message(exc)}")
            self.watcher = None

    # --- actions ---

    def action_delete(self) -> None:
        def gone() -> None:
            self.browser.sessions_changed = True
            self.app.pop_screen()

        self.browser.delete_sessions(self, [self.summary], gone)

    def action_delete_with_memories(self) -> None:
        def gone() -> None:
            self.browser.sessions_changed = True
            self.app.pop_screen()

        self.browser.delete_sessions(self, [self.summary], gone, with_memories=True)

    def action_export(self) -> None:
        self.browser.export_sessions(self, [self.summary])

    def action_memories(self) -> None:
        self.app.push_screen(MemoriesScreen(self.summary.app_name, self.summary.user_id))


async def _nothing() -> None:
    return None


# --- memories ------------------------------------------------------------------------------


class MemoriesScreen(Pane):
    """A user's long-term memories, newest first; a search shows rank, score and its ranking."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "back", "back"),
        Binding("slash", "focus_search", "search"),
        Binding("enter", "provenance", "source", show=False),
        Binding("o", "open_source", "its session"),
        Binding("d", "delete", "delete"),
        Binding("l", "list", "list all"),
    ]
    DEFAULT_CSS = """
    MemoriesScreen #searchbar { height: 3; }
    MemoriesScreen #query { width: 1fr; }
    MemoriesScreen #mode { width: 16; }
    MemoriesScreen DataTable { height: 1fr; }
    MemoriesScreen #memory { height: 30%; border-top: solid $panel; }
    """

    def __init__(self, app_name: str | None, user: str) -> None:
        super().__init__()
        self.app_name, self.user = app_name, user
        self.rows: list[data.MemoryRow] = []
        self.ranked = False

    def compose(self) -> ComposeResult:
        with Horizontal(id="searchbar"):
            yield Input(placeholder=f"search the memories of {terminal_safe(self.user)}", id="query")
            yield Select([(m, m) for m in ("vector", "keyword", "hybrid")], id="mode", allow_blank=True, prompt="mode")
        yield DataTable(id="memories", cursor_type="row")
        with VerticalScroll(id="memory"):
            yield Static(Text(""), id="text")
        yield StatusBar()
        yield Footer()

    def on_mount(self) -> None:
        table = self.query_one("#memories", DataTable)
        for name in ("rank", "score", "by", "id", "saved", "text"):
            table.add_column(name, key=name)
        table.focus()
        self.load()

    def ltm(self) -> LongTermMemory:
        return self.browser.ltm(self.app_name)

    @work(exclusive=True, group="memories", exit_on_error=False)
    async def load(self) -> None:
        """`ltm list --user U`: the user's memories, newest first."""
        found = await self.guarded("listing memories", lambda: data.list_memories(self.ltm(), self.app_name, self.user))
        self._fill(found or [], ranked=False)

    @work(exclusive=True, group="memories", exit_on_error=False)
    async def search(self, query: str, mode: str | None) -> None:
        """`ltm search QUERY --user U [--mode M]`; a bad mode or query is one line, not retried."""
        ltm = self.ltm()

        async def go() -> tuple[str, list[data.MemoryRow]]:
            return ltm.search_mode(mode), await data.search_memories(ltm, self.app_name, self.user, query, mode)

        found = await self.guarded("searching", go, retry=False)
        if found is not None:
            chosen, rows = found
            self._fill(rows, ranked=True, what=f"{terminal_safe(query)!r} by {chosen}")

    def _fill(self, rows: list[data.MemoryRow], *, ranked: bool, what: str = "") -> None:
        self.rows, self.ranked = rows, ranked
        table = self.query_one("#memories", DataTable)
        table.clear()
        for r in rows:
            table.add_row(
                Text(str(r.rank) if r.rank else ""),
                Text("" if r.score is None else f"{r.score:.3f}", justify="right"),
                Text(r.score_kind),
                Text(r.id[:12], no_wrap=True),
                Text(r.saved[:19].replace("T", " ")),
                Text(r.text, no_wrap=True, overflow="ellipsis"),
            )
        found = counted(len(rows), "memory")
        where = f"user {terminal_safe(self.user)}" + (f", app {terminal_safe(self.app_name)}" if self.app_name else "")
        self.say(f"{found} found for {what} of {where}" if ranked else f"{found} of {where}, newest first")
        self._show(0, source=False)

    def _show(self, index: int, *, source: bool) -> None:
        target = self.query_one("#text", Static)
        if not self.rows:
            target.update(Text("no memories"))
            return
        r = self.rows[min(index, len(self.rows) - 1)]
        body = r.source if source else r.text
        head = f"memory {r.id}" + (f", rank {r.rank}, {r.score_kind} {r.score:.3f}" if r.rank and r.score else "")
        target.update(Text(f"{head}\n{body}"))

    @on(DataTable.RowHighlighted, "#memories")
    def _moved(self, event: DataTable.RowHighlighted) -> None:
        self._show(event.cursor_row, source=False)

    @on(DataTable.RowSelected, "#memories")
    def _selected(self, event: DataTable.RowSelected) -> None:
        self._show(event.cursor_row, source=True)

    @on(Input.Submitted, "#query")
    def _query(self, event: Input.Submitted) -> None:
        mode = self.query_one("#mode", Select).value
        if event.value.strip():
            self.search(event.value, mode if isinstance(mode, str) else None)
        else:
            self.load()
        self.query_one("#memories", DataTable).focus()

    def action_focus_search(self) -> None:
        self.query_one("#query", Input).focus()

    def action_list(self) -> None:
        self.load()

    def action_provenance(self) -> None:
        self._show(self.query_one("#memories", DataTable).cursor_row, source=True)

    def action_open_source(self) -> None:
        if not self.rows:
            return
        row = self.rows[min(self.query_one("#memories", DataTable).cursor_row, len(self.rows) - 1)]
        key = data.source_session(row, self.app_name, self.user)
        if key is None:
            self.say(f"memory {row.id}: source not recorded")
        else:
            self.open_source(*key)

    @work(exclusive=True, group="memory-source", exit_on_error=False)
    async def open_source(self, app_name: str, user: str, session_id: str) -> None:
        """The session a memory came from, as the sessions list opens one (gone: one status line)."""

        async def summary() -> SessionSummary:
            return await (await self.browser.ready()).get_summary(app_name, user, session_id)

        found = await self.guarded(f"session {app_name}/{user}/{session_id}", summary, retry=False)
        if found is not None:
            self.app.push_screen(SessionScreen(found))

    def action_back(self) -> None:
        self.app.pop_screen()

    def action_delete(self) -> None:
        if self.browser.refuse(self, "deleting a memory"):
            return
        table = self.query_one("#memories", DataTable)
        if not self.rows:
            return
        row = self.rows[min(table.cursor_row, len(self.rows) - 1)]
        self.delete_memory(row.id)

    @work(exclusive=True, group="memory-delete", exit_on_error=False)
    async def delete_memory(self, memory_id: str) -> None:
        ltm = self.ltm()
        planned = await self.guarded(
            "planning", lambda: data.memory_plan(ltm, self.app_name, self.user, memory_id), retry=False
        )
        if planned is None:
            return
        index, records = planned
        question = f"delete {counted(len(records), 'memory')} of user {self.user!r} from index {index!r}?"
        if not await self.app.push_screen_wait(Confirm(data.memory_plan_text(index, records), question)):
            self.say("nothing was deleted")
            return
        with self.browser.recording("ltm delete", ltm_store(ltm.backend_name, [index]), self) as change:
            done = await self.guarded(
                "deleting", lambda: data.delete_memory(ltm, self.app_name, self.user, index, records), retry=False
            )
            change.count(memories=done or 0)
            change.add_ids(r.id for r in records[: done or 0])
        if done is not None:
            self.say(f"deleted {counted(done, 'memory')}")
            self.load()


# --- the app -------------------------------------------------------------------------------


class BrowseApp(App[None]):
    """`vmem browse`: one session store (and the configured long-term memory) for the whole run."""

    TITLE = "vmem browse"
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("q", "quit", "quit"),
        Binding("question_mark", "help", "help"),
    ]
    ENABLE_COMMAND_PALETTE = False

    def __init__(
        self,
        state: AppState,
        *,
        app_name: str | None = None,
        user_id: str | None = None,
        read_only: bool = False,
        store: SessionStore | None = None,
    ) -> None:
        super().__init__()
        self.state = state
        self.fixed_app, self.fixed_user = app_name, user_id
        self.app_name, self.user_id = app_name, user_id
        self.read_only = read_only
        self._store = store
        self._opened = False
        self._ltms: dict[str | None, LongTermMemory] = {}
        self.sessions_changed = False

    @property
    def store(self) -> SessionStore:
        if self._store is None:
            from veadk_mem.sessions.store import SessionStore

            self._store = SessionStore.from_settings(self.state.loaded.settings)
        return self._store

    async def ready(self) -> SessionStore:
        """The store, opened (connected, layout read) on first use in this app's event loop."""
        store = self.store
        if not self._opened:
            await store.open()
            self._opened = True
        return store

    def ltm(self, app_name: str | None) -> LongTermMemory:
        if app_name not in self._ltms:
            from veadk_mem.ltm.facade import LongTermMemory

            self._ltms[app_name] = LongTermMemory.from_settings(self.state.loaded.settings, app_name=app_name or "")
        return self._ltms[app_name]

    async def store_lost(self) -> None:
        """A new pool after a failed read: the old one's connections may be dead (as `session watch` does)."""
        import contextlib

        with contextlib.suppress(Exception):
            await self.store.db.drop_connections()

    def scope_text(self) -> str:
        if self.app_name and self.user_id:
            return f"{terminal_safe(self.app_name)}/{terminal_safe(self.user_id)}"
        return terminal_safe(self.app_name) if self.app_name else "all apps"

    def on_mount(self) -> None:
        self.push_screen(SessionsScreen())

    async def on_unmount(self) -> None:
        import contextlib

        for ltm in self._ltms.values():
            with contextlib.suppress(Exception):
                await ltm.close()
        if self._store is not None:
            with contextlib.suppress(Exception):
                await self._store.close()

    def action_help(self) -> None:
        if not isinstance(self.screen, Help):
            self.push_screen(Help())

    def refuse(self, pane: Pane, what: str) -> bool:
        """True (and said) when --read-only turns this action off."""
        if self.read_only:
            pane.say(f"read-only: {what} is turned off (started with --read-only)")
        return self.read_only

    def recording(self, command: str, store: str, pane: Pane) -> AbstractContextManager[Change]:
        """The history entry of a change made from the browser (as the command's would be); a
        history that cannot be written is said in the pane, not on a stderr the screen hides."""
        from veadk_mem.ops.history import recording

        return recording(self.state.loaded.settings.history, command, store, argv=self.state.argv, warn=pane.say)

    def delete_sessions(
        self, pane: Pane, chosen: list[SessionSummary], done: Callable[[], None], *, with_memories: bool = False
    ) -> None:
        if self.refuse(pane, "deleting sessions") or not chosen:
            return
        if with_memories:
            self._erase_sessions(pane, chosen, done)
        else:
            self._delete_sessions(pane, chosen, done)

    @work(exclusive=True, group="act", exit_on_error=False)
    async def _erase_sessions(self, pane: Pane, chosen: list[SessionSummary], done: Callable[[], None]) -> None:
        """`session delete APP USER ID... --with-memories`: the plan it prints, the question, the erasure."""
        store = await self.ready()
        ltm = self.ltm(None)
        plan = await pane.guarded(
            "planning", lambda: data.erase_sessions(store, ltm, chosen, dry_run=True), retry=False
        )
        if plan is None:
            return
        question = (
            f"Delete {counted(len(plan.sessions.sessions), 'session')}, {counted(plan.events, 'event')} and "
            f"{counted(len(plan.memories), 'memory')} from {plan.backend}?"
        )
        if not await self.push_screen_wait(Confirm(data.erasure_plan_text(plan), question)):
            pane.say("aborted: nothing was deleted")
            return
        with self.recording("session delete --with-memories", store.db.display_url, pane) as change:
            report = await pane.guarded(
                "deleting", lambda: data.erase_sessions(store, ltm, chosen, dry_run=False), retry=False
            )
            if report is not None:
                change.count(sessions=report.deleted_sessions, memories=report.deleted_memories)
                change.add_ids(f"{s.app_name}/{s.user_id}/{s.id}" for s in report.sessions.sessions)
                change.receipt = report.receipt()
        if report is None:
            return
        left = report.verification.left if report.verification is not None else []
        check = f"; {counted(len(left), 'memory')} still there" if left else "; verified: none left"
        pane.say(
            f"deleted {counted(report.deleted_memories, 'memory')}, then {counted(report.deleted_sessions, 'session')}"
            f"{check}"
        )
        done()

    @work(exclusive=True, group="act", exit_on_error=False)
    async def _delete_sessions(self, pane: Pane, chosen: list[SessionSummary], done: Callable[[], None]) -> None:
        """`session delete APP USER ID...`: the plan it prints, the question, then the delete."""
        store = await self.ready()
        plan = await pane.guarded("planning", lambda: data.delete_sessions(store, chosen, dry_run=True), retry=False)
        if plan is None:
            return
        if not plan.sessions:
            pane.say("no sessions match: nothing deleted")
            return
        question = f"Delete {counted(len(plan.sessions), 'session')} and {counted(plan.events, 'event')}?"
        if not await self.push_screen_wait(Confirm(data.delete_plan_text(plan), question)):
            pane.say("aborted: nothing was deleted")
            return
        with self.recording("session delete", store.db.display_url, pane) as change:
            report = await pane.guarded(
                "deleting", lambda: data.delete_sessions(store, chosen, dry_run=False), retry=False
            )
            if report is not None:
                change.count(sessions=len(report.sessions), events=report.events)
                change.add_ids(f"{s.app_name}/{s.user_id}/{s.id}" for s in report.sessions)
        if report is None:
            return
        kept = f"; {len(report.skipped)} kept (updated after listed)" if report.skipped else ""
        pane.say(f"deleted {counted(len(report.sessions), 'session')}, {counted(report.events, 'event')}{kept}")
        done()

    def export_sessions(self, pane: Pane, chosen: list[SessionSummary]) -> None:
        if self.refuse(pane, "exporting") or not chosen:
            return
        self._export_sessions(pane, chosen)

    @work(exclusive=True, group="act", exit_on_error=False)
    async def _export_sessions(self, pane: Pane, chosen: list[SessionSummary]) -> None:
        """`session export -o FILE` of the chosen sessions: the file, the plan, the question, the export."""
        name = await self.push_screen_wait(AskPath(data.default_export_path()))
        if not name:
            pane.say("export: cancelled")
            return
        output = Path(name).expanduser()
        question = f"Export {counted(len(chosen), 'session')} to {output}?"
        if not await self.push_screen_wait(Confirm(data.export_plan_text(chosen, output), question)):
            pane.say("export: cancelled, nothing written")
            return
        store = await self.ready()
        count = await pane.guarded("exporting", lambda: data.export_sessions(store, chosen, output), retry=False)
        if count is not None:
            pane.say(f"exported {counted(count, 'session')} to {terminal_safe(str(output))}")
