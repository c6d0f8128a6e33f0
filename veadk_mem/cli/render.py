"""The one output path: core results become a table, plain text, JSON, JSONL, CSV or TSV here
and nowhere else.

Data goes to stdout; messages, plans and progress to stderr. Rich honours NO_COLOR itself.
Tables for people are fitted to the terminal and never lose a character: a cell wraps inside
itself, ids and keys never wrap, identifier-like cells (types, authors, env names, times)
wrap only between words, and the main text keeps a readable width. When that cannot fit, the
table becomes a record layout (one block per row, `field: value` lines) with a note on stderr;
no column is ever left out. Off a terminal a table is tab-separated text, a header line and
one record per line, never wrapped, times ISO 8601 UTC, so grep, cut and awk work. Messages on a terminal wrap at its
width between words; off one every message, warning, error and hint is one line.
"""

from __future__ import annotations

import csv
import re
import sys
from collections.abc import AsyncIterable, Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import IO, TYPE_CHECKING, Any

from veadk_mem.jsonio import dumps, iso_utc

if TYPE_CHECKING:
    from rich.console import Console
    from rich.progress import Progress


SPINNER_AFTER = 1.0  # seconds a wait lasts before a terminal shows a spinner
RICH_TABLE_MAX_ROWS = 1000  # above this, even a terminal gets plain aligned text
TABLE_FORMATS = ("jsonl", "csv", "tsv")  # the machine formats every table-shaped command takes
MIN_WRAP_WIDTH = 10  # the narrowest a folding column is squeezed to
WORD_WIDTH = 20  # a folding column gets room for words this long before long words fold
TEXT_WIDTH = 20  # the main text column's floor (or its whole text, if shorter)
TEXT_WEIGHT = 3  # spare width goes to the main text this many times faster than to the rest
GAP = 3  # a column separator with its padding: " │ "

# What a column holds, which decides how it may be squeezed:
KEY = "key"  # an id people copy into another command: whole on one line, never left out
TEXT = "text"  # the table's main free text: folds long words, keeps TEXT_WIDTH before others grow
FOLD = "fold"  # secondary free text (JSON values, details): wraps and folds like text
WORD = "word"  # identifier-like (types, authors, env names, times, numbers): wraps only between words


@dataclass(frozen=True)
class Column:
    """A table column: header, the record key it shows, an optional formatter, and its kind.

    kind is KEY (ids: whole, never left out), TEXT (the main free text), FOLD (other free
    text) or WORD (the default: identifier-like, wraps only between words). no_wrap keeps a
    cell on one line. max_width caps how wide a wrapping column grows.
    """

    header: str
    key: str
    fmt: Callable[[Any], str] | None = None
    justify: str = "left"
    max_width: int | None = None
    min_width: int | None = None
    no_wrap: bool = False
    is_time: bool = False
    kind: str = WORD

    @classmethod
    def time(cls, header: str, key: str, fmt: Callable[[Any], str] | None = None) -> Column:
        """A time column: local time for people, ISO-8601 UTC in CSV/TSV/JSONL; squeezed, it
        wraps between date and time, never inside the date."""
        return cls(header, key, fmt or local_time, min_width=TIME_WIDTH, is_time=True)

    @classmethod
    def id(cls, header: str, key: str, fmt: Callable[[Any], str] | None = None) -> Column:
        """A key column: an id people copy into another command, whole on one line."""
        return cls(header, key, fmt, no_wrap=True, kind=KEY)

    @classmethod
    def text(cls, header: str, key: str, fmt: Callable[[Any], str] | None = None, **kw: Any) -> Column:
        """The table's main free text: it keeps a readable width, and the table turns into
        records before it is squeezed below that."""
        return cls(header, key, fmt, kind=TEXT, **kw)

    @classmethod
    def free(cls, header: str, key: str, fmt: Callable[[Any], str] | None = None, **kw: Any) -> Column:
        """Secondary free text (a JSON value, a detail): wraps, and folds words too long for it."""
        return cls(header, key, fmt, kind=FOLD, **kw)

    @property
    def whole(self) -> bool:
        """Never wrapped: keys and no_wrap columns."""
        return self.no_wrap or self.kind == KEY


def to_json(data: Any, *, indent: int | None = 2) -> str:
    """Stable JSON for --json output: keys as given, non-ASCII kept, NaN as null (the one encoder)."""
    return dumps(data, indent=indent)


TIME_WIDTH = 10  # a squeezed time column wraps between date and time, never inside the date


def local_time(value: datetime | float | None) -> str:
    """A local time for people: 2026-11-29 21:24:38."""
    if value is None:
        return ""
    if isinstance(value, (int, float)):
        value = datetime.fromtimestamp(value, tz=UTC)
    elif value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    return value.astimezone().strftime("%Y-%m-%d %H:%M:%S")


# C0 controls but tab and newline, DEL, C1 controls (0x9b is a one-byte CSI), the
# bidirectional overrides and isolates that reorder what a terminal shows, and lone
# surrogates (no UTF-8 encoding: printed raw, they fail the write).
_UNSAFE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069\ud800-\udfff]")


def _visible(match: re.Match[str]) -> str:
    code = ord(match[0])
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def terminal_safe(value: Any) -> Any:
    """`value` with escape sequences and control characters made visible (\\x1b), for people.

    Memory text, authors, ids and state come from users and models: printed raw, an ESC
    sequence could clear the screen, retitle the terminal, hide rows or reorder what the
    operator reads. The renderer applies this to every cell, title and message it prints for
    people (JSON escapes them by construction); lists and dicts are cleaned item by item.
    """
    if isinstance(value, str):
        return _UNSAFE.sub(_visible, value)
    if isinstance(value, list):
        return [terminal_safe(v) for v in value]
    if isinstance(value, dict):
        return {terminal_safe(k): terminal_safe(v) for k, v in value.items()}
    return value


def _safe_text(text: str | None) -> str | None:
    return None if text is None else _UNSAFE.sub(_visible, text)


def counted(n: int, noun: str) -> str:
    """'1 app state', '2 app states', '3 memories'."""
    if n == 1:
        return f"1 {noun}"
    plural = noun[:-1] + "ies" if noun.endswith("y") and noun[-2:-1] not in "aeiou" else noun + "s"
    return f"{n:,} {plural}"


def preview(text: str | None, width: int = 80) -> str:
    """One line of text, cut to width with an ellipsis (for messages, never for table cells)."""
    if not text:
        return ""
    flat = " ".join(text.split())
    return flat if len(flat) <= width else flat[: width - 1] + "…"


def one_line(text: str) -> str:
    """Text with every run of whitespace (newlines included) made one space: nothing is cut."""
    return " ".join(text.split())


@dataclass(frozen=True)
class ColumnFit:
    """Where a table's columns go on a terminal: the shown columns and their widths, or
    records=True when key and text cannot fit beside the rest (one block per row instead)."""

    shown: list[int]
    widths: list[int]
    records: bool = False


def fit_columns(columns: Sequence[Column], cells: Sequence[Sequence[str]], width: int) -> ColumnFit:
    """Give each column a width so the table fits `width` without cutting a character.

    Each column starts at its floor: whole cells for keys and no_wrap columns, the longest
    word for identifier-like (WORD) columns, TEXT_WIDTH (or the whole text) for the main
    text, the longest header word or MIN_WRAP_WIDTH for other free text. When the floors do
    not fit, the layout is records (a block per row). Otherwise, cheapest first, free text
    gets room for its longest word (up to WORD_WIDTH); then short columns get their whole
    width (a time on one line) while the main text keeps 1.5 times its floor; what is left goes
    to the columns in proportion to what they lack of their natural width (capped by
    max_width), the main text TEXT_WEIGHT times faster. Columns with no text are not drawn.
    """
    from rich.cells import cell_len

    def lines(i: int) -> Iterator[str]:
        for row in cells:
            yield from row[i].splitlines() or [""]

    shown = [i for i, col in enumerate(columns) if any(row[i] for row in cells)]
    high: dict[int, int] = {}
    word: dict[int, int] = {}
    floor: dict[int, int] = {}
    for i in shown:
        col = columns[i]
        natural = max(cell_len(col.header), *(cell_len(line) for line in lines(i)))
        longest = max((cell_len(w) for line in lines(i) for w in line.split()), default=0)
        header_word = max((cell_len(w) for w in col.header.split()), default=1)
        if col.whole:
            high[i] = word[i] = floor[i] = natural
            continue
        high[i] = max(min(natural, col.max_width), longest) if col.max_width else natural
        if col.kind == TEXT:
            floor[i] = min(max(TEXT_WIDTH, col.min_width or 0, header_word), high[i])
        elif col.kind == FOLD:
            floor[i] = min(max(min(header_word, 12), MIN_WRAP_WIDTH, col.min_width or 0), high[i])
        else:  # WORD: never folds a word
            high[i] = max(high[i], longest)
            floor[i] = max(min(header_word, 12), longest, min(col.min_width or 0, natural), 1)
        word[i] = max(floor[i], min(max(floor[i], min(longest, WORD_WIDTH)), high[i]))

    room = width - GAP * (len(shown) - 1)
    if len(shown) > 1 and sum(floor[i] for i in shown) > room:
        return ColumnFit(shown, [], records=True)
    widths = {i: floor[i] for i in shown}
    spare = room - sum(widths.values())
    for i in sorted(shown, key=lambda j: word[j] - floor[j]):
        if 0 < word[i] - widths[i] <= spare:
            spare -= word[i] - widths[i]
            widths[i] = word[i]
    # a short column whole (a time on one line) when the main text still keeps 1.5 times its floor
    reserve = sum(max(min(high[i], TEXT_WIDTH * 3 // 2) - widths[i], 0) for i in shown if columns[i].kind == TEXT)
    for i in sorted((j for j in shown if columns[j].kind != TEXT), key=lambda j: high[j] - widths[j]):
        if 0 < high[i] - widths[i] <= spare - reserve:
            spare -= high[i] - widths[i]
            widths[i] = high[i]
    lacking = {i: (high[i] - widths[i]) * (TEXT_WEIGHT if columns[i].kind == TEXT else 1) for i in shown}
    lacking = {i: lack for i, lack in lacking.items() if lack > 0}
    total = sum(lacking.values())
    if total and spare > 0:
        for i, lack in lacking.items():
            widths[i] += min(high[i] - widths[i], spare * lack // total)
        spare = room - sum(widths.values())
        for i in sorted(lacking, key=lambda j: (columns[j].kind != TEXT, widths[j] - high[j])):  # leftovers
            give = min(spare, high[i] - widths[i])
            widths[i] += give
            spare -= give
    if len(shown) == 1:
        widths[shown[0]] = min(widths[shown[0]], max(width, 1))
    return ColumnFit(shown, [widths[i] for i in shown])


class Renderer:
    """Writes data and messages according to the global --json / --quiet / format flags."""

    def __init__(
        self, *, json_mode: bool = False, quiet: bool = False, verbose: bool = False, fmt: str | None = None
    ) -> None:
        self.json_mode = json_mode
        self.quiet = quiet
        self.verbose = verbose
        self.fmt = fmt  # jsonl, csv or tsv for table-shaped output; None: a table or plain text
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
        """Write one compact JSON document per line; returns the number written."""
        target = stream or sys.stdout
        count = 0
        for record in records:
            target.write(record if isinstance(record, str) else to_json(record, indent=None))
            target.write("\n")
            count += 1
        target.flush()
        return count

    def text(self, text: str) -> None:
        """A line of data for people and scripts alike (a path, a profile), control characters made visible."""
        text = _UNSAFE.sub(_visible, text)
        write_text(sys.stdout, text if text.endswith("\n") else text + "\n")

    async def stream(self, pieces: AsyncIterable[str], target: IO[str] | None = None) -> None:
        """Copy streamed text pieces (JSON, JSONL) to stdout or `target` in batches."""
        out = target or sys.stdout
        buffer: list[str] = []
        size = 0
        async for piece in pieces:
            buffer.append(piece)
            size += len(piece)
            if size > 1 << 16:
                write_text(out, "".join(buffer))
                buffer, size = [], 0
        write_text(out, "".join(buffer))

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
        title = _safe_text(title)
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
        console = self.err if to_stderr else self.out
        if not console.is_terminal or len(rows) > RICH_TABLE_MAX_ROWS:
            if title and not continued:  # a caption, not a record: stderr keeps stdout one record a line
                self.message(title)
            if console.is_terminal or to_stderr:  # for people: aligned columns
                self._plain_table(rows, columns, header=not continued, stream=console.file)
            else:  # data in a pipe or a file: tab-separated, for cut -f and awk
                self._piped_table(rows, columns, header=not continued)
        else:
            self._rich_table(console, rows, columns, title=title, continued=continued)

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

        cells = [[_person_cell(row.get(col.key), col) for col in columns] for row in rows]
        layout = fit_columns(columns, cells, console.width)
        if layout.records:
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

        if not self._said_records:
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

        cells = [[one_line(_person_cell(row.get(col.key), col)) for col in columns] for row in rows]
        widths = [
            max(cell_len(plain_header(col)) if header else 0, *(cell_len(line[i]) for line in cells))
            for i, col in enumerate(columns)
        ]

        def pad(text: str, col: Column, w: int) -> str:
            fill = " " * (w - cell_len(text))
            return fill + text if col.justify == "right" else text + fill

        if header:
            if self._blocks and stream is sys.stdout:
                stream.write("\n")
            names = [plain_header(c) for c in columns]
            stream.write(
                "  ".join(pad(n, c, w) for n, c, w in zip(names, columns, widths, strict=True)).rstrip() + "\n"
            )
        for line in cells:
            stream.write("  ".join(pad(t, c, w) for t, c, w in zip(line, columns, widths, strict=True)).rstrip() + "\n")
        stream.flush()
        if stream is sys.stdout:
            self._blocks += 1

    def _piped_table(self, rows: Sequence[dict[str, Any]], columns: Sequence[Column], *, header: bool) -> None:
        """A table in a pipe or a file: a header of one-word names, then one record a line, its
        fields separated by one tab (as gh does off a terminal). A cell never holds a tab or a
        newline, and a time is one word (ISO 8601 UTC), so `cut -f3` and `awk -F'\\t'` take any
        column, and plain `awk '{print $3}'` every column up to the first holding free text."""
        out = sys.stdout
        lines = []
        if header:
            if self._blocks:
                lines.append("")
            lines.append("\t".join(plain_header(c) for c in columns))
        for row in rows:
            lines.append("\t".join(_piped_cell(row.get(col.key), col) for col in columns))
        write_text(out, "\n".join(lines) + "\n")
        self._blocks += 1

    def _machine_table(self, rows: Sequence[dict[str, Any]], columns: Sequence[Column], *, header: bool) -> None:
        """JSONL (one object per row, keyed by column key), CSV or TSV (a header of column keys)."""
        out = sys.stdout
        if self.fmt == "jsonl":
            self.jsonl({col.key: _machine_value(row.get(col.key), col) for col in columns} for row in rows)
            return
        writer = csv.writer(out, lineterminator="\n") if self.fmt == "csv" else None
        if header:
            keys = [col.key for col in columns]
            if writer:
                writer.writerow(keys)
            else:
                out.write("\t".join(keys) + "\n")
        for row in rows:
            values = [_machine_text(row.get(col.key), col) for col in columns]
            if writer:
                writer.writerow(values)
            else:
                out.write("\t".join(tsv_escape(v) for v in values) + "\n")
        out.flush()

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
        return local_time(value) if self.out.is_terminal else _iso_seconds(value)

    def fields(self, pairs: Sequence[tuple[str, Any]], *, title: str | None = None) -> None:
        """A two-column key/value listing for people: keys never wrap, values wrap whole."""
        rows = [{"key": terminal_safe(str(k)), "value": v} for k, v in pairs]
        title = _safe_text(title)
        columns = [Column.id("", "key"), Column.free("", "value")]
        if not self.out.is_terminal:
            self._plain_fields(rows)
            return
        from rich.table import Table
        from rich.text import Text

        cells = [[str(r["key"]), _person_cell(r["value"], columns[1])] for r in rows]
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
        if self._blocks:
            sys.stdout.write("\n")
        for r in rows:
            line = f"{str(r['key']).ljust(width)}  {one_line(_person_cell(r['value'], None))}"
            sys.stdout.write(line.rstrip() + "\n")
        sys.stdout.flush()
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
        text = _UNSAFE.sub(_visible, text)
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
        if self.quiet or not self.err.is_terminal or not _isatty(sys.stderr):
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

        return bool(Confirm.ask(_UNSAFE.sub(_visible, question), console=self.err, default=False))


WRITE_CHUNK = 1 << 16  # bytes per write: a pipe takes 64 KiB at a time


def write_text(out: IO[str], text: str) -> None:
    """Write `text` whole and flush, so that a reader that went away ends the run with 141.

    Unbuffered (PYTHONUNBUFFERED, `python -u`) stdout's binary layer is the raw file, whose
    write may take part of the bytes when the pipe's reader leaves mid-write, and the text
    layer reports that as success: the rest was lost and vmem exited 0. The bytes go to the
    binary layer here, and what a write did not take is written again, which raises
    BrokenPipeError (the app's exit 141: `vmem ... --json | head`).
    """
    binary = getattr(out, "buffer", None)
    if binary is None:  # a text stream of the program's own (tests, StringIO)
        out.write(text)
        out.flush()
        return
    out.flush()  # what went through the text layer first stays first
    encoding, errors = getattr(out, "encoding", None) or "utf-8", getattr(out, "errors", None) or "strict"
    data = memoryview(text.encode(encoding, errors))
    while data:
        written = binary.write(data[:WRITE_CHUNK])
        if written is None:  # a non-blocking stdout that is full: wait until it takes more
            import select

            select.select([], [binary], [])
            continue
        data = data[written:]
    binary.flush()


def plain_header(col: Column) -> str:
    """A header off a terminal: one word ("session_id"), so awk's fields in the header line
    up with the data's."""
    return "_".join(col.header.split()) or "-"


def wrap_words(text: str, width: int, *, indent: str = "  ") -> str:
    """Text wrapped at `width` between words only: a word longer than the line (a URL, a
    path, a flag) stands alone on its line rather than being split."""
    import textwrap

    return "\n".join(
        textwrap.fill(
            line,
            width=max(width, len(indent) + 10),
            subsequent_indent=indent,
            break_long_words=False,
            break_on_hyphens=False,
        )
        or line
        for line in text.splitlines() or [""]
    )


def tsv_escape(text: str) -> str:
    """A TSV field as PostgreSQL's text format writes it: backslash, tab, newline, CR escaped."""
    return text.replace("\\", "\\\\").replace("\t", "\\t").replace("\n", "\\n").replace("\r", "\\r")


def _person_cell(value: Any, col: Column | None) -> str:
    """A cell for people, control characters made visible: the column's formatter, else JSON
    for dicts and lists, else str()."""
    return _UNSAFE.sub(_visible, _cell_text(value, col))


def _cell_text(value: Any, col: Column | None) -> str:
    if col is not None and col.fmt is not None:
        return str(col.fmt(value))
    if value is None:
        return ""
    if isinstance(value, (dict, list)):
        return to_json(value, indent=None)
    return str(value)


def _piped_cell(value: Any, col: Column) -> str:
    """A cell of a piped table: as people see it but on one line, and a time as one word,
    ISO 8601 UTC to the second (2025-12-06T08:00:07Z)."""
    if col.is_time:
        return _safe_text(one_line(_iso_seconds(value))) or ""
    return one_line(_person_cell(value, col))


def _iso_seconds(value: Any) -> str:
    if value is None or value == "":
        return ""
    if isinstance(value, str):
        try:
            value = datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            return value  # a hosted backend's own time format, as it came
    text = iso_utc(value) or ""
    return re.sub(r"\.\d+Z$", "Z", text)


def _machine_value(value: Any, col: Column) -> Any:
    """A JSONL value: times as ISO-8601 UTC, everything else as it is."""
    if col.is_time:
        return _iso_any(value)
    return value


def _machine_text(value: Any, col: Column) -> str:
    """A CSV/TSV field: times as ISO-8601 UTC, dicts and lists as compact JSON, nothing shortened."""
    if col.is_time:
        return _iso_any(value) or ""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float, str)):
        return str(value)  # numbers unrounded, text unshortened
    if col.fmt is not None:
        return str(col.fmt(value))
    if isinstance(value, (dict, list)):
        return to_json(value, indent=None)
    return str(value)


def _iso_any(value: Any) -> str | None:
    if value is None or value == "":
        return None
    if isinstance(value, (int, float, datetime)):
        return iso_utc(value)
    return str(value)  # already a time string, as a hosted backend gave it


def _isatty(stream: IO[str]) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


def _no_progress(n: int = 1) -> None:
    """The advance() of a hidden progress bar."""
