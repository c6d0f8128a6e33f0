"""What a target database accepts, checked on import records before the first write.

JSON parsing lets through values a database refuses only at write time: NaN and
infinities, timestamps outside the column's range, ids longer than their columns, NUL
characters (PostgreSQL text and JSONB), lone surrogates (no UTF-8 encoding), rows larger
than MariaDB's `max_allowed_packet`. Finding them half-way through an import leaves a
partly written database and an error naming no line; `Limits.check` finds them first and
names the file, line and JSON path.
"""

from __future__ import annotations

import json
import math
import sys
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from pydantic_core import PydanticSerializationError, to_json

from veadk_mem.errors import BadInput
from veadk_mem.sessions.layout import KEY_LEN, VARCHAR_LEN, Layout

if TYPE_CHECKING:
    from veadk_mem.sessions.rawsession import RawSession

# MySQL / MariaDB DATETIME holds years 1000-9999; Python's datetime (PostgreSQL's path) 1-9999.
_MYSQL_MIN = datetime(1000, 1, 1, tzinfo=UTC).timestamp()
_MAX_TIME = datetime(9999, 12, 31, 23, 59, 59, tzinfo=UTC).timestamp()
_PY_MIN = datetime(1, 1, 2, tzinfo=UTC).timestamp()
_ROW_OVERHEAD = 4096  # statement text and the other columns around one event


@dataclass(frozen=True)
class Limits:
    """The target's limits: dialect, layout, and MariaDB's packet size (0: none)."""

    dialect: str
    layout: Layout
    max_packet: int = 0

    @property
    def sized_keys(self) -> bool:
        """True when id columns are VARCHAR(128) (ADK's DatabaseSessionService tables)."""
        return self.dialect in ("postgresql", "mysql") and self.layout is not Layout.SQLITE

    @property
    def epoch_times(self) -> bool:
        return self.layout is Layout.SQLITE

    def check(self, where: str, data: Any, session: RawSession | None) -> None:
        """BadInput naming `where` and the JSON path of the first value the target would refuse."""
        size = self._check_text(where, data)
        if session is None:
            return
        self._check_session(where, session)
        if self.max_packet and size + _ROW_OVERHEAD > self.max_packet:
            self._check_packet(where, data)

    # --- text: NaN, surrogates, NUL ----------------------------------------------------

    def _check_text(self, where: str, data: Any) -> int:
        """The encoded size of `data`; BadInput at the first NaN, lone surrogate or (PostgreSQL) NUL.

        One pass of pydantic-core's encoder finds clean data (nearly all of it); only when
        its text shows a NaN, an infinity, a surrogate or a NUL (or the same letters in a
        string) does the walk look for the value and its path.
        """
        nul = self.dialect == "postgresql"
        try:
            text = to_json(data, inf_nan_mode="constants")
        except (PydanticSerializationError, ValueError):
            _walk(where, data, "$", nul=nul)
            raise AssertionError("unreachable: a value failed to encode but none was found") from None
        if b"NaN" in text or b"Infinity" in text or (nul and b"\\u0000" in text):
            _walk(where, data, "$", nul=nul)
        return len(text)

    # --- the columns -------------------------------------------------------------------

    def _check_session(self, where: str, session: RawSession) -> None:
        if self.sized_keys:
            for path, value in (("appName", session.app_name), ("userId", session.user_id), ("id", session.id)):
                _length(where, f"$.{path}", value, KEY_LEN)
        if session.last_update_time is not None:
            self._time(where, "$.lastUpdateTime", session.last_update_time)
        low, high = self._time_range()
        sized, v0 = self.sized_keys, self.layout is Layout.V0
        for i, event in enumerate(session.events):
            # the common case costs a comparison or two; the path is only built for an error
            stamp = event.timestamp
            if not (type(stamp) is float and low <= stamp <= high):
                self._time(where, f"$.events[{i}].timestamp", stamp)
            if not sized:
                continue
            if len(event.id) > KEY_LEN or len(event.invocation_id) > VARCHAR_LEN:
                _length(where, f"$.events[{i}].id", event.id, KEY_LEN)
                _length(where, f"$.events[{i}].invocationId", event.invocation_id, VARCHAR_LEN)
            if v0:
                _length(where, f"$.events[{i}].author", event.author, VARCHAR_LEN)
                for name, alias in (("branch", "branch"), ("error_code", "errorCode")):
                    extra = getattr(event, name, None)
                    if isinstance(extra, str):
                        _length(where, f"$.events[{i}].{alias}", extra, VARCHAR_LEN)

    def _time_range(self) -> tuple[float, float]:
        """The epoch seconds this target's time columns hold (any finite number for epoch columns)."""
        if self.epoch_times:
            return -sys.float_info.max, sys.float_info.max  # every finite float; NaN and infinities fail
        return (_MYSQL_MIN if self.dialect == "mysql" else _PY_MIN), _MAX_TIME

    def _time(self, where: str, path: str, value: Any) -> None:
        if not isinstance(value, (int, float)) or not math.isfinite(value):
            raise BadInput(f"{where}: {path}: expected a finite number of epoch seconds, got {value!r}")
        if self.epoch_times:
            return
        low = _MYSQL_MIN if self.dialect == "mysql" else _PY_MIN
        if not low <= value <= _MAX_TIME:
            first = "1000" if self.dialect == "mysql" else "0001"
            raise BadInput(
                f"{where}: {path}: {value!r} is outside the years {first}-9999 this database's time columns hold"
            )

    def _check_packet(self, where: str, data: Any) -> None:
        """Name the event (or state) too large for one MariaDB packet."""
        if not isinstance(data, dict):
            return
        events = data.get("events")
        for i, event in enumerate(events if isinstance(events, list) else []):
            size = len(json.dumps(event, ensure_ascii=False).encode("utf-8"))
            if size + _ROW_OVERHEAD > self.max_packet:
                raise BadInput(
                    f"{where}: $.events[{i}]: {size:,} bytes, larger than the server's "
                    f"max_allowed_packet ({self.max_packet:,} bytes)",
                    hint="raise max_allowed_packet on the MariaDB/MySQL server, or drop the event",
                )
        state = data.get("state")
        if state is not None:
            size = len(json.dumps(state, ensure_ascii=False).encode("utf-8"))
            if size + _ROW_OVERHEAD > self.max_packet:
                raise BadInput(
                    f"{where}: $.state: {size:,} bytes, larger than the server's "
                    f"max_allowed_packet ({self.max_packet:,} bytes)",
                    hint="raise max_allowed_packet on the MariaDB/MySQL server",
                )


def _length(where: str, path: str, value: str | None, limit: int) -> None:
    if value is not None and len(value) > limit:
        raise BadInput(f"{where}: {path}: {len(value)} characters, longer than the column's {limit}")


def _bad_text(value: str, nul: bool) -> str | None:
    if nul and "\x00" in value:
        return "a NUL character (\\u0000), which PostgreSQL cannot store"
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return "a lone surrogate (\\ud800-\\udfff), which is not valid Unicode text"
    return None


def _walk(where: str, value: Any, path: str, *, nul: bool) -> None:
    """Raise BadInput at the first bad value under `value`, whose JSON path is `path`."""
    if isinstance(value, float):
        if not math.isfinite(value):
            raise BadInput(f"{where}: {path}: {value!r} is not a JSON number (NaN and infinities cannot be stored)")
    elif isinstance(value, str):
        problem = _bad_text(value, nul)
        if problem:
            raise BadInput(f"{where}: {path}: holds {problem}")
    elif isinstance(value, dict):
        for key, item in value.items():
            sub = f"{path}.{key}" if isinstance(key, str) and key.isidentifier() else f"{path}[{json.dumps(key)}]"
            if isinstance(key, str):
                problem = _bad_text(key, nul)
                if problem:
                    raise BadInput(f"{where}: {path}: a key holds {problem}")
            _walk(where, item, sub, nul=nul)
    elif isinstance(value, list):
        for i, item in enumerate(value):
            _walk(where, item, f"{path}[{i}]", nul=nul)
