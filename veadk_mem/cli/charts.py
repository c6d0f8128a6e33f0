"""Small text charts for people: bars, sparklines, byte sizes (never in machine output)."""

from __future__ import annotations

from collections.abc import Sequence

_BLOCKS = "▁▂▃▄▅▆▇█"
_EIGHTHS = " ▏▎▍▌▋▊▉█"


def bar(value: float, largest: float, width: int = 24) -> str:
    """A horizontal bar of `value` against `largest`, in eighths of a character; a sliver for any non-zero value."""
    if largest <= 0 or value <= 0:
        return ""
    eighths = max(1, round(value / largest * width * 8))
    full, rest = divmod(eighths, 8)
    return "█" * full + (_EIGHTHS[rest] if rest else "")


def sparkline(values: Sequence[float]) -> str:
    """One block character per value, scaled to the largest; zero is the lowest block."""
    top = max(values, default=0)
    if top <= 0:
        return _BLOCKS[0] * len(values)
    return "".join(_BLOCKS[min(len(_BLOCKS) - 1, round(v / top * (len(_BLOCKS) - 1)))] for v in values)


def human_bytes(n: int | None) -> str:
    """1536 -> '1.5 KB' (powers of 1024, one decimal above bytes)."""
    if n is None:
        return ""
    size = float(n)
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if size < 1024 or unit == "TB":
            return f"{int(size)} B" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{n} B"
