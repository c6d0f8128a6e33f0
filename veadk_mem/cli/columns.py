"""The column model of vmem's tables: what a column holds, its cell in each output form, and
how wide each column may be on a terminal.

On a terminal a table keeps one line per record (`fit_line`), as gh and kubectl do: keys and
identifier-like cells whole, free text elided with `…`, and columns hidden in the order each
table declares (`Column.drop`) when the rest does not fit. Under --wide (`fit_columns`) a cell
never loses a character: ids never wrap, identifier-like cells wrap only between words, the
main text keeps a readable width, and when that cannot fit the table turns into records.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from veadk_mem.cli.terminal import terminal_text
from veadk_mem.jsonio import dumps
from veadk_mem.timefmt import ISO, LOCAL, SECONDS, TimeForm, format_time

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


TIME_WIDTH = 10  # a squeezed time column wraps between date and time, never inside the date
LINE_TEXT = 20  # on one line, the main text is elided to no fewer characters before columns are hidden
LINE_FOLD = 10  # and secondary free text to no fewer than this
LINE_LEAST = 6  # the fewest characters an elided cell keeps when the table fits no other way


@dataclass(frozen=True)
class Column:
    """A table column: header, the record key it shows, an optional formatter, and its kind.

    kind is KEY (ids: whole, never left out), TEXT (the main free text), FOLD (other free
    text) or WORD (the default: identifier-like, wraps only between words). no_wrap keeps a
    cell on one line. max_width caps how wide a wrapping column grows. drop: 0 never hidden;
    else, when a one-line table does not fit, the column with the highest drop goes first.
    clock: a time shown as a time of day on a terminal (a timeline) rather than an age.
    people_only: a drawing for people (a bar), left out of piped output.
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
    drop: int = 0
    clock: bool = False
    people_only: bool = False

    @classmethod
    def time(cls, header: str, key: str, *, drop: int = 0, clock: bool = False) -> Column:
        """A time column: compact on a terminal (3d ago, or 12:04:31 with clock), local time
        under --wide, ISO-8601 UTC in CSV/TSV/JSONL; squeezed under --wide, it wraps between
        date and time, never inside the date."""
        return cls(header, key, format_time, min_width=TIME_WIDTH, is_time=True, drop=drop, clock=clock)

    @classmethod
    def id(cls, header: str, key: str, fmt: Callable[[Any], str] | None = None) -> Column:
        """A key column: an id people copy into another command, whole on one line, never hidden."""
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

    @property
    def elided(self) -> bool:
        """Free text, which a one-line table shortens with `…` to fit."""
        return self.kind in (TEXT, FOLD)


@dataclass(frozen=True)
class ColumnFit:
    """Where a table's columns go on a terminal: the shown columns and their widths, or
    records=True when key and text cannot fit beside the rest (one block per row instead)."""

    shown: list[int]
    widths: list[int]
    records: bool = False
    hidden: tuple[int, ...] = ()


def fit_line(columns: Sequence[Column], cells: Sequence[Sequence[str]], width: int) -> ColumnFit:
    """Widths for a table of one line per record (cells already on one line) within `width`.

    Keys and identifier-like cells are whole; free text takes what is left, down to LINE_TEXT
    (main text) or LINE_FOLD characters, elided with `…`. While that does not fit, the column
    with the highest `drop` is hidden (named in `hidden`); then free text gives way down to
    LINE_LEAST. Only when even that does not fit is the layout records. Spare width goes to the
    free text, the main text TEXT_WEIGHT times faster, never past its whole length.
    """
    from rich.cells import cell_len

    shown = [i for i, col in enumerate(columns) if any(row[i] for row in cells)]
    natural = {i: max(cell_len(columns[i].header), *(cell_len(row[i]) for row in cells)) for i in shown}

    def floor(i: int, least: bool) -> int:
        col = columns[i]
        if not col.elided:
            return natural[i]
        wanted = LINE_LEAST if least else LINE_TEXT if col.kind == TEXT else LINE_FOLD
        return min(natural[i], max(wanted, min(cell_len(col.header), 12)))

    def need(cols: list[int], least: bool = False) -> int:
        return sum(floor(i, least) for i in cols) + GAP * (len(cols) - 1)

    order = sorted((i for i in shown if columns[i].drop), key=lambda i: (-columns[i].drop, -i))
    hidden: list[int] = []
    while need(shown) > width and order:
        gone = order.pop(0)
        hidden.append(gone)
        shown = [i for i in shown if i != gone]
    least = need(shown) > width
    if len(shown) > 1 and need(shown, least) > width:
        return ColumnFit(shown, [], records=True)
    widths = {i: floor(i, least) for i in shown}
    spare = width - need(shown, least)
    lacking = {i: (natural[i] - widths[i]) * (TEXT_WEIGHT if columns[i].kind == TEXT else 1) for i in shown}
    lacking = {i: lack for i, lack in lacking.items() if lack > 0}
    total = sum(lacking.values())
    if total and spare > 0:
        for i, lack in lacking.items():
            widths[i] += min(natural[i] - widths[i], spare * lack // total)
        spare = width - sum(widths.values()) - GAP * (len(shown) - 1)
        for i in sorted(lacking, key=lambda j: columns[j].kind != TEXT):  # leftovers, the main text first
            give = min(spare, natural[i] - widths[i])
            widths[i] += give
            spare -= give
    if len(shown) == 1:
        widths[shown[0]] = min(widths[shown[0]], max(width, 1))
    return ColumnFit(shown, [widths[i] for i in shown], hidden=tuple(sorted(hidden)))


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


def plain_header(col: Column) -> str:
    """A header of aligned text for people off a terminal (a summary on stderr): one word
    ("memories_saved"), so awk's fields in the header line up with the data's."""
    return "_".join(col.header.split()) or "-"


def person_cell(value: Any, col: Column | None, times: TimeForm = LOCAL) -> str:
    """A cell for people, control characters made visible: a time in the form `times`, else
    the column's formatter, else JSON for dicts and lists, else str()."""
    if col is not None and col.is_time:
        return terminal_text(format_time(value, times))
    return terminal_text(_cell_text(value, col))


def _cell_text(value: Any, col: Column | None) -> str:
    if col is not None and col.fmt is not None:
        return str(col.fmt(value))
    if value is None:
        return ""
    if isinstance(value, (dict, list)):
        return dumps(value, indent=None)
    return str(value)


def piped_cell(value: Any, col: Column) -> str:
    """A cell of a piped table: as people see it but on one line, a number plain (1234567,
    not 1,234,567 or 1.2 MB), and a time as one word, ISO 8601 UTC to the second
    (2025-12-06T08:00:07Z)."""
    if col.is_time:
        return terminal_text(one_line(format_time(value, SECONDS)))
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return str(value)
    return one_line(person_cell(value, col))


def machine_value(value: Any, col: Column) -> Any:
    """A JSONL value: times as ISO-8601 UTC, everything else as it is."""
    if col.is_time:
        return format_time(value, ISO) or None
    return value


def machine_text(value: Any, col: Column) -> str:
    """A CSV/TSV field: times as ISO-8601 UTC, dicts and lists as compact JSON, nothing shortened."""
    if col.is_time:
        return format_time(value, ISO)
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float, str)):
        return str(value)  # numbers unrounded, text unshortened
    if col.fmt is not None:
        return str(col.fmt(value))
    if isinstance(value, (dict, list)):
        return dumps(value, indent=None)
    return str(value)


def one_line(text: str) -> str:
    """Text with every run of whitespace (newlines included) made one space: nothing is cut."""
    return " ".join(text.split())
