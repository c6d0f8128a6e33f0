"""The one JSON codec: the reader for every input and the encoders for every output.

Reading: a file, a line of JSONL, a policy or inline JSON all decode here, so every bad
document is the same exit 2 naming where it is: a syntax error by line and column, and
nesting deeper than pydantic-core parses (about 200 levels, the limit of ADK's own
`model_validate_json`) as "JSON nested too deeply" instead of a RecursionError.

Writing: `dumps` (json's encoder: --json documents, indented, with times and models) and
`compact_json` (pydantic-core's, several times faster: stored event text, export, `get
--json`'s streamed events). In both, NaN and infinities (an agent may store them in state)
become null, as ADK's `model_dump_json` writes them; bare NaN is not JSON and breaks every
strict parser. Both escape DEL, C1 controls and bidi overrides in what is printed.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Iterable, Iterator
from datetime import UTC, datetime
from typing import Any

from pydantic_core import PydanticSerializationError, from_json, to_json

from veadk_mem.errors import BadInput

_POSITION = re.compile(r"at line (\d+) column (\d+)$")
# What json leaves raw with ensure_ascii=False but a terminal acts on: DEL, the C1 controls
# (0x9b is a one-byte CSI) and the bidirectional overrides and isolates; and lone surrogates
# (half an emoji that ADK stored), which have no UTF-8 encoding to print. They can only be
# inside strings, where \uXXXX is the same value.
_TERMINAL = re.compile("[\x7f-\x9f\u202a-\u202e\u2066-\u2069\ud800-\udfff]")


def _where(where: str, line: int | None, lineno: int | None, column: int | None) -> str:
    """'file: line L, column C' with L counted in the file when `line` says where the text starts."""
    if lineno is None:
        return f"{where}: line {line}" if line is not None else where
    absolute = lineno if line is None else line + lineno - 1
    return f"{where}: line {absolute}, column {column}"


def loads(text: str | bytes, where: str, *, line: int | None = None, finite: bool = False) -> Any:
    """Decode one JSON document, or raise BadInput naming `where` (and the line and column).

    `line` is the line of its file the text starts on (JSONL), None for a whole file or a
    string. `finite` refuses NaN and Infinity, which are not JSON numbers.
    """
    try:
        # pydantic-core's parser is twice as fast as json's and bounds the nesting; what it
        # refuses for another reason (a lone surrogate escape, which json keeps, or an error)
        # goes to json for its verdict and its wording
        return from_json(text, cache_strings="keys", allow_inf_nan=not finite)
    except ValueError as exc:
        if "recursion limit exceeded" in str(exc):
            found = _POSITION.search(str(exc))
            lineno, column = (int(found[1]), int(found[2])) if found else (None, None)
            raise BadInput(f"{_where(where, line, lineno, column)}: JSON nested too deeply") from None
    try:
        return json.loads(text, parse_constant=_refuse_constant if finite else None)
    except json.JSONDecodeError as exc:
        reason = exc.msg.removesuffix(" at")  # json's messages end "... at" before the position
        reason = reason[:1].lower() + reason[1:]
        raise BadInput(f"{_where(where, line, exc.lineno, exc.colno)}: invalid JSON: {reason}") from None
    except RecursionError:
        raise BadInput(f"{_where(where, line, None, None)}: JSON nested too deeply") from None
    except UnicodeDecodeError as exc:
        raise BadInput(f"{where}: not UTF-8 text ({exc.reason})") from None
    except ValueError as exc:  # a NaN or Infinity under `finite`
        raise BadInput(f"{_where(where, line, None, None)}: {exc}") from None


def try_loads(text: str | bytes) -> Any:
    """The decoded document, or None when it is not JSON (for sniffing, never for input checks)."""
    try:
        return loads(text, "")
    except BadInput:
        return None


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def dumps(
    data: Any, *, indent: int | None = None, compact: bool = False, default: Callable[[Any], Any] | None = None
) -> str:
    """JSON text of `data`, non-ASCII kept, NaN and infinities as null.

    indent: pretty-printed (--json documents); compact: no spaces after separators (files
    and JSONL records vmem writes for machines). Times become ISO-8601 UTC, pydantic models
    their JSON dump; anything else goes to `default` (or is an error). Every control
    character is escaped (C1 and bidi overrides too), so JSON is safe on a terminal.
    """
    separators = (",", ":") if compact else None
    fallback = _default if default is None else _or(default)
    try:
        text = json.dumps(
            data, ensure_ascii=False, indent=indent, separators=separators, default=fallback, allow_nan=False
        )
    except ValueError:  # a non-finite float somewhere: the rare case pays for a copy
        text = json.dumps(
            _finite(data), ensure_ascii=False, indent=indent, separators=separators, default=fallback, allow_nan=False
        )
    return escape_terminal(text)


class Streamed(list[Any]):
    """A list that json's encoder reads as it goes: `dumps_pieces` writes its items as an iterator
    gives them, so a long list (a dry run's events) is never held. It tells whether it is empty by
    taking its first item ahead, which json asks before writing `[]`."""

    def __init__(self, items: Iterable[Any]) -> None:
        super().__init__()
        self._items = iter(items)
        self._ahead: list[Any] = []

    def __bool__(self) -> bool:
        if not self._ahead:
            for item in self._items:
                self._ahead.append(item)
                break
        return bool(self._ahead)

    def __len__(self) -> int:
        return 1 if self.__bool__() else 0  # "some": json only asks whether it is empty

    def __iter__(self) -> Iterator[Any]:
        yield from self._ahead
        self._ahead = []
        yield from self._items


def dumps_pieces(data: Any, *, indent: int = 2, size: int = 1 << 16) -> Iterator[str]:
    """`dumps(data, indent=indent)` in pieces of about `size` characters, from one encoder (json's
    indented encoder makes reference cycles each call: one call per item piles them up while the
    collector is paused). `Streamed` lists inside are read as they are written; NaN and infinities
    must already be None here (`finite`), as the document is not built ahead to be copied."""
    encoder = json.JSONEncoder(ensure_ascii=False, indent=indent, default=_default, allow_nan=False)
    buffer: list[str] = []
    length = 0
    for chunk in encoder.iterencode(data):
        buffer.append(chunk)
        length += len(chunk)
        if length >= size:
            yield escape_terminal("".join(buffer))
            buffer, length = [], 0
    if buffer:
        yield escape_terminal("".join(buffer))


def _fast_options() -> dict[str, Any]:
    try:
        to_json(0.0, inf_nan_mode="null")
    except TypeError:  # pydantic-core before inf_nan_mode: its default already writes null
        return {}
    return {"inf_nan_mode": "null"}


_FAST_OPTIONS = _fast_options()


def compact_json(data: Any) -> str:
    """Compact JSON, non-ASCII kept, as Session.to_json writes it (pydantic-core's fast encoder):
    the event text vmem stores, and what export and `get --json` stream.

    NaN and infinities (stored by an agent in state, say) are written as null, as ADK's own
    `model_dump_json` does: bare NaN is not JSON. A lone surrogate (half an emoji, which ADK stores
    and reads) has no UTF-8, so pydantic-core refuses it; such data goes through json instead and
    keeps it (`compact_json_out` writes it as its \\uXXXX escape).
    """
    try:
        return to_json(data, **_FAST_OPTIONS).decode("utf-8")
    except PydanticSerializationError as exc:
        if "surrogates not allowed" not in str(exc):
            raise
        return json.dumps(_finite(data), ensure_ascii=False, separators=(",", ":"), allow_nan=False)


def stored_json(raw: str | bytes | bytearray) -> Any:
    """A stored JSON column decoded as ADK decodes it (`json.loads`), by pydantic-core's fast decoder
    where it can: that one refuses a lone surrogate's escape (half an emoji, which ADK writes with
    `json.dumps` and reads back) and a bare NaN (ADK's `json.dumps` of a NaN), which json takes."""
    try:
        return from_json(raw)
    except ValueError as exc:
        try:
            return json.loads(raw)
        except ValueError:
            raise exc from None


def adk_text(data: Any) -> str:
    """JSON text as ADK's DynamicJSON column writes it (`json.dumps`: ASCII escapes, ', ' and ': '),
    so a row vmem writes is byte for byte the row ADK would; NaN and infinities as null (ADK would
    write a bare NaN, which is not JSON)."""
    try:
        return _adk_encode(data)
    except ValueError:  # a non-finite float somewhere: the rare case pays for a copy
        return _adk_encode(_finite(data))


def _adk_encoder() -> Callable[[Any], str]:
    """json.dumps's own C encoder (its separators, ASCII escapes, no NaN), made once: `JSONEncoder.encode`
    makes it anew on every call, a third of the time of an event's text, which an import writes per
    event. No circular-reference bookkeeping: the data comes from JSON, which cannot hold a cycle."""
    from json import encoder

    plain = json.JSONEncoder(allow_nan=False)
    make = getattr(encoder, "c_make_encoder", None)  # not in typeshed: json.encoder's C accelerator
    if make is None:  # a Python without json's C accelerator
        return plain.encode
    chunks = make(None, plain.default, encoder.encode_basestring_ascii, None, ": ", ", ", False, False, False)
    return lambda data: "".join(chunks(data, 0))


_adk_encode = _adk_encoder()


def compact_json_out(data: Any) -> str:
    """`compact_json` for output (get --json, export, watch): C1 controls and bidi overrides escaped.

    Stored rows keep `compact_json`; what is printed must be safe on a terminal and means the same.
    """
    return escape_terminal(compact_json(data))


def escape_terminal(text: str) -> str:
    """JSON text with DEL, C1 controls, bidi overrides and lone surrogates written as \\uXXXX escapes.

    json leaves them raw with non-ASCII kept, and a terminal acts on them; as escapes they
    decode to the same strings, so the JSON is safe to print and means the same.
    """
    if text.isascii() and "\x7f" not in text:  # the usual case, without a regex pass over the text
        return text
    if _TERMINAL.search(text):
        text = _TERMINAL.sub(lambda m: f"\\u{ord(m[0]):04x}", text)
    return text


def finite(value: Any) -> Any:
    """A copy with NaN and infinities replaced by None (what `dumps` writes of them)."""
    return _finite(value)


def _finite(value: Any) -> Any:
    """A copy with NaN and infinities replaced by None."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    if hasattr(value, "model_dump"):
        return _finite(_default(value))
    return value


def iso_utc(value: datetime | float | None) -> str | None:
    """An ISO-8601 UTC time for JSON output (a naive time is taken as UTC)."""
    if value is None:
        return None
    if isinstance(value, (int, float)):
        value = datetime.fromtimestamp(value, tz=UTC)
    elif value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    return value.astimezone(UTC).isoformat().replace("+00:00", "Z")


def _or(default: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """Times and models as usual, then the caller's fallback."""

    def either(value: Any) -> Any:
        try:
            return _default(value)
        except TypeError:
            return default(value)

    return either


def _default(value: Any) -> Any:
    if isinstance(value, datetime):
        return iso_utc(value)
    if hasattr(value, "model_dump"):
        dump: Callable[..., Any] = value.model_dump
        return dump(mode="json", by_alias=True, exclude_none=True)
    raise TypeError(f"not JSON serialisable: {type(value).__name__}")
