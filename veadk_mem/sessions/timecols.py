"""Epoch seconds as ADK's time columns hold them, a whole batch at a time.

ADK stores an event's `timestamp` as `datetime.fromtimestamp(t, UTC)` without its zone;
on sqlite SQLAlchemy writes that as "YYYY-MM-DD HH:MM:SS.ffffff" text. Per value the
aware `fromtimestamp` and the text formatting cost several microseconds each, about a
tenth of an import's time, so a large batch is converted by numpy with the same rounding
(the fraction of the second rounded half-even to microseconds, as CPython does); a small
one keeps the per-value path and does not pay numpy's import. Both give identical values
(a property test checks them against `fromtimestamp`).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from veadk_mem.config import tuning

_NUMPY_FROM = 256  # below this many values the per-value path is cheaper than importing numpy


def naive_utc(epoch: float) -> datetime:
    """Epoch seconds as the naive UTC datetime ADK stores."""
    return datetime.fromtimestamp(epoch, tz=UTC).replace(tzinfo=None)


def sqlite_text(value: datetime) -> str:
    """A naive datetime as SQLAlchemy's sqlite DATETIME stores it (microseconds always written)."""
    return value.isoformat(" ", "microseconds")


def _micros(epochs: Sequence[float]) -> Any:
    """numpy datetime64[us] of `epochs`, rounded as `datetime.fromtimestamp` rounds."""
    import numpy as np

    whole_frac = np.modf(np.asarray(epochs, dtype=np.float64))
    frac, whole = whole_frac[0], whole_frac[1]
    micros = np.round(frac * 1e6)  # half to even, as CPython's _PyTime_ROUND_HALF_EVEN
    over, under = micros >= 1e6, micros < 0
    micros[over] -= 1e6
    whole[over] += 1
    micros[under] += 1e6
    whole[under] -= 1
    return (whole.astype(np.int64) * 1_000_000 + micros.astype(np.int64)).astype("datetime64[us]")


def naive_utc_many(epochs: Sequence[float]) -> list[datetime]:
    """`naive_utc` of each of `epochs` (finite, years 1-9999: what `limits` lets through)."""
    if len(epochs) < _NUMPY_FROM or not tuning().fast_paths:
        return [naive_utc(e) for e in epochs]
    values: list[datetime] = _micros(epochs).tolist()
    return values


def sqlite_text_many(epochs: Sequence[float]) -> list[str]:
    """`sqlite_text(naive_utc(e))` of each of `epochs`.

    The datetimes come from numpy, the text from `isoformat`: numpy's own
    `datetime_as_string` and a character-array edit took three times as long
    (bench/second_paths.py).
    """
    return [value.isoformat(" ", "microseconds") for value in naive_utc_many(epochs)]
