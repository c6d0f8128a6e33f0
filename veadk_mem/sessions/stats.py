"""What a session database holds and what it cost: sizes, growth, token spend, ages.

Everything per event is computed in the database: a GROUP BY over the events' JSON
(PostgreSQL JSONB operators, MySQL/MariaDB JSON functions, sqlite JSON1), each event's JSON
read once in an inner query where the dialect allows (on MySQL/MariaDB the kinds are folded
in a second GROUP BY instead), gives one row per session and UTC day, and one plain query,
run alongside on a second connection, gives the sessions' times. Python only adds those
rows up into totals, groups, the largest sessions and the age histogram; no event is ever
loaded.

What a layout cannot tell is named in `Stats.unavailable` rather than shown as zero: a
v0 layout pickles `actions`, so its compactions cannot be counted, and an ADK release
before the `usage_metadata` column recorded no token counts.

A token count is added only when it is a whole number from 0 to MAX_TOKENS written in
digits: a JSON integer, or a string of digits (ADK's own reader takes "12" as 12), tested in
SQL before any cast. Anything else (1.5, `true`, -3, 2^63, "abc") is an odd count: skipped,
counted in `Stats.odd_tokens` and its first session named, so one hand-edited row neither
fails the whole query (a cast or an overflowing SUM) nor moves the totals.
"""

from __future__ import annotations

import bisect
import heapq
import time
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from typing import TYPE_CHECKING, Any

from veadk_mem.errors import BadInput, VmemError
from veadk_mem.sessions.layout import Layout, stored_time, to_epoch
from veadk_mem.sessions.records import SessionFilter

if TYPE_CHECKING:
    from veadk_mem.sessions.engine import Database

KINDS = ("user_text", "model_text", "function_call", "function_response", "compaction", "other")
TOKENS = ("prompt", "candidates", "thoughts", "total")
TOKEN_FIELDS = {
    "prompt": "prompt_token_count",
    "candidates": "candidates_token_count",
    "thoughts": "thoughts_token_count",
    "total": "total_token_count",
}
KIND_CODES = {1: "user_text", 2: "model_text", 3: "function_call", 4: "function_response", 5: "compaction", 0: "other"}
KIND_ORDER = [code for name in KINDS for code, named in KIND_CODES.items() if named == name]  # KINDS' codes
GROUPINGS = ("app", "user", "day", "week", "age")
AGE_EDGES = (1, 7, 30, 90, 365)  # days: the histogram's bucket edges by last update
# The largest token count added: nine digits, far above any one model call, and small enough
# that no SUM over a database's events can overflow a 64-bit integer.
MAX_TOKENS = 999_999_999
_COUNT_RE = "^[0-9]{1,9}$"  # a count's unquoted text that is added (MySQL)
_FINE_RE = "^(null|[0-9]{1,9})$"  # a count's unquoted text that is not odd (MySQL)


@dataclass
class Figures:
    """Counts of one slice (a session, a group, everything)."""

    sessions: int = 0
    events: int = 0
    bytes: int = 0
    tokens: dict[str, int] = field(default_factory=lambda: dict.fromkeys(TOKENS, 0))
    kinds: dict[str, int] = field(default_factory=lambda: dict.fromkeys(KINDS, 0))

    def add(self, other: Figures) -> None:
        self.sessions += other.sessions
        self.events += other.events
        self.bytes += other.bytes
        for k in TOKENS:
            self.tokens[k] += other.tokens[k]
        for k in KINDS:
            self.kinds[k] += other.kinds[k]

    def to_json(self) -> dict[str, Any]:
        return {
            "sessions": self.sessions,
            "events": self.events,
            "bytes": self.bytes,
            "tokens": dict(self.tokens),
            "kinds": dict(self.kinds),
        }


@dataclass
class SessionFigures(Figures):
    """One session's figures with its key and times (epoch seconds)."""

    app_name: str = ""
    user_id: str = ""
    id: str = ""
    create_time: float = 0.0
    update_time: float = 0.0


@dataclass
class Stats:
    """The answer of `session stats`: totals, optional groups, the largest sessions, ages, days."""

    layout: str
    apps: int
    users: int
    totals: Figures
    unavailable: list[str]
    groups: list[dict[str, Any]]
    by: str | None
    top: list[SessionFigures]
    ages: list[dict[str, Any]]
    days: list[dict[str, Any]]
    odd_tokens: int = 0  # token counts skipped: no whole number from 0 to MAX_TOKENS
    odd_session: str | None = None  # app/user/id of the first session (by key) holding one

    def odd_warning(self) -> str | None:
        """One line about the skipped token counts, naming the first session holding one."""
        if not self.odd_tokens:
            return None
        plural = "s" if self.odd_tokens != 1 else ""
        return (
            f"{self.odd_tokens:,} token count{plural} in usage_metadata not a whole number from 0 to "
            f"{MAX_TOKENS:,} (first in session {self.odd_session}): skipped, not in the totals"
        )

    def to_json(self) -> dict[str, Any]:
        """vmem's own report (snake_case keys), stable for --json."""
        totals = {"apps": self.apps, "users": self.users, **self.totals.to_json()}
        return {
            "layout": self.layout,
            "unavailable": self.unavailable,
            "odd_token_counts": self.odd_tokens,
            "totals": totals,
            "by": self.by,
            "groups": self.groups,
            "top": [session_record(s) for s in self.top],
            "ages": self.ages,
            "days": self.days,
        }


def session_record(s: SessionFigures) -> dict[str, Any]:
    """One of the largest sessions as a flat record."""
    return {
        "app_name": s.app_name,
        "user_id": s.user_id,
        "id": s.id,
        "events": s.events,
        "bytes": s.bytes,
        **{f"{k}_tokens": v for k, v in s.tokens.items()},
        "create_time": s.create_time,
        "update_time": s.update_time,
    }


def _group_record(key: dict[str, Any], f: Figures, last_update: float | None = None) -> dict[str, Any]:
    out = {**key, "sessions": f.sessions, "events": f.events, "bytes": f.bytes}
    out.update({f"{k}_tokens": v for k, v in f.tokens.items()})
    out.update(f.kinds)
    if last_update is not None:
        out["last_update"] = last_update
    return out


# --- SQL per dialect -----------------------------------------------------------------------


class _Json:
    """The JSON expressions one dialect needs, as SQL text over a column (`doc`) and a path."""

    def __init__(self, dialect: str) -> None:
        self.dialect = dialect

    def count(self, doc: str, path: list[str], *, guard: bool = True) -> tuple[str, str]:
        """A token count at `path` (MySQL, sqlite): (its value when a whole number from 0 to
        MAX_TOKENS in digits, else 0; 1 when it is there, not null, and no such number, else
        0). Tested before any cast, so no value fails the statement. `guard`: look for the
        key's name in the text first, so an event without usage_metadata (most of them) is
        not parsed at all. PostgreSQL's counts are `pg_count`'s."""
        jpath = "$." + ".".join(path)
        if self.dialect == "mysql":
            # each JSON_EXTRACT parses the whole event: the value takes one, REGEXP_SUBSTR giving
            # the digits or ''/NULL (then 0), where a REGEXP test before a CAST takes two
            x = f"JSON_UNQUOTE(JSON_EXTRACT({doc}, '{jpath}'))"
            value = f"COALESCE(CAST(REGEXP_SUBSTR({x}, '{_COUNT_RE}') AS SIGNED), 0)"
            odd = f"CASE WHEN NOT ({x} REGEXP '{_FINE_RE}') THEN 1 ELSE 0 END"
            if guard:
                found = f"{doc} LIKE BINARY '%\"{path[-1]}\"%'"
                value, odd = f"CASE WHEN {found} THEN {value} ELSE 0 END", f"CASE WHEN {found} THEN {odd} ELSE 0 END"
            return value, odd
        kind, x = f"json_type({doc}, '{jpath}')", f"json_extract({doc}, '{jpath}')"
        fits = f"{x} BETWEEN 0 AND {MAX_TOKENS}"
        digits = f"length({x}) BETWEEN 1 AND {len(str(MAX_TOKENS))} AND {x} NOT GLOB '*[^0-9]*'"
        value = (
            f"CASE {kind} WHEN 'integer' THEN CASE WHEN {fits} THEN {x} ELSE 0 END"
            f" WHEN 'text' THEN CASE WHEN {digits} THEN CAST({x} AS INTEGER) ELSE 0 END ELSE 0 END"
        )
        odd = (
            f"CASE COALESCE({kind}, 'null') WHEN 'null' THEN 0 WHEN 'integer' THEN NOT ({fits})"
            f" WHEN 'text' THEN NOT ({digits}) ELSE 1 END"
        )
        if guard:
            found = f"instr({doc}, '\"{path[-1]}\"') > 0"
            value, odd = f"CASE WHEN {found} THEN {value} ELSE 0 END", f"CASE WHEN {found} THEN {odd} ELSE 0 END"
        return value, odd

    @staticmethod
    def pg_count(text: str) -> str:
        """PostgreSQL: a count from its `->>` text: the number when 1-9 digits, else NULL.

        `->>` gives a JSON number's digits (with '-' or '.' when it has them) and a string's
        text; `true` and such are letters. Plain string functions test it (a regex per count
        took three times the old query's time); the odd counts are then those present (text
        not NULL) and not counted, found by the outer COUNTs.
        """
        digits = f"length({text}) BETWEEN 1 AND {len(str(MAX_TOKENS))} AND translate({text}, '0123456789', '') = ''"
        return f"CASE WHEN {digits} THEN {text}::bigint END"

    def text(self, doc: str, path: list[str]) -> str:
        if self.dialect == "postgresql":
            return f"({_arrows(doc, path[:-1])} ->> '{path[-1]}')"
        if self.dialect == "mysql":
            return f"JSON_UNQUOTE(JSON_EXTRACT({doc}, '$.{'.'.join(path)}'))"
        return f"json_extract({doc}, '$.{'.'.join(path)}')"

    def is_object(self, doc: str, path: list[str]) -> str:
        last = path[-1]
        if self.dialect == "postgresql":  # containment on the parent: one pass in C, no jsonpath
            return f"({_arrows(doc, path[:-1])}) @> '{_nested([last], {})}'"
        if self.dialect == "mysql":
            found = f"JSON_TYPE(JSON_EXTRACT({doc}, '$.{'.'.join(path)}')) = 'OBJECT'"
            return f"({doc} LIKE BINARY '%\"{last}\"%' AND {found})"
        return f"(instr({doc}, '\"{last}\"') > 0 AND json_type({doc}, '$.{'.'.join(path)}') = 'object')"

    def parts_have(self, doc: str, parts: list[str], key: str) -> str:
        """Some part of the list at `parts` has `key` (text, function_call, ...)."""
        jpath = "$." + ".".join(parts) if parts else "$"
        if self.dialect == "postgresql":
            # on the parts array itself (`->` by key is cheaper per event than a path's `#>`/`@>` from the top)
            if key != "text":  # function_call / function_response are objects: containment finds them
                return f"({_arrows(doc, parts)}) @> '{_nested([], [{key: {}}])}'"
            return f"jsonb_path_exists({_arrows(doc, parts)}, '$[*].{key}')"
        if self.dialect == "mysql":
            # byte for byte (LIKE BINARY): LOCATE compares by the column's collation, at a far higher cost
            return f"({doc} LIKE BINARY '%\"{key}\"%' AND JSON_CONTAINS_PATH({doc}, 'one', '{jpath}[*].{key}') = 1)"
        # the first part answers most events with one parse; json_each looks at the others
        return (
            f"(instr({doc}, '\"{key}\"') > 0 AND (json_type({doc}, '{jpath}[0].{key}') NOT IN ('null') "
            f"OR EXISTS (SELECT 1 FROM json_each({doc}, '{jpath}') AS p "
            f"WHERE json_type(p.value, '$.{key}') IS NOT NULL AND json_type(p.value, '$.{key}') != 'null')))"
        )

    def size(self, column: str) -> str:
        """Bytes a column's value takes: PostgreSQL's stored (possibly compressed) size, else its length."""
        if self.dialect == "postgresql":
            return f"COALESCE(pg_column_size({column}), 0)"
        if self.dialect == "mysql":
            return f"COALESCE(LENGTH({column}), 0)"
        return f"COALESCE(length(CAST({column} AS BLOB)), 0)"

    def day(self, column: str, epoch: bool) -> str:
        """The UTC day of a time column as YYYY-MM-DD text."""
        if self.dialect == "postgresql":
            return f"date_trunc('day', {column})"  # a timestamp: grouped faster than text
        if self.dialect == "mysql":
            return f"DATE({column})"
        if epoch:
            return f"date({column}, 'unixepoch')"
        return f"substr({column}, 1, 10)"

    def total(self, expr: str) -> str:
        """SUM(expr) as an integer: PostgreSQL's and MySQL's SUM of a bigint is a numeric (a Decimal to decode)."""
        if self.dialect == "postgresql":
            return f"SUM({expr})::bigint"
        if self.dialect == "mysql":
            return f"CAST(SUM({expr}) AS SIGNED)"
        return f"SUM({expr})"


def _arrows(doc: str, path: list[str]) -> str:
    """doc -> 'a' -> 'b' for path [a, b] (PostgreSQL; the keys are vmem's own, never user input)."""
    return " -> ".join([doc, *(f"'{key}'" for key in path)])


def _nested(path: list[str], leaf: Any) -> str:
    """{"a": {"b": leaf}} for path [a, b], as JSON text (the keys are vmem's own, never user input)."""
    import json

    value = leaf
    for key in reversed(path):
        value = {key: value}
    return json.dumps(value, separators=(",", ":"))


def _day_text(value: Any) -> str:
    """A day as the database gave it (date, datetime or text) as YYYY-MM-DD."""
    if isinstance(value, (date, datetime)):
        return value.isoformat()[:10]
    return str(value)[:10]


class _EventSql:
    """Per-event SQL for one store: the kind code, bytes, day and token counts, and what the layout cannot tell.

    `pre` are expressions over the event row (`e`) that the others reuse by name, on the
    dialects whose statements compute them once per event in an inner query (PostgreSQL,
    sqlite); elsewhere `pre` is empty and every expression reads `e` itself.
    """

    def __init__(self, store: Database) -> None:
        dialect = store.dialect
        j = _Json(dialect)
        t = store.tables
        self.unavailable: list[str] = []
        if t.layout is Layout.V0:
            names = {c.name for c in t.events.c}
            content, content_path = "e.content", []
            usage: str | None = "e.usage_metadata" if "usage_metadata" in names else None
            usage_path: list[str] = []
            compaction_path: list[str] | None = None
            self.unavailable.append(
                "compaction: a v0 layout pickles actions, which SQL cannot read (counted as their content)"
            )
            blobs = [
                n
                for n in ("content", "actions", "grounding_metadata", "custom_metadata", "usage_metadata")
                if n in names
            ]
            self.size = " + ".join(j.size(f"e.{n}") for n in blobs)
        else:
            content, content_path = "e.event_data", ["content"]
            usage, usage_path = "e.event_data", ["usage_metadata"]
            compaction_path = ["actions", "compaction"]
            self.size = j.size("e.event_data")
        if usage is None:
            self.unavailable.append("tokens: this ADK release's v0 table has no usage_metadata column")
        self.day = j.day("e.timestamp", t.epoch_times)
        self.pre: dict[str, str] = {}
        parts = [*content_path, "parts"]
        if dialect == "postgresql":
            # the parts array, the role and usage_metadata taken out of each event once (`->` by key)
            self.pre["p"] = _arrows(content, parts)
            self.pre["r"] = j.text(content, [*content_path, "role"])
            if compaction_path is not None:
                self.pre["c"] = j.is_object(content, compaction_path)
            for i, key in enumerate(TOKEN_FIELDS.values()):  # each count's text, read once
                self.pre[f"s{i}"] = f"{_arrows(usage, usage_path)} ->> '{key}'" if usage is not None else "NULL::text"
            self.kind = _kind(
                "c" if compaction_path is not None else None,
                j.parts_have("p", [], "function_call"),
                j.parts_have("p", [], "function_response"),
                j.parts_have("p", [], "text"),
                "r",
            )
            counts = {name: (j.pg_count(f"s{i}"), "") for i, name in enumerate(TOKEN_FIELDS)}
            # per event: the counts present; the outer query takes away those it counted
            self.odd = " + ".join(f"(s{i} IS NOT NULL)::int" for i in range(len(TOKEN_FIELDS)))
        else:
            self.kind = _kind(
                j.is_object(content, compaction_path) if compaction_path is not None else None,
                j.parts_have(content, parts, "function_call"),
                j.parts_have(content, parts, "function_response"),
                j.parts_have(content, parts, "text"),
                j.text(content, [*content_path, "role"]),
            )
            if dialect == "sqlite" and usage is not None and usage_path:
                # usage_metadata's text once per event (a small object, quick to parse four times);
                # json_quote keeps a value that is no object valid JSON, as json_extract needs.
                # Parsed only when a count's name is in the text, as each count was before (an
                # event stored as malformed JSON fails the same statements it did).
                named = " OR ".join(f"instr({usage}, '\"{key}\"') > 0" for key in TOKEN_FIELDS.values())
                self.pre["um"] = (
                    f"CASE WHEN {named} THEN json_quote(json_extract({usage}, '$.{'.'.join(usage_path)}')) END"
                )
                counts = {name: j.count("um", [key], guard=False) for name, key in TOKEN_FIELDS.items()}
            elif usage is not None:
                counts = {name: j.count(usage, [*usage_path, key]) for name, key in TOKEN_FIELDS.items()}
            else:
                counts = {name: ("0", "0") for name in TOKEN_FIELDS}
            # the odd counts of an event: one column beside the tokens, summed like them
            self.odd = " + ".join(f"({odd})" for _, odd in counts.values()) if usage is not None else "0"
            if dialect == "mysql" and usage is not None:
                # under one scan of the text for the four names, not a scan each (each is a
                # LIKE over the whole event: about 7% of the events query at 200,000 events)
                paths = [[*usage_path, key] for key in TOKEN_FIELDS.values()]
                unguarded = " + ".join(f"({j.count(usage, path, guard=False)[1]})" for path in paths)
                self.odd = f"CASE WHEN {usage} LIKE BINARY '%token_count\"%' THEN {unguarded} ELSE 0 END"
        self.tokens = {name: value for name, (value, _) in counts.items()}


def _kind(compaction: str | None, call: str, response: str, text: str, role: str) -> str:
    """The kind code of an event, from SQL conditions: the first that holds decides."""
    kind = "CASE"
    if compaction is not None:
        kind += f" WHEN {compaction} THEN 5"
    return kind + (
        f" WHEN {call} THEN 3 WHEN {response} THEN 4"
        f" WHEN {text} THEN CASE {role} WHEN 'user' THEN 1 WHEN 'model' THEN 2 ELSE 0 END"
        " ELSE 0 END"
    )


def _key_terms(store: Database, alias: str, flt: SessionFilter, params: dict[str, Any]) -> list[str]:
    """WHERE terms for app and user on `alias`, exact on MySQL too (not by collation)."""
    terms = []
    for name, column in (("app", "app_name"), ("user", "user_id")):
        value = getattr(flt, name)
        if value is None:
            continue
        params[f"f_{name}"] = value
        term = f"{alias}.{column} = :f_{name}"
        if store.dialect == "mysql":
            term += f" AND CAST({alias}.{column} AS BINARY) = CAST(:f_{name} AS BINARY)"
        terms.append(term)
    return terms


def _time_terms(store: Database, flt: SessionFilter, params: dict[str, Any]) -> list[str]:
    terms = []
    if flt.since is not None:
        params["f_since"] = stored_time(store.tables, flt.since)
        terms.append("s.update_time >= :f_since")
    if flt.until is not None:
        params["f_until"] = stored_time(store.tables, flt.until)
        terms.append("s.update_time < :f_until")
    return terms


def _events_sql(store: Database, flt: SessionFilter, params: dict[str, Any]) -> tuple[str, list[str]]:
    """One GROUP BY over the events: a row per (session, UTC day) with every per-event figure summed
    (events, bytes, tokens, kinds, then the odd token counts: WIDTH columns after the key and day)."""
    ev = _EventSql(store)
    j = _Json(store.dialect)
    where = _key_terms(store, "e", flt, params)
    source = "events e"
    times = _time_terms(store, flt, params)
    if times:  # update-time filters live on the session row
        source += " JOIN sessions s ON s.app_name = e.app_name AND s.user_id = e.user_id AND s.id = e.session_id"
        where += times
    source += f" WHERE {' AND '.join(where)}" if where else ""
    keys = f"e.app_name AS a, e.user_id AS u, e.session_id AS sid, {ev.day} AS d, {ev.size} AS b"
    pre = "".join(f", {sql} AS {name}" for name, sql in ev.pre.items())
    tokens = ", ".join(f"{ev.tokens[k]} AS t_{k}" for k in TOKENS) + f", {ev.odd} AS t_odd"
    kinds = ", ".join(f"COUNT(*) FILTER (WHERE k = {code})" for code in KIND_ORDER)
    totals = ", ".join(j.total(f"t_{k}") for k in TOKENS)
    odd = j.total("t_odd")
    if store.dialect == "postgresql":
        # a count not counted is NULL: the sums skip it, and present - counted are the odd ones
        totals = ", ".join(f"COALESCE(SUM(t_{k}), 0)::bigint" for k in TOKENS)
        odd = f"(SUM(t_odd) - {' - '.join(f'COUNT(t_{k})' for k in TOKENS)})::bigint"
        # The planner would inline a subquery's expressions into every aggregate that names
        # them (the kind's CASE six times over); a volatile function in a subquery's select
        # list keeps it from being pulled up, so each level computes its columns once per event
        # (clock_timestamp() is parallel safe: the scan stays parallel). Inner: what is read out
        # of the JSONB; middle: the kind and tokens from it; outer: one hash aggregate.
        inner = f"SELECT {keys}{pre}, clock_timestamp() AS fence FROM {source}"
        middle = f"SELECT a, u, sid, d, b, {tokens}, {ev.kind} AS k, clock_timestamp() AS fence FROM ({inner}) x"
        sql = (
            f"SELECT a, u, sid, d, COUNT(*), {j.total('b')}, {totals}, {kinds}, {odd}"
            f" FROM ({middle}) y GROUP BY a, u, sid, d"
        )
        return sql, ev.unavailable
    if store.dialect == "sqlite":
        # LIMIT -1 (no limit) keeps sqlite from flattening the subquery into the GROUP BY: it
        # would then sort every event with its whole event_data and compute the JSON after the
        # sort; as a co-routine, each event's figures are computed once and only they are sorted.
        if "um" in ev.pre:  # the tokens out of usage_metadata's text, which the inner query took out
            inner = f"SELECT {keys}, {ev.kind} AS k{pre} FROM {source} LIMIT -1"
            sums = ", ".join(f"SUM({ev.tokens[k]})" for k in TOKENS)
            odd = f"SUM({ev.odd})"
        else:
            inner = f"SELECT {keys}, {ev.kind} AS k, {tokens} FROM {source} LIMIT -1"
            sums = ", ".join(f"SUM(t_{k})" for k in TOKENS)
            odd = "SUM(t_odd)"
        kinds = ", ".join(f"SUM(k = {code})" for code in KIND_ORDER)
        sql = f"SELECT a, u, sid, d, COUNT(*), SUM(b), {sums}, {kinds}, {odd} FROM ({inner}) x GROUP BY a, u, sid, d"
        return sql, ev.unavailable
    inner = f"SELECT {keys}, {tokens}, {ev.kind} AS k FROM {source}"
    sums = ", ".join(f"{j.total(f't_{k}')} AS t_{k}" for k in (*TOKENS, "odd"))
    # Grouped by kind first: the kind's CASE is then evaluated once per event (the planners
    # inline a subquery's column into every aggregate naming it, so six SUM(CASE k ...) over
    # the events would cost it six times); the outer level folds the kinds into columns.
    by_kind = (
        f"SELECT a, u, sid, d, k, COUNT(*) AS n, {j.total('b')} AS b, {sums} FROM ({inner}) x GROUP BY a, u, sid, d, k"
    )
    kinds = ", ".join(j.total(f"CASE WHEN k = {code} THEN n ELSE 0 END") for code in KIND_ORDER)
    sums = f"{j.total('n')}, {j.total('b')}, {totals}, {kinds}, {odd}"
    sql = f"SELECT a, u, sid, d, {sums} FROM ({by_kind}) y GROUP BY a, u, sid, d"
    return sql, ev.unavailable


def _sessions_sql(store: Database, flt: SessionFilter, params: dict[str, Any]) -> str:
    """The selected sessions' keys and times; on PostgreSQL the times come as epoch seconds already
    (float8, the value `to_epoch` gives: naive times are UTC), so no datetime is built per session."""
    where = _key_terms(store, "s", flt, params) + _time_terms(store, flt, params)
    times = "s.create_time, s.update_time"
    if store.dialect == "postgresql":
        times = "EXTRACT(EPOCH FROM s.create_time)::float8, EXTRACT(EPOCH FROM s.update_time)::float8"
    return f"SELECT s.app_name, s.user_id, s.id, {times} FROM sessions s" + (
        f" WHERE {' AND '.join(where)}" if where else ""
    )


# --- the figures ---------------------------------------------------------------------------


async def collect_stats(
    store: Database,
    flt: SessionFilter | None = None,
    *,
    by: str | None = None,
    top: int = 10,
    now: float | None = None,
) -> Stats:
    """Stats of the sessions `flt` selects (update time for --since/--until), computed in the database."""
    import asyncio

    from sqlalchemy import text

    if by is not None and by not in GROUPINGS:
        raise BadInput(f"--by: expected one of {', '.join(GROUPINGS)}, got {by!r}")
    flt = (flt or SessionFilter()).resolved()
    now = time.time() if now is None else now
    e_params: dict[str, Any] = {}
    s_params: dict[str, Any] = {}
    events_sql, unavailable = _events_sql(store, flt, e_params)
    sessions_sql = _sessions_sql(store, flt, s_params)

    async def read_sessions() -> list[Any]:
        async with store.reader.connect() as conn:
            return list((await conn.execute(text(sessions_sql), s_params)).all())

    async def read_events() -> list[Any]:
        if store.dialect == "postgresql":
            async with store.engine.connect() as conn, conn.begin():
                await conn.exec_driver_sql(_pg_settings(flt))
                return list((await conn.execute(text(events_sql), e_params)).all())
        async with store.reader.connect() as conn:
            return list((await conn.execute(text(events_sql), e_params)).all())

    # Two connections: the sessions' rows arrive and decode while the database scans the events.
    try:
        async with asyncio.TaskGroup() as tasks:
            sessions_task = tasks.create_task(read_sessions())
            events_task = tasks.create_task(read_events())
    except BaseExceptionGroup as group:
        exc = group.exceptions[0]
        if isinstance(exc, VmemError) or not isinstance(exc, Exception):
            raise exc from None
        raise store.fail(exc) from None
    return _figures(
        store, sessions_task.result(), events_task.result(), unavailable=unavailable, by=by, top=top, now=now
    )


WIDTH = 2 + len(TOKENS) + len(KINDS) + 1  # a flat accumulator: events, bytes, tokens..., kinds..., odd counts


def _figures(
    store: Database,
    session_rows: list[Any],
    event_rows: list[Any],
    *,
    unavailable: list[str],
    by: str | None,
    top: int,
    now: float,
) -> Stats:
    """Add the database's rows (one per session, one per session and day) up into the answer.

    Kept to flat integer lists per session (20,000 sessions are 20,000 lists, not 20,000 objects
    with their dicts): Figures are built for what is shown, the largest sessions, days and groups.
    """
    epochs = store.dialect == "postgresql"  # _sessions_sql asked for epoch seconds there
    times: dict[tuple[str, str, str], tuple[float, float]] = {}
    for app, user, sid, created, updated in session_rows:
        times[(app, user, sid)] = (created or 0.0, updated or 0.0) if epochs else (to_epoch(created), to_epoch(updated))
    per_session: dict[tuple[str, str, str], list[int]] = {}
    day_rows: dict[Any, list[list[int]]] = {}
    for app, user, sid, day, *values in event_rows:
        key = (app, user, sid)
        if key not in times:  # an event without its session row (cannot be: a foreign key)
            continue
        acc = per_session.get(key)  # a session spans one day, seldom two: added up as it comes
        per_session[key] = values if acc is None else [x + y for x, y in zip(acc, values, strict=True)]
        day_rows.setdefault(day, []).append(values)
    per_day = {day: [sum(column) for column in zip(*rows, strict=True)] for day, rows in day_rows.items()}
    zero = [0] * WIDTH
    sessions = [(key, created, updated, per_session.get(key, zero)) for key, (created, updated) in times.items()]

    totals = Figures(sessions=len(sessions))
    if sessions:
        _fill(totals, [sum(column) for column in zip(*(s[3] for s in sessions), strict=True)])
    days: dict[str, Figures] = {}
    for raw_day, acc in per_day.items():
        _fill(days.setdefault(_day_text(raw_day), Figures()), acc)
    created_on: dict[str, int] = {}  # sessions count in the day they were created
    names: dict[int, str] = {}  # UTC day number: its name, so that 20,000 sessions make a few hundred dates
    for _, created, _, _ in sessions:
        number = int(created // 86400)
        if created - number * 86400 < 86399.999:
            name = names.get(number) or names.setdefault(number, _day(number * 86400))
        else:  # within a millisecond of midnight, where rounding to microseconds could tip the day
            name = _day(created)
        created_on[name] = created_on.get(name, 0) + 1
    for name, count in created_on.items():
        if name not in days:
            days[name] = Figures()
        days[name].sessions += count

    ranked = heapq.nsmallest(max(top, 0), sessions, key=lambda s: (-s[3][1], -s[3][0], s[0]))
    odd = [s[0] for s in sessions if s[3][-1]]
    return Stats(
        layout=store.layout.value,
        apps=len({key[0] for key in times}),
        users=len({key[:2] for key in times}),
        totals=totals,
        unavailable=unavailable,
        groups=_groups(sessions, days, by, now),
        by=by,
        top=[_session_figures(s) for s in ranked],
        ages=age_histogram(sessions, now),
        days=[_group_record({"day": d}, f) for d, f in sorted(days.items(), reverse=True)],
        odd_tokens=sum(s[3][-1] for s in sessions),
        odd_session="/".join(min(odd)) if odd else None,
    )


def _session_figures(s: tuple[tuple[str, str, str], float, float, list[int]]) -> SessionFigures:
    (app, user, sid), created, updated, acc = s
    out = SessionFigures(sessions=1, app_name=app, user_id=user, id=sid, create_time=created, update_time=updated)
    _fill(out, acc)
    return out


def _fill(f: Figures, acc: list[int]) -> None:
    """Add a flat accumulator (events, bytes, tokens..., kinds...) to `f`."""
    f.events += acc[0]
    f.bytes += acc[1]
    for i, k in enumerate(TOKENS):
        f.tokens[k] += acc[2 + i]
    for i, k in enumerate(KINDS):
        f.kinds[k] += acc[2 + len(TOKENS) + i]


def _pg_settings(flt: SessionFilter) -> str:
    """This transaction's planner settings, in one statement (set_config(..., true) is SET LOCAL:
    nothing outlives the transaction).

    A hash aggregate needs room for a group per session, day and kind. Over every event, the
    planner likes to walk ADK's index for its presorted keys, serially, or to sort every event
    for a group aggregate; a parallel sequential scan into hash aggregates does the same work
    in less time (docs/BENCHMARKS.md, session stats). JIT compilation is off: the query's cost
    estimate turns it on with inlining and optimization, which each parallel worker compiles
    again, for expressions that are mostly calls into the JSONB functions, which it cannot speed up.
    """
    settings = {"work_mem": "64MB", "jit": "off"}
    if flt.app is None and flt.user is None:
        # otherwise a sort of every event, spilled to disk
        settings.update({f"enable_{name}": "off" for name in ("indexscan", "bitmapscan", "sort")})
    return "SELECT " + ", ".join(f"set_config('{name}', '{value}', true)" for name, value in settings.items())


def _day(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, tz=UTC).strftime("%Y-%m-%d")


def _week(day: str) -> str:
    """The Monday (UTC) of the ISO week holding `day`, as YYYY-MM-DD."""
    d = date.fromisoformat(day)
    return (d - timedelta(days=d.weekday())).isoformat()


Session = tuple[tuple[str, str, str], float, float, list[int]]  # key, create and update time, accumulator


def _groups(sessions: list[Session], days: dict[str, Figures], by: str | None, now: float) -> list[dict[str, Any]]:
    if by is None:
        return []
    if by == "age":
        return age_histogram(sessions, now)
    if by in ("day", "week"):
        if by == "day":
            return [_group_record({"day": d}, f) for d, f in sorted(days.items(), reverse=True)]
        weeks: dict[str, Figures] = {}
        for d, f in days.items():
            weeks.setdefault(_week(d), Figures()).add(f)
        return [_group_record({"week": w}, f) for w, f in sorted(weeks.items(), reverse=True)]
    width = 1 if by == "app" else 2
    groups: dict[tuple[str, ...], tuple[int, list[int], float]] = {}
    for key, _, updated, acc in sessions:
        group = key[:width]
        found = groups.get(group)
        if found is None:
            groups[group] = (1, acc, updated)
        else:
            count, sums, last = found
            groups[group] = (count + 1, [x + y for x, y in zip(sums, acc, strict=True)], max(last, updated))
    names = ("app_name", "user_id")[:width]
    figures = []
    for group, (count, sums, last) in groups.items():
        f = Figures(sessions=count)
        _fill(f, sums)
        figures.append((group, f, last))
    figures.sort(key=lambda g: (-g[1].bytes, -g[1].events, g[0]))
    return [_group_record(dict(zip(names, group, strict=True)), f, last) for group, f, last in figures]


def age_histogram(sessions: list[Session], now: float) -> list[dict[str, Any]]:
    """Sessions by time since last update, youngest first, each bucket with what is older than
    its lower edge (what `session delete --older-than <edge>d` would remove)."""
    edges = (0, *AGE_EDGES)
    counts = [[0, 0, 0] for _ in edges]  # sessions, events, bytes
    for _, _, updated, acc in sessions:
        age_days = (now - updated) / 86400
        bucket = counts[bisect.bisect_right(AGE_EDGES, age_days)]  # the edges it is at or past
        bucket[0] += 1
        bucket[1] += acc[0]
        bucket[2] += acc[1]
    out = []
    older = [0, 0, 0]
    for i in range(len(edges) - 1, -1, -1):
        older = [x + y for x, y in zip(older, counts[i], strict=True)]
        low, high = edges[i], edges[i + 1] if i + 1 < len(edges) else None
        label = f"{low}d-{high}d" if high is not None else f">{low}d"
        if low == 0:
            label = f"<{high}d"
        out.append(
            {
                "age": label,
                "min_days": low,
                "max_days": high,
                "sessions": counts[i][0],
                "events": counts[i][1],
                "bytes": counts[i][2],
                "older_sessions": older[0],
                "older_events": older[1],
                "older_bytes": older[2],
            }
        )
    out.reverse()
    return out
