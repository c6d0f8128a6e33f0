"""Epoch seconds as ADK's time columns hold them.

ADK stores an event's `timestamp` as `datetime.fromtimestamp(t, UTC)` without its zone; on
sqlite SQLAlchemy writes that as "YYYY-MM-DD HH:MM:SS.ffffff" text. (A numpy batch path was
deleted by issue 39 item 3: under 1.3x on a whole import, docs/BENCHMARKS.md.)
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime


def naive_utc(epoch: float) -> datetime:
    """Epoch seconds as the naive UTC datetime ADK stores."""
    return datetime.fromtimestamp(epoch, tz=UTC).replace(tzinfo=None)


def sqlite_text(value: datetime) -> str:
    """A naive datetime as SQLAlchemy's sqlite DATETIME stores it (microseconds always written)."""
    return value.isoformat(" ", "microseconds")


def naive_utc_many(epochs: Sequence[float]) -> list[datetime]:
    """`naive_utc` of each of `epochs` (finite, years 1-9999: what `limits` lets through)."""
    return [naive_utc(e) for e in epochs]


def sqlite_text_many(epochs: Sequence[float]) -> list[str]:
    """`sqlite_text(naive_utc(e))` of each of `epochs`."""
    return [naive_utc(e).isoformat(" ", "microseconds") for e in epochs]
