"""Times and durations as operators type them: `7d`, `12h`, `2026-11-01`, `2026-11-01T10:00Z`."""

from __future__ import annotations

import time
from datetime import UTC, datetime

from veadk_mem.errors import BadInput
from veadk_mem.timefmt import DURATION

_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
_DURATION = DURATION


_MAX_SECONDS = 1000 * 365.25 * 86400  # further back than any time column holds (MySQL: year 1000)


def parse_duration(text: str, option: str = "--older-than") -> float:
    """`30d`, `12h`, `90m`, `2w`, `45s` -> seconds."""
    match = _DURATION.match(text)
    if not match:
        raise BadInput(f"{option}: expected a duration such as 30d, 12h, 90m or 2w, got {text!r}")
    seconds = float(match[1]) * _UNITS[match[2].lower()]
    if seconds > _MAX_SECONDS:
        raise BadInput(f"{option}: {text} is more than 1,000 years")
    return seconds


def parse_time(text: str, option: str = "--since", now: float | None = None) -> float:
    """An ISO date or date-time (UTC unless it names a zone), or a duration meaning that long ago -> epoch."""
    if _DURATION.match(text):
        return (time.time() if now is None else now) - parse_duration(text, option)
    value = text.strip()
    if value.endswith(("Z", "z")):
        value = value[:-1] + "+00:00"
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        raise BadInput(
            f"{option}: expected an ISO date or time (2026-11-01, 2026-11-01T10:00Z) or 7d, got {text!r}"
        ) from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.timestamp()
