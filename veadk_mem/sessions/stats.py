"""What a session database holds and what it cost: sizes, growth, token spend, ages.

Everything per event is computed in the database: a GROUP BY over the events' JSON
(PostgreSQL JSONB operators, MySQL/MariaDB JSON functions, sqlite JSON1), folded by kind
in a second one, gives one row per session and UTC day, and one plain query gives the
sessions' times. Python only adds
those rows up into totals, groups, the largest sessions and the age histogram; no event
is ever loaded.

What a layout cannot tell is named in `Stats.unavailable` rather than shown as zero: a
v0 layout pickles `actions`, so its compactions cannot be counted, and an ADK release
before the `usage_metadata` column recorded no token counts.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from typing import TYPE_CHECKING, Any

from veadk_mem.errors import BadInput, VmemError
from veadk_mem.sessions.layout import Layout, stored_time, to_epoch
from veadk_mem.sessions.records import SessionFilter

if TYPE_CHECKING:
    from veadk_mem.sessions.store import SessionStore

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

    def to_json(self) -> dict[str, Any]:
        """vmem's own report (snake_case keys), stable for --json."""
        totals = {"apps": self.apps, "users": self.users, **self.totals.to_json()}
        return {
            "layout": self.layout,
            "unavailable": self.unavailable,
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

    def number(self, doc: str, path: list[str]) -> str:
        if self.dialect == "postgresql":
            return f"COALESCE(({doc} #>> '{{{','.join(path)}}}')::bigint, 0)"
        if self.dialect == "mysql":
            return f"COALESCE(CAST(JSON_EXTRACT({doc}, '$.{'.'.join(path)}') AS SIGNED), 0)"
        # an event without usage_metadata (most of them) is not parsed at all
        return (
            f"CASE WHEN instr({doc}, '\"{path[-1]}\"') > 0 "
            f"THEN COALESCE(CAST(json_extract({doc}, '$.{'.'.join(path)}') AS INTEGER), 0) ELSE 0 END"
        )

    def text(self, doc: str, path: list[str]) -> str:
        if self.dialect == "postgresql":
            return f"({doc} #>> '{{{','.join(path)}}}')"
        if self.dialect == "mysql":
            return f"JSON_UNQUOTE(JSON_EXTRACT({doc}, '$.{'.'.join(path)}'))"
        return f"json_extract({doc}, '$.{'.'.join(path)}')"

    def is_object(self, doc: str, path: list[str]) -> str:
        last = path[-1]
        if self.dialect == "postgresql":  # containment: one pass in C, no path walk per event
            return f"{doc} @> '{_nested(path, {})}'"
        if self.dialect == "mysql":
            return (
                f"(LOCATE('\"{last}\"', {doc}) > 0 AND JSON_TYPE(JSON_EXTRACT({doc}, '$.{'.'.join(path)}')) = 'OBJECT')"
            )
        return f"(instr({doc}, '\"{last}\"') > 0 AND json_type({doc}, '$.{'.'.join(path)}') = 'object')"

    def parts_have(self, doc: str, parts: list[str], key: str) -> str:
        """Some part of the list at `parts` has `key` (text, function_call, ...)."""
        jpath = "$." + ".".join(parts) if parts else "$"
        if self.dialect == "postgresql":
            if key != "text":  # function_call / function_response are objects: containment finds them
                return f"{doc} @> '{_nested(parts, [{key: {}}])}'"
            return f"jsonb_path_exists({doc}, '{jpath}[*].{key}')"
        if self.dialect == "mysql":
            return f"(LOCATE('\"{key}\"', {doc}) > 0 AND JSON_CONTAINS_PATH({doc}, 'one', '{jpath}[*].{key}') = 1)"
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


def _event_columns(store: SessionStore) -> tuple[dict[str, str], list[str]]:
    """Per-event SQL: kind code, bytes and token counts for this layout; and what it cannot tell."""
    j = _Json(store.dialect)
    t = store.tables
    unavailable: list[str] = []
    if t.layout is Layout.V0:
        names = {c.name for c in t.events.c}
        content, content_path = "e.content", []
        usage, usage_path = ("e.usage_metadata", []) if "usage_metadata" in names else (None, [])
        compaction = None
        unavailable.append("compaction: a v0 layout pickles actions, which SQL cannot read (counted as their content)")
        blobs = [
            n for n in ("content", "actions", "grounding_metadata", "custom_metadata", "usage_metadata") if n in names
        ]
        size = " + ".join(j.size(f"e.{n}") for n in blobs)
    else:
        content, content_path = "e.event_data", ["content"]
        usage, usage_path = "e.event_data", ["usage_metadata"]
        compaction = j.is_object("e.event_data", ["actions", "compaction"])
        size = j.size("e.event_data")
    if usage is None:
        unavailable.append("tokens: this ADK release's v0 table has no usage_metadata column")
    role = j.text(content, [*content_path, "role"])
    parts = [*content_path, "parts"]
    kind = "CASE"
    if compaction is not None:
        kind += f" WHEN {compaction} THEN 5"
    kind += (
        f" WHEN {j.parts_have(content, parts, 'function_call')} THEN 3"
        f" WHEN {j.parts_have(content, parts, 'function_response')} THEN 4"
        f" WHEN {j.parts_have(content, parts, 'text')} THEN"
        f" CASE {role} WHEN 'user' THEN 1 WHEN 'model' THEN 2 ELSE 0 END"
        " ELSE 0 END"
    )
    cols = {"kind": kind, "size": size, "day": j.day("e.timestamp", t.epoch_times)}
    for name, key in TOKEN_FIELDS.items():
        cols[name] = j.number(usage, [*usage_path, key]) if usage is not None else "0"
    return cols, unavailable


def _key_terms(store: SessionStore, alias: str, flt: SessionFilter, params: dict[str, Any]) -> list[str]:
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


def _time_terms(store: SessionStore, flt: SessionFilter, params: dict[str, Any]) -> list[str]:
    terms = []
    if flt.since is not None:
        params["f_since"] = stored_time(store.tables, flt.since)
        terms.append("s.update_time >= :f_since")
    if flt.until is not None:
        params["f_until"] = stored_time(store.tables, flt.until)
        terms.append("s.update_time < :f_until")
    return terms


def _events_sql(store: SessionStore, flt: SessionFilter, params: dict[str, Any]) -> tuple[str, list[str]]:
    """One GROUP BY over the events: a row per (session, UTC day) with every per-event figure summed."""
    cols, unavailable = _event_columns(store)
    where = _key_terms(store, "e", flt, params)
    source = "events e"
    times = _time_terms(store, flt, params)
    if times:  # update-time filters live on the session row
        source += " JOIN sessions s ON s.app_name = e.app_name AND s.user_id = e.user_id AND s.id = e.session_id"
        where += times
    inner = (
        f"SELECT e.app_name AS a, e.user_id AS u, e.session_id AS sid, {cols['day']} AS d, {cols['size']} AS b, "
        + ", ".join(f"{cols[k]} AS t_{k}" for k in TOKENS)
        + f", {cols['kind']} AS k FROM {source}"
        + (f" WHERE {' AND '.join(where)}" if where else "")
    )
    sums = ", ".join(f"SUM(t_{k}) AS t_{k}" for k in TOKENS)
    # Grouped by kind first: the kind's CASE is then evaluated once per event (the planners
    # inline a subquery's column into every aggregate naming it, so six SUM(CASE k ...) over
    # the events would cost it six times); the outer level folds the kinds into columns.
    by_kind = f"SELECT a, u, sid, d, k, COUNT(*) AS n, SUM(b) AS b, {sums} FROM ({inner}) x GROUP BY a, u, sid, d, k"
    kinds = ", ".join(f"SUM(CASE WHEN k = {code} THEN n ELSE 0 END)" for code in KIND_ORDER)
    outer = ", ".join(f"SUM(t_{k})" for k in TOKENS)
    sql = f"SELECT a, u, sid, d, SUM(n), SUM(b), {outer}, {kinds} FROM ({by_kind}) y GROUP BY a, u, sid, d"
    return sql, unavailable


def _sessions_sql(store: SessionStore, flt: SessionFilter, params: dict[str, Any]) -> str:
    where = _key_terms(store, "s", flt, params) + _time_terms(store, flt, params)
    times = "s.create_time, s.update_time"
    return f"SELECT s.app_name, s.user_id, s.id, {times} FROM sessions s" + (
        f" WHERE {' AND '.join(where)}" if where else ""
    )


# --- the figures ---------------------------------------------------------------------------


async def collect_stats(
    store: SessionStore,
    flt: SessionFilter | None = None,
    *,
    by: str | None = None,
    top: int = 10,
    now: float | None = None,
) -> Stats:
    """Stats of the sessions `flt` selects (update time for --since/--until), computed in the database."""
    from sqlalchemy import text

    if by is not None and by not in GROUPINGS:
        raise BadInput(f"--by: expected one of {', '.join(GROUPINGS)}, got {by!r}")
    flt = (flt or SessionFilter()).resolved()
    now = time.time() if now is None else now
    e_params: dict[str, Any] = {}
    s_params: dict[str, Any] = {}
    events_sql, unavailable = _events_sql(store, flt, e_params)
    sessions_sql = _sessions_sql(store, flt, s_params)
    try:
        async with store.reader.connect() as conn:
            session_rows = (await conn.execute(text(sessions_sql), s_params)).all()
        if store.dialect == "postgresql":
            async with store.engine.connect() as conn, conn.begin():
                for setting in _pg_settings(flt):
                    await conn.exec_driver_sql(setting)
                event_rows = (await conn.execute(text(events_sql), e_params)).all()
        else:
            async with store.reader.connect() as conn:
                event_rows = (await conn.execute(text(events_sql), e_params)).all()
    except VmemError:
        raise
    except Exception as exc:
        raise store._fail(exc) from None

    sessions: dict[tuple[str, str, str], SessionFigures] = {}
    for app, user, sid, created, updated in session_rows:
        sessions[(app, user, sid)] = SessionFigures(
            sessions=1, app_name=app, user_id=user, id=sid, create_time=to_epoch(created), update_time=to_epoch(updated)
        )
    # rows are (session, day, kind): added up in flat lists, one Figures per session and day at the end
    width = 2 + len(TOKENS) + len(KINDS)
    per_session: dict[tuple[str, str, str], list[int]] = {}
    per_day: dict[Any, list[int]] = {}
    for row in event_rows:
        key = (row[0], row[1], row[2])
        if key not in sessions:  # an event without its session row (cannot be: a foreign key)
            continue
        values = [int(v or 0) for v in row[4:]]
        for acc in (per_session.setdefault(key, [0] * width), per_day.setdefault(row[3], [0] * width)):
            for i, v in enumerate(values):
                acc[i] += v
    for key, acc in per_session.items():
        _fill(sessions[key], acc)
    days: dict[str, Figures] = {}
    for raw_day, acc in per_day.items():
        _fill(days.setdefault(_day_text(raw_day), Figures()), acc)
    for s in sessions.values():  # sessions count in the day they were created
        days.setdefault(_day(s.create_time), Figures()).sessions += 1

    totals = Figures()
    for s in sessions.values():
        totals.add(s)
    ranked = sorted(sessions.values(), key=lambda s: (-s.bytes, -s.events, s.app_name, s.user_id, s.id))
    return Stats(
        layout=store.layout.value,
        apps=len({s.app_name for s in sessions.values()}),
        users=len({(s.app_name, s.user_id) for s in sessions.values()}),
        totals=totals,
        unavailable=unavailable,
        groups=_groups(sessions.values(), days, by, now),
        by=by,
        top=ranked[:top] if top > 0 else [],
        ages=age_histogram(sessions.values(), now),
        days=[_group_record({"day": d}, f) for d, f in sorted(days.items(), reverse=True)],
    )


def _fill(f: Figures, acc: list[int]) -> None:
    """Add a flat accumulator (events, bytes, tokens..., kinds...) to `f`."""
    f.events += acc[0]
    f.bytes += acc[1]
    for i, k in enumerate(TOKENS):
        f.tokens[k] += acc[2 + i]
    for i, k in enumerate(KINDS):
        f.kinds[k] += acc[2 + len(TOKENS) + i]


def _pg_settings(flt: SessionFilter) -> list[str]:
    """This transaction's planner settings (SET LOCAL: nothing outlives the statement).

    A hash aggregate needs room for a group per session, day and kind. Over every event, the
    planner likes to walk ADK's index for its presorted keys, serially, or to sort every event
    for a group aggregate; a parallel sequential scan into hash aggregates takes less than half
    the time (measured on the 1,000,000 events of bench/session_stats.py).
    """
    settings = ["SET LOCAL work_mem = '64MB'"]
    if flt.app is None and flt.user is None:
        off = ("indexscan", "bitmapscan", "sort")  # a sort of every event spilled to disk, 3x slower than hashing
        settings += [f"SET LOCAL enable_{name} = off" for name in off]
    return settings


def _day(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, tz=UTC).strftime("%Y-%m-%d")


def _week(day: str) -> str:
    """The Monday (UTC) of the ISO week holding `day`, as YYYY-MM-DD."""
    d = date.fromisoformat(day)
    return (d - timedelta(days=d.weekday())).isoformat()


def _groups(sessions: Any, days: dict[str, Figures], by: str | None, now: float) -> list[dict[str, Any]]:
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
    groups: dict[tuple[str, ...], tuple[Figures, float]] = {}
    for s in sessions:
        key = (s.app_name,) if by == "app" else (s.app_name, s.user_id)
        f, last = groups.get(key, (Figures(), 0.0))
        f.add(s)
        groups[key] = (f, max(last, s.update_time))
    names = ("app_name",) if by == "app" else ("app_name", "user_id")
    ranked = sorted(groups.items(), key=lambda kv: (-kv[1][0].bytes, -kv[1][0].events, kv[0]))
    return [_group_record(dict(zip(names, k, strict=True)), f, last) for k, (f, last) in ranked]


def age_histogram(sessions: Any, now: float) -> list[dict[str, Any]]:
    """Sessions by time since last update, youngest first, each bucket with what is older than
    its lower edge (what `session delete --older-than <edge>d` would remove)."""
    edges = (0, *AGE_EDGES)
    buckets = [Figures() for _ in edges]
    for s in sessions:
        age_days = (now - s.update_time) / 86400
        i = sum(1 for e in edges[1:] if age_days >= e)
        buckets[i].add(s)
    out = []
    older = Figures()
    for i in range(len(edges) - 1, -1, -1):
        older.add(buckets[i])
        low, high = edges[i], edges[i + 1] if i + 1 < len(edges) else None
        label = f"{low}d-{high}d" if high is not None else f">{low}d"
        if low == 0:
            label = f"<{high}d"
        out.append(
            {
                "age": label,
                "min_days": low,
                "max_days": high,
                "sessions": buckets[i].sessions,
                "events": buckets[i].events,
                "bytes": buckets[i].bytes,
                "older_sessions": older.sessions,
                "older_events": older.events,
                "older_bytes": older.bytes,
            }
        )
    out.reverse()
    return out
