"""Decode the pickled `actions` column of ADK's v0 schema into plain data, safely.

ADK 1.19-1.21 stored `EventActions` as a pickle. A pickle is a program: loading one with
`pickle.loads` can call any importable function. This module never imports or calls
anything a payload names, except a short list of builtin data constructors. Every other
class a payload names (ADK and google-genai pydantic models, their enums) becomes an inert
stand-in that only records the state the pickle hands it, and is then flattened to plain
dicts, lists and scalars. Anything else (`os.system`, `builtins.eval`, ...) is refused.

Two sets of bounds: a listing (`session get`, `export`) keeps each hostile row to a small
cost (LISTING: 16 MiB, 200,000 values), and an unreadable event is shown without its
actions; a one-off conversion (`session upgrade`, inside `converting()`) must be lossless,
so its bounds follow the memory the machine has (`conversion_bounds`) and every event it
cannot decode is recorded, for the caller to stop on or to keep raw (RAW_ACTIONS_KEY).

`encode_actions` writes the other direction, for imports into a v0 database: a pickle of
an `EventActions` that ADK's own restricted loader accepts, built without importing ADK.
"""

from __future__ import annotations

import base64
import contextlib
import datetime as _dt
import decimal
import io
import os
import pathlib
import pickle
import uuid
from collections import OrderedDict, defaultdict
from collections.abc import Iterator
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

# Modules whose classes are pydantic models or enums ADK pickles inside EventActions.
# They are never imported: a name from these modules becomes a `_Stub` subclass.
_MODEL_MODULE_PREFIXES = ("google.adk.", "google.genai.", "fastapi.openapi.", "pydantic.")

_MAX_BYTES_ARG = 1 << 20
# Bounds on one payload while listing, so a hostile row costs that event its actions, never the command:
MAX_PICKLE_BYTES = 16 << 20  # the payload itself
MAX_DEPTH = 100  # nesting of the decoded value (deeper raised RecursionError)
MAX_NODES = 200_000  # values visited while flattening ("billion laughs" by memo references)

# Where a conversion keeps an event's undecodable `actions` pickle (base64) in its customMetadata.
RAW_ACTIONS_KEY = "vmem_raw_actions"


@dataclass(frozen=True)
class Bounds:
    """The most one payload may hold: its pickle bytes, the nesting and the number of values decoded."""

    max_bytes: int
    max_depth: int
    max_nodes: int


LISTING = Bounds(MAX_PICKLE_BYTES, MAX_DEPTH, MAX_NODES)
# Flattening costs well under this many bytes a value (a dict entry, a list slot, a new container):
# the node budget of a conversion is a quarter of the available memory at this rate.
_BYTES_PER_NODE = 256
# Nesting a conversion follows: _plain recurses once a level, and the event then passes through
# pydantic (validation and serialization), whose own recursion limit is some hundreds of levels.
_CONVERSION_DEPTH = 200


def available_memory() -> int:
    """Bytes this machine can still give (MemAvailable), or 1 GiB when it does not say."""
    try:
        with open("/proc/meminfo", encoding="ascii") as handle:
            for line in handle:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return int(os.sysconf("SC_AVPHYS_PAGES")) * int(os.sysconf("SC_PAGE_SIZE"))
    except (OSError, ValueError, AttributeError):
        return 1 << 30


def conversion_bounds(available: int | None = None) -> Bounds:
    """Bounds for a one-off, lossless conversion: set by memory, never below the listing's.

    A pickle of N bytes holds at most about N values unless it shares them by memo
    references, which flattening copies: the node budget (a quarter of the available
    memory) is what stops a "billion laughs"; the byte bound (an eighth) keeps the payload,
    its decoded objects and its JSON within memory together.
    """
    free = available if available is not None else available_memory()
    return Bounds(
        max_bytes=max(LISTING.max_bytes, free // 8),
        max_depth=max(LISTING.max_depth, _CONVERSION_DEPTH),
        max_nodes=max(LISTING.max_nodes, free // 4 // _BYTES_PER_NODE),
    )


@dataclass
class Conversion:
    """A conversion in progress: its bounds, whether undecodable actions are kept raw, and which were."""

    bounds: Bounds
    keep_raw: bool = False
    undecoded: dict[tuple[str, str, str, str], str] = field(default_factory=dict)  # (app, user, session, id) -> why


CONVERSION: ContextVar[Conversion | None] = ContextVar("vmem_pickle_conversion", default=None)


@contextlib.contextmanager
def converting(keep_raw: bool = False, bounds: Bounds | None = None) -> Iterator[Conversion]:
    """Decode every payload in this block with conversion bounds, recording the events that fail."""
    conversion = Conversion(bounds or conversion_bounds(), keep_raw)
    token = CONVERSION.set(conversion)
    try:
        yield conversion
    finally:
        CONVERSION.reset(token)


def record_undecoded(row: Any, error: Exception, data: dict[str, Any]) -> bool:
    """Inside `converting()`: note the event of `row` whose actions failed to decode and, when kept
    raw, put its pickle (base64) in `data`'s custom_metadata under RAW_ACTIONS_KEY. True when
    recorded (the caller warns no further); False outside a conversion."""
    conversion = CONVERSION.get()
    if conversion is None:
        return False
    key = (str(row.app_name), str(row.user_id), str(row.session_id), str(row.id))
    conversion.undecoded[key] = str(error)
    if conversion.keep_raw:
        meta = data.get("custom_metadata")
        raw = base64.b64encode(bytes(row.actions or b"")).decode("ascii")
        data["custom_metadata"] = {**(meta if isinstance(meta, dict) else {}), RAW_ACTIONS_KEY: raw}
    return True


class Refused(pickle.UnpicklingError):
    """The pickle names something the restricted unpickler will not load."""


def _safe_bytes(*args: Any) -> bytes:
    """bytes(...) without the bytes(10**12) memory bomb: an int size is refused."""
    if args and isinstance(args[0], int):
        raise Refused("refusing bytes(int) in a pickled value")
    return bytes(*args)


def _safe_bytearray(*args: Any) -> bytearray:
    if args and isinstance(args[0], int):
        raise Refused("refusing bytearray(int) in a pickled value")
    return bytearray(*args)


def _codecs_encode(obj: Any, encoding: str = "utf-8", errors: str = "strict") -> bytes:
    """Protocol 2 writes bytes as _codecs.encode(text, 'latin1'); allow only that shape."""
    if not isinstance(obj, str) or encoding not in ("latin1", "latin-1") or len(obj) > _MAX_BYTES_ARG * 64:
        raise Refused("refusing _codecs.encode with unexpected arguments")
    return obj.encode("latin1")


def _reconstructor(cls: Any, base: Any, state: Any) -> Any:
    """copyreg._reconstructor for protocol 0/1 pickles: only stand-ins may be built."""
    if isinstance(cls, type) and issubclass(cls, _Stub):
        obj = cls.__new__(cls)
        if state is not None:
            obj.__setstate__(state)
        return obj
    raise Refused("refusing copyreg._reconstructor of a non-model class")


_SAFE_GLOBALS: dict[tuple[str, str], Any] = {
    ("builtins", "dict"): dict,
    ("builtins", "list"): list,
    ("builtins", "set"): set,
    ("builtins", "frozenset"): frozenset,
    ("builtins", "tuple"): tuple,
    ("builtins", "str"): str,
    ("builtins", "bytes"): _safe_bytes,
    ("builtins", "bytearray"): _safe_bytearray,
    ("builtins", "int"): int,
    ("builtins", "float"): float,
    ("builtins", "bool"): bool,
    ("builtins", "complex"): complex,
    ("builtins", "object"): object,
    ("_codecs", "encode"): _codecs_encode,
    ("copyreg", "_reconstructor"): _reconstructor,
    ("collections", "OrderedDict"): OrderedDict,
    ("datetime", "date"): _dt.date,
    ("datetime", "datetime"): _dt.datetime,
    ("datetime", "time"): _dt.time,
    ("datetime", "timedelta"): _dt.timedelta,
    ("datetime", "timezone"): _dt.timezone,
    ("decimal", "Decimal"): decimal.Decimal,
    ("uuid", "UUID"): uuid.UUID,
    # As ADK 2.13's own allow-list (google/adk/sessions/_restricted_pickle.py): a defaultdict's
    # factory is stored, never called; paths are built from their parts and touch no file.
    ("collections", "defaultdict"): defaultdict,
    **{
        (module, name): getattr(pathlib, "Pure" + name.removeprefix("Pure"))
        for module in ("pathlib", "pathlib._local")
        for name in ("PurePosixPath", "PureWindowsPath", "PosixPath", "WindowsPath")
    },
}

# Globals we resolve that ADK's list does not name, and why they are safe: protocol 0-2
# internals (bytes, old-style object reconstruction) and two inert builtins.
EXTRA_GLOBALS = frozenset(
    {
        ("builtins", "frozenset"),
        ("builtins", "object"),
        ("_codecs", "encode"),
        ("copyreg", "_reconstructor"),
    }
)


class _Stub:
    """An inert stand-in for a model or enum class named by a pickle."""

    _stub_name = ""
    _stub_args: tuple[Any, ...] = ()
    _stub_state: Any = None

    def __new__(cls, *args: Any, **kwargs: Any) -> _Stub:
        obj = object.__new__(cls)
        obj._stub_args = args
        obj._stub_state = None
        return obj

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        """Enums are rebuilt as Cls(value): keep the value, run nothing."""

    def __setstate__(self, state: Any) -> None:
        self._stub_state = state

    def __reduce__(self) -> Any:  # never re-pickle a stand-in
        raise TypeError("stand-in objects cannot be pickled")


_STUBS: dict[tuple[str, str], type[_Stub]] = {}


def _stub_class(module: str, name: str) -> type[_Stub]:
    key = (module, name)
    if key not in _STUBS:
        _STUBS[key] = type(f"Stub_{name}", (_Stub,), {"_stub_name": f"{module}.{name}"})
    return _STUBS[key]


# Protocol 0-2 pickles written with fix_imports name Python 2 modules.
_PY2_MODULES = {"__builtin__": "builtins", "copy_reg": "copyreg"}


class RestrictedUnpickler(pickle.Unpickler):
    """Resolves only builtin data types; model classes become stand-ins; all else is refused."""

    def find_class(self, module: str, name: str) -> Any:
        module = _PY2_MODULES.get(module, module)
        if (module, name) in _SAFE_GLOBALS:
            return _SAFE_GLOBALS[(module, name)]
        if module.startswith(_MODEL_MODULE_PREFIXES) and name.isidentifier() and not name.startswith("_"):
            return _stub_class(module, name)
        raise Refused(f"refusing to load {module}.{name}")

    def persistent_load(self, pid: Any) -> Any:
        raise Refused("refusing persistent ids")


class PlainDataUnpickler(pickle.Unpickler):
    """Containers, strings and numbers only: a pickle naming any class or function is refused.

    For the pickles vmem sends between its own processes (the import's reader child and its
    parent): nothing they name is ever resolved, so a corrupt or substituted stream cannot run code.
    """

    def __init__(self, file: io.BytesIO, sender: str) -> None:
        super().__init__(file)
        self.sender = sender

    def find_class(self, module: str, name: str) -> Any:
        raise Refused(f"{self.sender} sent {module}.{name}, which plain data never holds")

    def persistent_load(self, pid: Any) -> Any:
        raise Refused(f"{self.sender} sent a persistent id, which plain data never holds")


def loads_plain(data: bytes, sender: str) -> Any:
    """The plain data a pickle from one of vmem's own processes holds (`sender` names it in errors)."""
    return PlainDataUnpickler(io.BytesIO(data), sender).load()


class TooLarge(pickle.UnpicklingError):
    """A payload beyond the bounds (size, depth, number of values) this module decodes."""


def plain(value: Any, bounds: Bounds = LISTING) -> Any:
    """Turn an unpickled value into JSON-ready data: stand-ins become dicts or enum values.

    Bounded: TooLarge past `bounds.max_depth` levels or `bounds.max_nodes` values, so neither a
    deeply nested payload nor one sharing a list a billion times (memo references) gets far.
    """
    budget = [bounds.max_nodes, bounds.max_depth, bounds.max_nodes]  # left, depth bound, value bound
    return _plain(value, 0, budget)


def _plain(value: Any, depth: int, budget: list[int]) -> Any:
    budget[0] -= 1
    if budget[0] < 0:
        raise TooLarge(f"more than {budget[2]:,} values")
    if depth > budget[1]:
        raise TooLarge(f"nested deeper than {budget[1]} levels")
    d = depth + 1
    if isinstance(value, _Stub):
        state = value._stub_state
        if state is None:
            args = value._stub_args
            return _plain(args[0], d, budget) if len(args) == 1 else [_plain(a, d, budget) for a in args]
        if isinstance(state, tuple) and len(state) == 2 and isinstance(state[0], dict):
            state = {**state[0], **(state[1] or {})}  # (dict, slots) form
        if isinstance(state, dict) and "__dict__" in state:
            fields = dict(state.get("__dict__") or {})
            fields.update(state.get("__pydantic_extra__") or {})
            state = fields
        return _plain(state, d, budget)
    if isinstance(value, dict):
        return {
            (k if isinstance(k, str) else str(_plain(k, d, budget))): _plain(v, d, budget) for k, v in value.items()
        }
    if isinstance(value, (list, tuple, set, frozenset)):
        return [_plain(v, d, budget) for v in value]
    if isinstance(value, (bytes, bytearray)):
        return base64.b64encode(bytes(value)).decode("ascii")
    if isinstance(value, (_dt.datetime, _dt.date, _dt.time)):
        return value.isoformat()
    if isinstance(value, _dt.timedelta):
        return value.total_seconds()
    if isinstance(value, (decimal.Decimal, uuid.UUID, _dt.timezone, pathlib.PurePath)):
        return str(value)
    return value


def decode_actions(data: bytes | bytearray | memoryview | None, bounds: Bounds | None = None) -> dict[str, Any]:
    """The plain-data EventActions in a v0 `actions` value; raises pickle.UnpicklingError if refused.

    Whatever the payload (crafted, corrupt, too large, too deep), the only exception is
    UnpicklingError, so the caller shows that one event without its actions (or, converting,
    stops or keeps it raw). `bounds`: those given, else the conversion's in a `converting()`
    block, else LISTING. Conversion bounds change only how much is decoded, never what: the
    same allow-list refuses every class that could run code.
    """
    if data is None:
        return {}
    if bounds is None:
        conversion = CONVERSION.get()
        bounds = conversion.bounds if conversion is not None else LISTING
    if len(data) > bounds.max_bytes:
        raise TooLarge(f"{len(data):,} bytes, more than {bounds.max_bytes:,}")
    try:
        value = RestrictedUnpickler(io.BytesIO(bytes(data))).load()
        result = plain(value, bounds)
    except (Refused, TooLarge):
        raise
    except RecursionError:
        raise TooLarge("nested too deeply") from None
    except MemoryError:
        raise TooLarge("too large to decode") from None
    except Exception as exc:  # truncated or corrupt payloads
        raise pickle.UnpicklingError(f"undecodable pickle ({type(exc).__name__}: {exc})") from None
    if not isinstance(result, dict):
        raise pickle.UnpicklingError(f"expected EventActions, found {type(result).__name__}")
    return result


class _EventActionsValue:
    """Pickled as an instance of the global google.adk.events.event_actions.EventActions."""

    def __init__(self, state: dict[str, Any]) -> None:
        self.state = state

    def __reduce_ex__(self, protocol: Any) -> Any:
        import copyreg

        return (copyreg.__newobj__, (_EventActionsValue,), self.state)  # type: ignore[attr-defined]


# The pure-Python pickler (`pickle._Pickler`, not part of pickle's documented API) and the
# methods this subclass calls on it: tests/test_private_internals.py checks they exist.
PICKLER_CALLS = ("save_global", "write", "memoize")


class _ActionsPickler(pickle._Pickler):  # type: ignore[name-defined,misc,unused-ignore]
    """The pure-Python pickler, writing the marker class under ADK's module and name."""

    def save_global(self, obj: Any, name: Any = None) -> None:
        if obj is _EventActionsValue:
            marker = pickle.GLOBAL + b"google.adk.events.event_actions\nEventActions\n"
            self.write(marker)  # type: ignore[attr-defined,unused-ignore]
            self.memoize(obj)  # type: ignore[attr-defined,unused-ignore]
            return
        super().save_global(obj, name)  # type: ignore[misc,unused-ignore]


# EventActions' fields over ADK 1.0-2.x with their defaults. Unpickling sets __dict__ as
# stored, so a field left out is missing from the object (ADK 1.10's get_session then loses
# `requestedAuthConfigs: {}`); fields a release does not know are ignored by it.
ACTIONS_DEFAULTS: dict[str, Any] = {
    "skip_summarization": None,
    "state_delta": {},
    "artifact_delta": {},
    "transfer_to_agent": None,
    "escalate": None,
    "requested_auth_configs": {},
    "requested_tool_confirmations": {},
    "compaction": None,
    "end_of_agent": None,
    "agent_state": None,
    "rewind_before_invocation_id": None,
}


def encode_actions(actions: dict[str, Any]) -> bytes:
    """A pickle of EventActions(**actions) in the shape pydantic writes, without importing ADK.

    Values must be plain data; ADK reads it back through its own restricted unpickler.
    """
    fields = {**{k: (dict(v) if isinstance(v, dict) else v) for k, v in ACTIONS_DEFAULTS.items()}, **actions}
    state = {
        "__dict__": fields,
        "__pydantic_extra__": None,
        "__pydantic_fields_set__": set(actions),
        "__pydantic_private__": None,
    }
    buffer = io.BytesIO()
    _ActionsPickler(buffer, protocol=4).dump(_EventActionsValue(state))
    return buffer.getvalue()
