"""The time conversion of imports gives exactly what ADK's own conversion gives."""

from __future__ import annotations

from datetime import UTC, datetime

from hypothesis import given, settings
from hypothesis import strategies as st

from veadk_mem.sessions.timecols import naive_utc_many, sqlite_text_many

BATCH = 256  # a batch as an import converts it

# The range `limits` lets through to datetime columns: years 1-9999.
_LOW = datetime(1, 1, 2, tzinfo=UTC).timestamp()
_HIGH = datetime(9999, 12, 31, 23, 59, 59, tzinfo=UTC).timestamp()

_epochs = st.one_of(
    st.floats(min_value=_LOW, max_value=_HIGH, allow_nan=False),
    st.floats(min_value=-2.0, max_value=2.0, allow_nan=False),  # around the epoch, both signs
    # exact halves of a microsecond, where rounding half to even decides
    st.integers(min_value=-(10**10), max_value=10**11).map(lambda n: n / 2e6),
    st.integers(min_value=0, max_value=2 * 10**9).map(lambda n: n + 0.9999995),
)


def _adk(epoch: float) -> datetime:
    """What ADK stores: the aware UTC datetime without its zone."""
    return datetime.fromtimestamp(epoch, tz=UTC).replace(tzinfo=None)


@settings(max_examples=60, deadline=None)
@given(st.lists(_epochs, min_size=BATCH, max_size=BATCH + 40))
def test_a_batch_converts_as_each_value_does(epochs: list[float]) -> None:
    expected = [_adk(e) for e in epochs]
    assert naive_utc_many(epochs) == expected
    assert sqlite_text_many(epochs) == [d.isoformat(" ", "microseconds") for d in expected]


@given(st.lists(_epochs, max_size=BATCH - 1))
def test_a_small_batch_takes_the_per_value_path_with_the_same_values(epochs: list[float]) -> None:
    assert naive_utc_many(epochs) == [_adk(e) for e in epochs]
    assert sqlite_text_many(epochs) == [_adk(e).isoformat(" ", "microseconds") for e in epochs]


def test_the_text_is_what_sqlalchemy_writes_for_a_sqlite_datetime() -> None:
    """Whole seconds keep their microseconds, years below 1000 their zeros, as SQLAlchemy's DATETIME."""
    from sqlalchemy import DateTime
    from sqlalchemy.dialects import sqlite

    process = DateTime().dialect_impl(sqlite.dialect()).bind_processor(sqlite.dialect())
    epochs = [0.0, 1_790_000_000.0, _LOW, _HIGH, -1.5e-6, 12.000001] * (BATCH // 6 + 1)
    assert sqlite_text_many(epochs) == [process(_adk(e)) for e in epochs]
