"""The one output path: core results become a Rich table, JSON or JSONL here and nowhere else.

Data goes to stdout, messages and progress to stderr. Rich honours NO_COLOR itself. Every
message, warning, error and hint is one line however long: a terminal wraps it for people,
and logs and pipes keep it whole for grep.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import IO, TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rich.console import Console
    from rich.progress import Progress


RICH_TABLE_MAX_ROWS = 1000  # above this, tables are written as plain aligned text
PLAIN_CELL_MAX = 80


@dataclass(frozen=True)
class Column:
    """A table column: header, the record key it shows, and an optional formatter."""

    header: str
    key: str
    fmt: Callable[[Any], str] | None = None
    justify: str = "left"
    max_width: int | None = None
    min_width: int | None = None
    no_wrap: bool = False  # ids people copy into another command: other columns give way first

    @classmethod
    def time(cls, header: str, key: str, fmt: Callable[[Any], str] | None = None) -> Column:
        """A time column (local time by default) that, squeezed, wraps between date and time."""
        return cls(header, key, fmt or local_time, min_width=TIME_WIDTH)


def to_json(data: Any, *, indent: int | None = 2) -> str:
    """Stable JSON for --json output: keys as given, non-ASCII kept."""
    return json.dumps(data, ensure_ascii=False, indent=indent, default=_json_default)


def _json_default(value: Any) -> Any:
    if isinstance(value, datetime):
        return iso_utc(value)
    if hasattr(value, "model_dump"):
        return value.model_dump(mode="json", by_alias=True, exclude_none=True)
    raise TypeError(f"not JSON serialisable: {type(value).__name__}")


def iso_utc(value: datetime | float | None) -> str | None:
    """An ISO-8601 UTC time for JSON output."""
    if value is None:
        return None
    if isinstance(value, (int, float)):
        value = datetime.fromtimestamp(value, tz=UTC)
    elif value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    return value.astimezone(UTC).isoformat().replace("+00:00", "Z")


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


def counted(n: int, noun: str) -> str:
    """'1 app state', '2 app states', '3 memories'."""
    if n == 1:
        return f"1 {noun}"
    plural = noun[:-1] + "ies" if noun.endswith("y") and noun[-2:-1] not in "aeiou" else noun + "s"
    return f"{n:,} {plural}"


def preview(text: str | None, width: int = 80) -> str:
    """One line of text, cut to width with an ellipsis."""
    if not text:
        return ""
    flat = " ".join(text.split())
    return flat if len(flat) <= width else flat[: width - 1] + "…"


class Renderer:
    """Writes data and messages according to the global --json / --quiet flags."""

    def __init__(self, *, json_mode: bool = False, quiet: bool = False, verbose: bool = False) -> None:
        self.json_mode = json_mode
        self.quiet = quiet
        self.verbose = verbose
        self._out: Console | None = None
        self._err: Console | None = None

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

    # data ---------------------------------------------------------------------------

    def json(self, data: Any) -> None:
        """Print a JSON document on stdout."""
        sys.stdout.write(to_json(data) + "\n")
        sys.stdout.flush()

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

    def table(
        self,
        rows: Sequence[dict[str, Any]],
        columns: Sequence[Column],
        *,
        title: str | None = None,
        empty: str = "nothing to show",
    ) -> None:
        """Print records as a Rich table, or a note on stderr when there are none."""
        if not rows:
            self.message(empty)
            return
        if len(rows) > RICH_TABLE_MAX_ROWS:
            self._plain_table(rows, columns, title=title)
            return
        from rich.table import Table

        table = Table(title=title, header_style="bold", show_edge=False, pad_edge=False)
        for col in columns:
            table.add_column(
                col.header,
                justify=col.justify,  # type: ignore[arg-type]
                min_width=col.min_width,
                max_width=col.max_width,
                overflow="fold",
                no_wrap=col.no_wrap,
            )
        for row in rows:
            table.add_row(*[_cell(row.get(col.key), col.fmt) for col in columns])
        self.out.print(table)

    def _plain_table(self, rows: Sequence[dict[str, Any]], columns: Sequence[Column], *, title: str | None) -> None:
        """Aligned single-line columns without Rich: Rich lays out about 2,000 rows a second,
        too slow for a 20,000-event timeline, which people page or grep anyway."""
        cells = [[_plain_cell(row.get(col.key), col) for col in columns] for row in rows]
        widths = [
            max(len(col.header), *(len(line[i]) for line in cells)) if cells else len(col.header)
            for i, col in enumerate(columns)
        ]
        out = sys.stdout
        if title:
            out.write(title + "\n")
        out.write("  ".join(col.header.ljust(w) for col, w in zip(columns, widths, strict=True)).rstrip() + "\n")
        out.write("  ".join("-" * w for w in widths) + "\n")
        for line in cells:
            padded = (
                cell.rjust(w) if col.justify == "right" else cell.ljust(w)
                for cell, col, w in zip(line, columns, widths, strict=True)
            )
            out.write("  ".join(padded).rstrip() + "\n")
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
        """Records as JSON (json_rows if given, else rows) under --json, else as a table."""
        if self.json_mode:
            self.json(rows if json_rows is None else json_rows)
        else:
            self.table(rows, columns, title=title, empty=empty)

    def fields(self, pairs: Sequence[tuple[str, Any]], *, title: str | None = None) -> None:
        """A two-column key/value listing for people."""
        from rich.table import Table

        table = Table(title=title, show_header=False, show_edge=False, pad_edge=False, box=None)
        table.add_column(style="bold")
        table.add_column(overflow="fold")
        for key, value in pairs:
            table.add_row(key, _cell(value, None))
        self.out.print(table)

    # messages -----------------------------------------------------------------------

    def message(self, text: str) -> None:
        """A progress or status note on stderr; silenced by --quiet."""
        if not self.quiet:
            self.err.print(text, markup=False, soft_wrap=True)

    def warn(self, text: str) -> None:
        """A warning on stderr, shown even with --quiet."""
        self.err.print(f"vmem: warning: {text}", markup=False, style="yellow", soft_wrap=True)

    def error(self, text: str) -> None:
        """The one-line error message on stderr."""
        self.err.print(f"vmem: error: {text}", markup=False, style="red", soft_wrap=True)

    def hint(self, text: str) -> None:
        """The line after an error saying what to try."""
        if not self.quiet:
            self.err.print(f"  hint: {text}", markup=False, soft_wrap=True)

    @contextmanager
    def progress(self, description: str, total: int | None = None) -> Iterator[Callable[[int], None]]:
        """A progress bar on stderr; yields an advance(n) callable. Hidden with --quiet or off a TTY."""
        if self.quiet or not self.err.is_terminal:
            yield _no_progress
            return
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        bar: Progress = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=self.err,
            transient=True,
        )
        with bar:
            task = bar.add_task(description, total=total)

            def advance(n: int = 1) -> None:
                bar.advance(task, n)

            yield advance

    def confirm(self, question: str) -> bool:
        """Ask y/N on stderr; a closed or non-interactive stdin answers no."""
        if not sys.stdin.isatty():
            return False
        from rich.prompt import Confirm

        return bool(Confirm.ask(question, console=self.err, default=False))


def _plain_cell(value: Any, col: Column) -> str:
    if col.fmt is not None:
        text = str(col.fmt(value))
    elif value is None:
        text = ""
    elif isinstance(value, (dict, list)):
        text = to_json(value, indent=None)
    else:
        text = str(value)
    text = " ".join(text.split())
    limit = col.max_width or PLAIN_CELL_MAX
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _no_progress(n: int = 1) -> None:
    """The advance() of a hidden progress bar."""


def _cell(value: Any, fmt: Callable[[Any], str] | None) -> Any:
    if fmt is not None:
        return fmt(value)
    if value is None:
        return ""
    if isinstance(value, (dict, list)):
        return to_json(value, indent=None)
    from rich.text import Text

    return Text(str(value))
