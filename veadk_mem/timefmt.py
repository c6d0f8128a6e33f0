"""The one time formatter: a time as people read it, as one word in a pipe, or as ISO 8601 for
machines, from whatever a store gave (epoch seconds, a datetime, an ISO string).

A naive time is UTC (ADK and the stores write UTC). A string that is no ISO time (a hosted
backend's own format) is shown as it came, and machine output (JSONL, CSV, TSV) never
rewrites a string a store gave.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Any, Literal

from veadk_mem.jsonio import iso_utc

# A duration as operators type it (`30d`, `12h`, `90m`, `2w`, `45s`): the one pattern, for
# timespec (--older-than) and config ([retention] max_age) alike.
DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhdw])\s*$", re.IGNORECASE)

TimeForm = Literal["local", "seconds", "iso", "age", "clock"]
LOCAL: TimeForm = "local"  # for people: local time to the second, 2026-11-29 21:24:38
SECONDS: TimeForm = "seconds"  # one word for grep and awk: ISO 8601 UTC to the second, 2025-12-06T08:00:07Z
ISO: TimeForm = "iso"  # machine formats: ISO 8601 UTC, fractions kept; a string as the store gave it
AGE: TimeForm = "age"  # a table cell on a terminal, as kubectl's AGE: 45s ago, 5h ago, 3d ago; a date past 30 days
CLOCK: TimeForm = "clock"  # a timeline's cell on a terminal: 12:04:31 today, 12-01 12:04 another day (local)


def format_time(value: Any, form: TimeForm = LOCAL) -> str:
    """`value` (epoch seconds, a datetime, an ISO string; None or "" for none) in `form`;
    "" when there is no time."""
    if value is None or value == "":
        return ""
    if isinstance(value, str):
        if form == ISO:
            return value
        try:
            value = datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            return value
    if not isinstance(value, (int, float, datetime)):
        return str(value)
    if form in (AGE, CLOCK):
        return _compact(value, form)
    if form == LOCAL:
        moment = datetime.fromtimestamp(value, tz=UTC) if not isinstance(value, datetime) else value
        if moment.tzinfo is None:
            moment = moment.replace(tzinfo=UTC)
        return moment.astimezone().strftime("%Y-%m-%d %H:%M:%S")
    text = iso_utc(value) or ""
    return re.sub(r"\.\d+Z$", "Z", text) if form == SECONDS else text


def _compact(value: float | datetime, form: TimeForm) -> str:
    """A time in a few characters, for a table that keeps one line per record."""
    import time

    moment = datetime.fromtimestamp(value, tz=UTC) if not isinstance(value, datetime) else value
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    local = moment.astimezone()
    today = datetime.now().astimezone().date()
    if form == CLOCK:
        return local.strftime("%H:%M:%S" if local.date() == today else "%m-%d %H:%M")
    ago = time.time() - moment.timestamp()
    if ago < 0:  # a clock ahead of ours: the time itself
        return local.strftime("%H:%M" if local.date() == today else "%Y-%m-%d")
    for unit, seconds in (("s", 60), ("m", 3600), ("h", 86400), ("d", 30 * 86400)):
        if ago < seconds:
            step = {"s": 1, "m": 60, "h": 3600, "d": 86400}[unit]
            return f"{int(ago // step)}{unit} ago"
    return local.strftime("%Y-%m-%d")
