"""The one time formatter: every case the four former formats (a table's local time, ltm's
saved-time strings, a pipe's one-word time, JSONL/CSV's ISO time) handled, pinned."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta, timezone

import pytest

from veadk_mem.timefmt import ISO, LOCAL, SECONDS, format_time

EPOCH = 1764921637.25  # 2025-12-05T08:00:37.25Z


@pytest.fixture(autouse=True)
def shanghai() -> Iterator[None]:
    """Local time is UTC+8 (no daylight saving), so a local time differs from UTC."""
    before = os.environ.get("TZ")
    os.environ["TZ"] = "Asia/Shanghai"
    time.tzset()
    yield
    if before is None:
        os.environ.pop("TZ")
    else:
        os.environ["TZ"] = before
    time.tzset()


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (None, ""),
        ("", ""),
        (EPOCH, "2025-12-05 16:00:37"),  # a table's time column (was local_time)
        (0, "1970-01-01 08:00:00"),
        (datetime(2025, 12, 5, 8, 0, 37, 250000), "2025-12-05 16:00:37"),  # naive: UTC
        (datetime(2025, 12, 5, 8, 0, 37, tzinfo=timezone(timedelta(hours=-5))), "2025-12-05 21:00:37"),
        ("2025-12-05T08:00:37.250000Z", "2025-12-05 16:00:37"),  # ltm's saved times (was cli/ltm.py _time)
        ("2025-12-05T08:00:37+00:00", "2025-12-05 16:00:37"),
        ("2025-12-05T08:00:37", "2025-12-05 16:00:37"),  # a naive ISO string: UTC
        ("yesterday at noon", "yesterday at noon"),  # a hosted backend's own format, as it came
    ],
)
def test_local_for_people(value: object, expected: str) -> None:
    assert format_time(value, LOCAL) == expected
    assert format_time(value) == expected  # the default: what a time column shows people


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (None, ""),
        ("", ""),
        (EPOCH, "2025-12-05T08:00:37Z"),  # a piped table's time (was _iso_seconds): one word, no fraction
        (1764921637, "2025-12-05T08:00:37Z"),
        (datetime(2025, 12, 5, 8, 0, 37, 999999, tzinfo=UTC), "2025-12-05T08:00:37Z"),
        ("2025-12-05T16:00:37.5+08:00", "2025-12-05T08:00:37Z"),  # a store's ISO string, made UTC
        ("not a time", "not a time"),
    ],
)
def test_seconds_for_pipes(value: object, expected: str) -> None:
    assert format_time(value, SECONDS) == expected


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (None, ""),
        ("", ""),
        (EPOCH, "2025-12-05T08:00:37.250000Z"),  # JSONL/CSV/TSV (was _iso_any): the fraction kept
        (0, "1970-01-01T00:00:00Z"),
        (datetime(2025, 12, 5, 8, 0, 37), "2025-12-05T08:00:37Z"),
        ("2025-12-05T16:00:37+08:00", "2025-12-05T16:00:37+08:00"),  # a store's string: never rewritten
        ("not a time", "not a time"),
    ],
)
def test_iso_for_machines(value: object, expected: str) -> None:
    assert format_time(value, ISO) == expected
