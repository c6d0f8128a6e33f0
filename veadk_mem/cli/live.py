"""The lines of a live timeline (`session watch`) on a terminal: one header, then one line per
event in widths fixed once, so the columns stay put as events come (a table per poll redrew
its header and changed its widths with each batch).

The widths come from the terminal's width alone, never from the events: `#` (the event's
place in the session), the time of day, author and types are cut with `…` to their fixed
widths, and the text takes the rest. The state delta is never cut: it goes on a line of its
own under the event, whole (the terminal wraps it if it must), so a JSON key is not split
at 80 columns. --wide keeps the text whole too (the terminal wraps it).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from veadk_mem.cli.columns import Column, one_line, person_cell
from veadk_mem.timefmt import CLOCK

if TYPE_CHECKING:
    from rich.console import Console

# (record key, header, width, right-justified); the text column takes what is left
FIXED = (
    ("n", "#", 6, True),
    ("time", "time", 8, False),
    ("author", "author", 12, False),
    ("types", "types", 14, False),
)
WIDE_AT = 100  # from this width on, the role is shown as well
ROLE = ("role", "role", 6, False)
TEXT_LEAST = 12  # the text keeps at least this many characters, however narrow the terminal
GAP = 2


class LiveLines:
    """Prints timeline rows as they come, under one header, in widths fixed by the terminal."""

    def __init__(self, console: Console, columns: Sequence[Column], *, wide: bool = False) -> None:
        self.console = console
        self.columns = {c.key: c for c in columns}
        self.wide = wide
        fixed = list(FIXED)
        if console.width >= WIDE_AT:
            fixed.insert(3, ROLE)
        self.fixed = fixed
        used = sum(w for _, _, w, _ in fixed) + GAP * len(fixed)
        self.text_width = max(console.width - used, TEXT_LEAST)
        self._header = False

    def _cell(self, row: dict[str, Any], key: str) -> str:
        col = self.columns.get(key)
        return one_line(person_cell(row.get(key), col, CLOCK))

    @staticmethod
    def _fit(text: str, width: int, right: bool = False) -> str:
        from rich.cells import cell_len, set_cell_size

        if cell_len(text) > width:
            text = set_cell_size(text, width - 1) + "…"
        pad = " " * (width - cell_len(text))
        return pad + text if right else text + pad

    def header(self) -> None:
        """The header line, once."""
        if self._header:
            return
        self._header = True
        from rich.text import Text

        parts = [self._fit(head, w, right) for _, head, w, right in self.fixed]
        line = (" " * GAP).join(parts) + " " * GAP + "text"
        self.console.print(Text(line, style="bold", no_wrap=True), crop=False, soft_wrap=True)

    def rows(self, rows: Sequence[dict[str, Any]]) -> None:
        """One line per event (and the state delta, whole, on a line under it)."""
        from rich.text import Text

        if not rows:
            return
        self.header()
        out = Text()
        indent = " " * (self.fixed[0][2] + GAP)
        for row in rows:
            parts = [self._fit(self._cell(row, key), w, right) for key, _, w, right in self.fixed]
            text = self._cell(row, "text")
            if not self.wide:
                text = self._fit(text, self.text_width).rstrip()
            if out:
                out.append("\n")
            out.append(((" " * GAP).join(parts) + " " * GAP + text).rstrip())
            delta = self._cell(row, "state_delta")
            if delta:
                out.append("\n" + indent)
                out.append("state Δ ", style="dim")
                out.append(delta)
        self.console.print(out, crop=False, soft_wrap=True)
