"""The one output path: core results become a table, plain text, JSON, JSONL, CSV or TSV here
and nowhere else.

Data goes to stdout; messages, plans and progress to stderr. Rich honours NO_COLOR itself.
A table on a terminal keeps one line per record, as gh and kubectl do: ids whole, times
compact (3d ago), free text elided with `…`, and lower-priority columns hidden in the order
the table declares, named once in a footer on stderr. --wide shows every column and every
character (cells wrap inside themselves; a table that cannot fit becomes records); --records
gives one block per row (`field: value` lines) by choice. Off a terminal a table is
tab-separated text, a header line of the --tsv names and one record per line, never wrapped,
numbers plain, times ISO 8601 UTC, so grep, cut and awk work. Messages
on a terminal wrap at its width between words; off one every message, warning, error and hint
is one line.

The parts it is built from: the column model, each format's cells and the fit in `columns`;
control characters made visible and the pipe-safe writer (every byte of output) in
`terminal`; the one time formatter in `veadk_mem.timefmt`.
"""

from __future__ import annotations

import csv
import io
import sys
from collections.abc import AsyncIterable, Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import IO, TYPE_CHECKING, Any

from veadk_mem.cli.columns import (
    GAP,
    Column,
    fit_columns,
    fit_line,
    machine_text,
    machine_value,
    one_line,
    person_cell,
    piped_cell,
    plain_header,
)
from veadk_mem.cli.terminal import WRITE_CHUNK, isatty, safe_text, terminal_safe, terminal_text, wrap_words, write_text
from veadk_mem.jsonio import dumps
from veadk_mem.timefmt import AGE, CLOCK, LOCAL, SECONDS, TimeForm, format_time

if TYPE_CHECKING:
    from datetime import datetime

    from rich.console import Console
    from rich.progress import Progress


SPINNER_AFTER = 1.0  # seconds a wait lasts before a terminal shows a spinner
RICH_TABLE_MAX_ROWS = 1000  # above this, even a terminal gets plain aligned text
TABLE_FORMATS = ("jsonl", "csv", "tsv")  # the machine formats every table-shaped command takes
TIME_FORMATS = ("compact", "local", "iso")  # --time-format: 3d ago / 2026-11-29 21:24:38 / 2026-11-29T13:24:38Z


def could_be_terminal(stream: IO[str]) -> bool:
    """False only where Rich's Console.is_terminal is False too: `stream` is no TTY and
    neither TTY_COMPATIBLE=1 nor a non-empty FORCE_COLOR (which Rich honours) says otherwise."""
    import os

    if os.environ.get("TTY_COMPATIBLE") == "1" or os.environ.get("FORCE_COLOR"):
        return True
    return isatty(stream)


def is_terminal(render: Renderer, *, to_stderr: bool = False) -> bool:
    """Rich's answer whether stdout (stderr) is a terminal, without loading Rich where it
    can only say no (`could_be_terminal`): a pipe or a file needs no Console."""
    if not could_be_terminal(sys.stderr if to_stderr else sys.stdout):
        return False
    return (render.err if to_stderr else render.out).is_terminal


def time_form(render: Renderer, col: Column) -> TimeForm:
    """The form of a time cell on a terminal: --time-format's, else compact (an age, or a
    time of day in a timeline), local time under --wide and --records."""
    form = render.time_format or ("local" if render.wide or render.as_records else "compact")
    if form == "compact":
        return CLOCK if col.clock else AGE
    return SECONDS if form == "iso" else LOCAL


def to_json(data: Any, *, indent: int | None = 2) -> str:
    """Stable JSON for --json output: keys as given, non-ASCII kept, NaN as null (the one encoder)."""
    return dumps(data, indent=indent)


def counted(n: int, noun: str) -> str:
    """'1 app state', '2 app states', '3 memories', '2 searches'."""
    if n == 1:
        return f"1 {noun}"
    if noun.endswith("y") and noun[-2:-1] not in "aeiou":
        plural = noun[:-1] + "ies"
    elif noun.endswith(("s", "x", "z", "ch", "sh")):
        plural = noun + "es"
    else:
        plural = noun + "s"
    return f"{n:,} {plural}"


def preview(text: str | None, width: int = 80) -> str:
    """One line of text, cut to width with an ellipsis (for messages, never for table cells)."""
    if not text:
        return ""
    flat = " ".join(text.split())
    return flat if len(flat) <= width else flat[: width - 1] + "…"


class Renderer:
    """Writes data and messages according to the global --json / --quiet / format flags."""

    def __init__(
        self,
        *,
        json_mode: bool = False,
        quiet: bool = False,
        verbose: bool = False,
        fmt: str | None = None,
        wide: bool = False,
        records: bool = False,
        time_format: str | None = None,
    ) -> None:
        self.json_mode = json_mode
        self.quiet = quiet
        self.verbose = verbose
        self.fmt = fmt  # jsonl, csv or tsv for table-shaped output; None: a table or plain text
        self.wide = wide  # every column, every character (cells wrap) on a terminal
        self.as_records = records  # one block per row on a terminal, by choice
        self.time_format = time_format  # compact, local or iso on a terminal; None: compact, local under --wide
        self._said_hidden: set[tuple[str, ...]] = set()  # footers already given
        self._out: Console | None = None
        self._err: Console | None = None
        self._blocks = 0  # plain-text blocks written so far: a blank line goes between them
        self._said_records = False  # the note that a table became records is given once
        self._record_n = 0  # records numbered so far in the current record-layout table

    @property
    def out(self) -> Console:
        if self._out is None:
            from rich.console import Console

            self._out = Console(file=sys.stdout, soft_wrap=False, highlight=False)
        return self._out

    @property
    def err(self) -> Console:
        if self._err is None:
            from rich.console import Console

            self._err = Console(file=sys.stderr, highlight=False)
        return self._err

    @property
    def machine(self) -> bool:
        """True when stdout takes JSON, JSONL, CSV or TSV rather than text for people."""
        return self.json_mode or self.fmt is not None

    # data ---------------------------------------------------------------------------

    def json(self, data: Any) -> None:
        """Print a JSON document on stdout."""
        write_text(sys.stdout, to_json(data) + "\n")

    def jsonl(self, records: Iterable[Any], stream: IO[str] | None = None) -> int:
        """Write one compact JSON document per line (a str record as it is), through the pipe-safe
        writer in pieces of about 64 KiB; returns the number written. A caller whose records come
        slowly (a live stream) passes them one at a time, so each line is out as it comes."""
        target = stream or sys.stdout
        count = size = 0
        lines: list[str] = []
        for record in records:
            line = record if isinstance(record, str) else to_json(record, indent=None)
            lines.append(line)
            size += len(line) + 1
            count += 1
            if size > WRITE_CHUNK:
                write_text(target, "\n".join(lines) + "\n")
                lines, size = [], 0
        write_text(target, "\n".join(lines) + "\n" if lines else "")
        return count

    def text(self, text: str) -> None:
        """A line of data for people and scripts alike (a path, a profile), control characters made visible."""
        text = terminal_text(text)
        write_text(sys.stdout, text if text.endswith("\n") else text + "\n")

    async def stream(self, pieces: AsyncIterable[str], target: IO[str] | None = None) -> None:
        """Copy streamed text pieces (JSON, JSONL) to stdout or `target` in batches."""
        out = _Batches(target or sys.stdout)
        async for piece in pieces:
            out.add(piece)
        out.flush()

    def pieces(self, pieces: Iterable[str], target: IO[str] | None = None) -> None:
        """`stream` for pieces made in this thread (a document written as it is computed)."""
        out = _Batches(target or sys.stdout)
        for piece in pieces:
            out.add(piece)
        out.flush()

    def table(
        self,
        rows: Sequence[dict[str, Any]],
        columns: Sequence[Column],
        *,
        title: str | None = None,
        empty: str = "nothing to show",
        continued: bool = False,
        to_stderr: bool = False,
    ) -> None:
        """Records as a table for people (fitted on a terminal, plain text off one), or as
        JSONL/CSV/TSV under those flags; a note on stderr when there are none.

        continued: more rows of the table printed just before (no new header off a terminal).
        to_stderr: not data (a plan shown before a question), so it goes to stderr.
        """
        title = safe_text(title)
        if self.fmt is not None and not to_stderr:
            self._machine_table(rows, columns, header=not continued)  # a header even with no rows
            if not rows and not continued:
                self.message(empty)
            return
        if not rows:
            if not continued:
                self.message(empty)
            return
        if to_stderr and self.quiet:
            return
        terminal = is_terminal(self, to_stderr=to_stderr)
        if not terminal or len(rows) > RICH_TABLE_MAX_ROWS:
            if title and not continued:  # a caption, not a record: stderr keeps stdout one record a line
                self.message(title)
            if terminal or to_stderr:  # for people: aligned columns
                stream = (self.err if to_stderr else self.out).file
                self._plain_table(rows, columns, header=not continued, stream=stream)
            else:  # data in a pipe or a file: tab-separated, for cut -f and awk
                self._piped_table(rows, columns, header=not continued)
        else:
            self._rich_table(self.err if to_stderr else self.out, rows, columns, title=title, continued=continued)

    def _rich_table(
        self,
        console: Console,
        rows: Sequence[dict[str, Any]],
        columns: Sequence[Column],
        *,
        title: str | None,
        continued: bool = False,
    ) -> None:
        from rich.table import Table
        from rich.text import Text

        if not self.wide and not self.as_records:
            self._line_table(console, rows, columns, title=title, continued=continued)
            return
        cells = [[person_cell(row.get(col.key), col, time_form(self, col)) for col in columns] for row in rows]
        layout = fit_columns(columns, cells, console.width)
        if self.as_records or layout.records:
            self._record_table(console, columns, cells, layout.shown, title=title, continued=continued)
            return
        table = Table(title=title, header_style="bold", show_edge=False, pad_edge=False)
        for i, w in zip(layout.shown, layout.widths, strict=True):
            col = columns[i]
            table.add_column(
                col.header,
                justify=col.justify,  # type: ignore[arg-type]
                width=w,
                overflow="fold",
                no_wrap=col.whole,
            )
        for line in cells:
            table.add_row(*[Text(line[i]) for i in layout.shown])
        console.print(table, crop=False)

    def _line_table(
        self,
        console: Console,
        rows: Sequence[dict[str, Any]],
        columns: Sequence[Column],
        *,
        title: str | None,
        continued: bool,
    ) -> None:
        """One line per record (`fit_line`): free text elided with `…`, the columns that do not
        fit hidden by the table's declared order and named once on stderr (--wide shows them)."""
        from rich.table import Table
        from rich.text import Text

        cells = [
            [one_line(person_cell(row.get(col.key), col, time_form(self, col))) for col in columns] for row in rows
        ]
        layout = fit_line(columns, cells, console.width)
        if layout.records:
            self._record_table(console, columns, cells, layout.shown, title=title, continued=continued)
            return
        table = Table(title=title, header_style="bold", show_edge=False, pad_edge=False)
        for i, w in zip(layout.shown, layout.widths, strict=True):
            col = columns[i]
            table.add_column(col.header, justify=col.justify, width=w, overflow="ellipsis", no_wrap=True)  # type: ignore[arg-type]
        for line in cells:
            table.add_row(*[Text(line[i], no_wrap=True, overflow="ellipsis") for i in layout.shown])
        console.print(table, crop=False)
        names = tuple(columns[i].header or columns[i].key for i in layout.hidden)
        if names and names not in self._said_hidden:
            self._said_hidden.add(names)
            self.message(f"{counted(len(names), 'column')} hidden ({', '.join(names)}): --wide shows them")

    def _record_table(
        self,
        console: Console,
        columns: Sequence[Column],
        cells: Sequence[Sequence[str]],
        shown: Sequence[int],
        *,
        title: str | None,
        continued: bool,
    ) -> None:
        """One block per row, `field: value` lines (psql's expanded mode): what a table becomes
        when its key and text columns cannot fit beside the rest. Said once on stderr."""
        from rich.cells import cell_len
        from rich.text import Text

        if not self._said_records and not self.as_records:
            self._said_records = True
            self.message(
                f"{console.width} columns are too narrow for the table: one block per row; "
                "widen the terminal for columns, or use --tsv or --json"
            )
        if not continued:
            self._record_n = 0
        labels = {i: (columns[i].header or columns[i].key) + ":" for i in shown}  # a headerless bar: its key
        label_width = max(cell_len(label) for label in labels.values())
        value_width = max(console.width - label_width - 1, 8)
        if title and not continued:
            console.print(Text(title, style="italic"), crop=False)
        for line in cells:
            self._record_n += 1
            head = f"─[ {self._record_n} ]"
            block = Text(head + "─" * max(console.width - cell_len(head), 0))
            for i in shown:
                if not line[i]:
                    continue
                label = labels[i]
                for n, part in enumerate(Text(line[i]).wrap(console, value_width, overflow="fold")):
                    block.append("\n")
                    block.append((label if n == 0 else "").ljust(label_width), style="bold")
                    block.append(" ")
                    block.append_text(part)
            block.rstrip()
            console.print(block, crop=False, soft_wrap=True)

    def _plain_table(
        self, rows: Sequence[dict[str, Any]], columns: Sequence[Column], *, header: bool, stream: IO[str]
    ) -> None:
        """Aligned single-line columns, two spaces apart, never wrapped or cut. Also what a
        terminal gets above RICH_TABLE_MAX_ROWS: Rich lays out about 2,000 rows a second."""
        from rich.cells import cell_len

        cells = [[one_line(person_cell(row.get(col.key), col)) for col in columns] for row in rows]
        widths = [
            max(cell_len(plain_header(col)) if header else 0, *(cell_len(line[i]) for line in cells))
            for i, col in enumerate(columns)
        ]

        def pad(text: str, col: Column, w: int) -> str:
            fill = " " * (w - cell_len(text))
            return fill + text if col.justify == "right" else text + fill

        lines = []
        if header:
            if self._blocks and stream is sys.stdout:
                lines.append("")
            names = [plain_header(c) for c in columns]
            lines.append("  ".join(pad(n, c, w) for n, c, w in zip(names, columns, widths, strict=True)).rstrip())
        for line in cells:
            lines.append("  ".join(pad(t, c, w) for t, c, w in zip(line, columns, widths, strict=True)).rstrip())
        write_text(stream, "\n".join(lines) + "\n")
        if stream is sys.stdout:
            self._blocks += 1

    def _piped_table(self, rows: Sequence[dict[str, Any]], columns: Sequence[Column], *, header: bool) -> None:
        """A table in a pipe or a file: a header of one-word names, then one record a line, its
        fields separated by one tab (as gh does off a terminal). The header holds --tsv's names
        and numbers are plain, so a pipe and --tsv agree on both. A cell never holds a tab or a
        newline, and a time is one word (ISO 8601 UTC), so `cut -f3` and `awk -F'\\t'` take any
        column, and plain `awk '{print $3}'` every column up to the first holding free text."""
        out = sys.stdout
        columns = [c for c in columns if not c.people_only]  # no bars in data
        lines = []
        if header:
            if self._blocks:
                lines.append("")
            lines.append("\t".join(c.key for c in columns))  # the --tsv names
        for row in rows:
            lines.append("\t".join(piped_cell(row.get(col.key), col) for col in columns))
        write_text(out, "\n".join(lines) + "\n")
        self._blocks += 1

    def _machine_table(self, rows: Sequence[dict[str, Any]], columns: Sequence[Column], *, header: bool) -> None:
        """JSONL (one object per row, keyed by column key), CSV or TSV (a header of column keys)."""
        if self.fmt == "jsonl":
            self.jsonl({col.key: machine_value(row.get(col.key), col) for col in columns} for row in rows)
            return
        out = io.StringIO()
        writer = csv.writer(out, lineterminator="\n") if self.fmt == "csv" else None
        if header:
            keys = [col.key for col in columns]
            if writer:
                writer.writerow(keys)
            else:
                out.write("\t".join(keys) + "\n")
        for row in rows:
            values = [machine_text(row.get(col.key), col) for col in columns]
            if writer:
                writer.writerow(values)
            else:
                out.write("\t".join(tsv_escape(v) for v in values) + "\n")
        write_text(sys.stdout, out.getvalue())

    def records(
        self,
        rows: Sequence[dict[str, Any]],
        columns: Sequence[Column],
        *,
        json_rows: Any = None,
        title: str | None = None,
        empty: str = "nothing to show",
    ) -> None:
        """Records as JSON (json_rows if given, else rows) under --json; JSONL of the same
        items under --jsonl when json_rows is a list; else a table (or CSV/TSV)."""
        data = rows if json_rows is None else json_rows
        if self.json_mode:
            self.json(data)
        elif self.fmt == "jsonl" and isinstance(data, list):
            self.jsonl(data)
        else:
            self.table(rows, columns, title=title, empty=empty)

    def when(self, value: datetime | float | None) -> str:
        """A time in a field listing: local time on a terminal, one word (ISO 8601 UTC) off one,
        as in tables."""
        return format_time(value, LOCAL if self.out.is_terminal else SECONDS)

    def fields(self, pairs: Sequence[tuple[str, Any]], *, title: str | None = None) -> None:
        """A two-column key/value listing for people: keys never wrap, values wrap whole."""
        rows = [{"key": terminal_safe(str(k)), "value": v} for k, v in pairs]
        title = safe_text(title)
        columns = [Column.id("", "key"), Column.free("", "value")]
        if not self.out.is_terminal:
            self._plain_fields(rows)
            return
        from rich.table import Table
        from rich.text import Text

        cells = [[str(r["key"]), person_cell(r["value"], columns[1])] for r in rows]
        layout = fit_columns(columns, cells, self.out.width - 1)
        widths = layout.widths
        if layout.records:  # a key wider than the terminal: the value takes what is left
            key_width = max(len(line[0]) for line in cells)
            widths = [key_width, max(self.out.width - 1 - GAP - key_width, 8)][: len(layout.shown)]
        table = Table(title=title, show_header=False, show_edge=False, pad_edge=False, box=None)
        for i, w in zip(layout.shown, widths, strict=True):
            table.add_column(width=w, overflow="fold", no_wrap=columns[i].whole, style="bold" if i == 0 else None)
        for line in cells:
            table.add_row(*[Text(line[i]) for i in layout.shown])
        self.out.print(table, crop=False)

    def _plain_fields(self, rows: list[dict[str, Any]]) -> None:
        width = max((len(str(r["key"])) for r in rows), default=0)
        lines = [""] if self._blocks else []
        for r in rows:
            lines.append(f"{str(r['key']).ljust(width)}  {one_line(person_cell(r['value'], None))}".rstrip())
        write_text(sys.stdout, "\n".join(lines) + "\n" if lines else "")
        self._blocks += 1

    # messages -----------------------------------------------------------------------

    def message(self, text: str) -> None:
        """A progress or status note on stderr; silenced by --quiet."""
        if not self.quiet:
            self._say(text)

    def warn(self, text: str) -> None:
        """A warning on stderr, shown even with --quiet."""
        self._say(f"vmem: warning: {text}", style="yellow")

    def error(self, text: str) -> None:
        """The error message on stderr: one line off a terminal."""
        self._say(f"vmem: error: {text}", style="red")

    def hint(self, text: str) -> None:
        """The line after an error saying what to try."""
        if not self.quiet:
            self._say(f"  hint: {text}", indent="        ")

    def _say(self, text: str, *, style: str | None = None, indent: str = "  ") -> None:
        """A note on stderr: on a terminal wrapped at its width between words (a flag, a path
        or a URL is never split), later lines indented; off one a single line for grep.
        Terminal control characters in it are made visible, never sent."""
        text = terminal_text(text)
        if self.err.is_terminal:
            text = wrap_words(text, self.err.width, indent=indent)
        self.err.print(text, markup=False, style=style, soft_wrap=True)

    @contextmanager
    def progress(self, description: str, total: int | None = None) -> Iterator[Callable[[int], None]]:
        """A progress bar on stderr; yields an advance(n) callable. Hidden with --quiet or off a TTY.

        With a total it shows done/total, the rate and the time left; without one, a count,
        the rate and the time taken."""
        if self.quiet or not self.err.is_terminal:
            yield _no_progress
            return
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
            TimeRemainingColumn,
        )

        bar: Progress = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[rate]}"),
            TimeRemainingColumn() if total is not None else TimeElapsedColumn(),
            console=self.err,
            transient=True,
        )
        with bar:
            task = bar.add_task(description, total=total, rate="")

            def advance(n: int = 1) -> None:
                bar.advance(task, n)
                speed = bar.tasks[0].speed
                bar.update(task, rate=f"{speed:,.1f}/s" if speed else "")

            yield advance

    @contextmanager
    def spinner(self, description: str) -> Iterator[None]:
        """A spinner on stderr while a wait lasts over SPINNER_AFTER seconds (a search, a long
        listing); only on a terminal, never in a pipe or with --quiet, and gone before output.
        A real one: a console merely told it is a terminal (TTY_COMPATIBLE, in tests) gets none."""
        if self.quiet or not isatty(sys.stderr) or not self.err.is_terminal:
            yield
            return
        import threading

        status = self.err.status(description, spinner="dots")
        lock = threading.Lock()
        state = {"done": False, "shown": False}

        def show() -> None:
            with lock:
                if not state["done"]:
                    status.start()
                    state["shown"] = True

        timer = threading.Timer(SPINNER_AFTER, show)
        timer.daemon = True
        timer.start()
        try:
            yield
        finally:
            timer.cancel()
            with lock:
                state["done"] = True
                if state["shown"]:
                    status.stop()

    def confirm(self, question: str) -> bool:
        """Ask y/N on stderr; a closed or non-interactive stdin answers no."""
        if not sys.stdin.isatty():
            return False
        from rich.prompt import Confirm

        return bool(Confirm.ask(terminal_text(question), console=self.err, default=False))


def tsv_escape(text: str) -> str:
    """A TSV field as PostgreSQL's text format writes it: backslash, tab, newline, CR escaped."""
    return text.replace("\\", "\\\\").replace("\t", "\\t").replace("\n", "\\n").replace("\r", "\\r")


def _no_progress(n: int = 1) -> None:
    """The advance() of a hidden progress bar."""


class _Batches:
    """Text pieces gathered into writes of about 64 KiB through the pipe-safe writer."""

    def __init__(self, out: IO[str]) -> None:
        self.out = out
        self.buffer: list[str] = []
        self.size = 0

    def add(self, piece: str) -> None:
        self.buffer.append(piece)
        self.size += len(piece)
        if self.size > 1 << 16:
            self.flush()

    def flush(self) -> None:
        write_text(self.out, "".join(self.buffer))
        self.buffer, self.size = [], 0
