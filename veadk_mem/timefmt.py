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

TimeForm = Literal["local", "seconds", "iso"]
LOCAL: TimeForm = "local"  # for people: local time to the second, 2026-11-29 21:24:38
SECONDS: TimeForm = "seconds"  # one word for grep and awk: ISO 8601 UTC to the second, 2025-12-06T08:00:07Z
ISO: TimeForm = "iso"  # machine formats: ISO 8601 UTC, fractions kept; a string as the store gave it


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
    if form == LOCAL:
        moment = datetime.fromtimestamp(value, tz=UTC) if not isinstance(value, datetime) else value
        if moment.tzinfo is None:
            moment = moment.replace(tzinfo=UTC)
        return moment.astimezone().strftime("%Y-%m-%d %H:%M:%S")
    text = iso_utc(value) or ""
    return re.sub(r"\.\d+Z$", "Z", text) if form == SECONDS else text
