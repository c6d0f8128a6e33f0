"""The table layouts ADK has written session databases in, and how to tell them apart.

- `v1`: ADK 1.22+ `DatabaseSessionService` (`adk_internal_metadata.schema_version = 1`,
  `events.event_data` JSON: JSONB on PostgreSQL, LONGTEXT on MySQL, TEXT on sqlite;
  naive UTC DATETIME(6) timestamps).
- `v0`: ADK 1.19-1.21 `DatabaseSessionService` (one column per event field, `actions` a pickle).
- `sqlite`: ADK `SqliteSessionService` files (REAL epoch timestamps, TEXT JSON).

The tables here are SQLAlchemy Core mirrors of ADK's, column for column, so vmem reads and
writes each database in the layout it already has and creates v1 exactly as ADK 2.x does.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

from sqlalchemy import (
    Boolean,
    Column,
    DateTime,
    Float,
    ForeignKeyConstraint,
    Index,
    LargeBinary,
    MetaData,
    String,
    Table,
    Text,
)
from sqlalchemy.engine import Dialect
from sqlalchemy.types import TypeDecorator, TypeEngine

from veadk_mem.jsonio import adk_text, stored_json

KEY_LEN = 128
VARCHAR_LEN = 256
SCHEMA_VERSION_KEY = "schema_version"
EVENTS_INDEX = "idx_events_app_user_session_ts_id"  # the one index ADK creates besides primary keys
LATEST_SCHEMA_VERSION = "1"


def naive_utc(epoch: float) -> datetime:
    """Epoch seconds as the naive UTC datetime ADK stores (`datetime.fromtimestamp(t, UTC)` without its zone)."""
    return datetime.fromtimestamp(epoch, tz=UTC).replace(tzinfo=None)


class Layout(StrEnum):
    """How a session database stores its rows."""

    V1 = "v1"
    V0 = "v0"
    SQLITE = "sqlite"
    EMPTY = "empty"

    @property
    def label(self) -> str:
        return {
            "v1": "ADK schema v1 (DatabaseSessionService, JSON events)",
            "v0": "ADK schema v0 (DatabaseSessionService, pickled actions)",
            "sqlite": "ADK SqliteSessionService file",
            "empty": "no ADK tables yet",
        }[self.value]


class AdkJSON(TypeDecorator[Any]):
    """ADK's DynamicJSON: JSONB on PostgreSQL, LONGTEXT on MySQL, TEXT elsewhere."""

    impl = Text
    cache_ok = True

    def load_dialect_impl(self, dialect: Dialect) -> TypeEngine[Any]:
        if dialect.name == "postgresql":
            from sqlalchemy.dialects.postgresql import JSONB

            return dialect.type_descriptor(JSONB())
        if dialect.name in ("mysql", "mariadb"):
            from sqlalchemy.dialects.mysql import LONGTEXT

            return dialect.type_descriptor(LONGTEXT())
        return dialect.type_descriptor(Text())

    def process_bind_param(self, value: Any, dialect: Dialect) -> Any:
        if value is None or dialect.name == "postgresql":
            return value
        return adk_text(value)

    def process_result_value(self, value: Any, dialect: Dialect) -> Any:
        if value is None or dialect.name == "postgresql" or not isinstance(value, (str, bytes, bytearray)):
            return value
        return stored_json(value)


class AdkTimestamp(TypeDecorator[Any]):
    """ADK's PreciseTimestamp: DATETIME(6) on MySQL, plain DATETIME / TIMESTAMP elsewhere."""

    impl = DateTime
    cache_ok = True

    def load_dialect_impl(self, dialect: Dialect) -> TypeEngine[Any]:
        if dialect.name in ("mysql", "mariadb"):
            from sqlalchemy.dialects.mysql import DATETIME

            return dialect.type_descriptor(DATETIME(fsp=6))
        return dialect.type_descriptor(DateTime())


class AdkPickle(TypeDecorator[Any]):
    """The bytes of v0's pickled `actions`: LONGBLOB on MySQL, BLOB / BYTEA elsewhere."""

    impl = LargeBinary
    cache_ok = True

    def load_dialect_impl(self, dialect: Dialect) -> TypeEngine[Any]:
        if dialect.name in ("mysql", "mariadb"):
            from sqlalchemy.dialects.mysql import LONGBLOB

            return dialect.type_descriptor(LONGBLOB())
        return dialect.type_descriptor(LargeBinary())


def _stamp() -> TypeEngine[Any]:
    return AdkTimestamp()


def _blob() -> TypeEngine[Any]:
    return AdkPickle()


@dataclass
class Tables:
    """The four ADK tables (plus metadata for v1) for one layout."""

    layout: Layout
    metadata: MetaData
    sessions: Table
    events: Table
    app_states: Table
    user_states: Table
    internal: Table | None = None
    missing: tuple[str, ...] = ()  # v0 event columns this database's ADK release did not have yet

    @property
    def releases(self) -> str:
        """The ADK releases whose tables look like these ("1.15-1.17" for a v0 set), or ""."""
        if self.layout is not Layout.V0:
            return ""
        return V0_RELEASES.get(frozenset(self.missing), "")

    def describe(self) -> str:
        """The layout for people: "v0 layout, the column set of ADK 1.15-1.17"."""
        if self.layout is Layout.V0:
            releases = self.releases
            if releases:
                return f"{self.layout.label}; the column set of ADK {releases}"
            return f"{self.layout.label}; events lacks {', '.join(self.missing)}"
        return self.layout.label

    @property
    def epoch_times(self) -> bool:
        """True when times are REAL epoch seconds (SqliteSessionService), else naive UTC datetimes."""
        return self.layout is Layout.SQLITE


# Columns the v0 `events` table gained over ADK 1.0-1.19, and the releases each set means.
V0_LATER_COLUMNS = (
    "custom_metadata",
    "usage_metadata",
    "citation_metadata",
    "input_transcription",
    "output_transcription",
)
V0_RELEASES = {
    frozenset(V0_LATER_COLUMNS): "1.0-1.14",
    frozenset(V0_LATER_COLUMNS[1:]): "1.15-1.17",
    frozenset(V0_LATER_COLUMNS[3:]): "1.18",
    frozenset(): "1.19-1.21",
}
# v0 columns every ADK release wrote: the rest are read when present.
V0_CORE_COLUMNS = frozenset(
    {"id", "app_name", "user_id", "session_id", "invocation_id", "author", "actions", "timestamp"}
)


def _key(name: str, primary: bool = True) -> Column[Any]:
    return Column(name, String(KEY_LEN), primary_key=primary, nullable=False)


def build_tables(layout: Layout, columns: frozenset[str] | None = None, *, prefix: str = "") -> Tables:
    """Core tables mirroring what ADK creates for `layout` (EMPTY means v1, what a new database gets).

    `columns` are the names the database's v0 `events` table really has: the table is built
    with only those, so reads and writes keep the column set of the ADK release that made it.
    `prefix` names every table, the foreign key's target and the index `<prefix><ADK's name>`:
    `session upgrade` builds the new tables beside the old ones under such names.
    """
    md = MetaData()
    p = prefix
    if layout is Layout.SQLITE:
        sessions = Table(
            "sessions",
            md,
            Column("app_name", Text, primary_key=True),
            Column("user_id", Text, primary_key=True),
            Column("id", Text, primary_key=True),
            Column("state", AdkJSON, nullable=False),
            Column("create_time", Float, nullable=False),
            Column("update_time", Float, nullable=False),
        )
        events = Table(
            "events",
            md,
            Column("id", Text, primary_key=True),
            Column("app_name", Text, primary_key=True),
            Column("user_id", Text, primary_key=True),
            Column("session_id", Text, primary_key=True),
            Column("invocation_id", Text, nullable=False),
            Column("timestamp", Float, nullable=False),
            Column("event_data", Text, nullable=False),
        )
        app_states = Table(
            "app_states",
            md,
            Column("app_name", Text, primary_key=True),
            Column("state", AdkJSON, nullable=False),
            Column("update_time", Float, nullable=False),
        )
        user_states = Table(
            "user_states",
            md,
            Column("app_name", Text, primary_key=True),
            Column("user_id", Text, primary_key=True),
            Column("state", AdkJSON, nullable=False),
            Column("update_time", Float, nullable=False),
        )
        return Tables(layout, md, sessions, events, app_states, user_states)

    internal = None
    if layout in (Layout.V1, Layout.EMPTY):
        internal = Table(
            f"{p}adk_internal_metadata",
            md,
            Column("key", String(KEY_LEN), primary_key=True),
            Column("value", String(VARCHAR_LEN), nullable=False),
        )
    sessions = Table(
        f"{p}sessions",
        md,
        _key("app_name"),
        _key("user_id"),
        _key("id"),
        Column("state", AdkJSON, nullable=False),
        Column("create_time", _stamp(), nullable=False),
        Column("update_time", _stamp(), nullable=False),
    )
    cols: list[Any] = [
        _key("id"),
        _key("app_name"),
        _key("user_id"),
        _key("session_id"),
        Column("invocation_id", String(VARCHAR_LEN), nullable=False),
    ]
    if layout is Layout.V0:
        cols += [
            Column("author", String(VARCHAR_LEN), nullable=False),
            Column("actions", _blob(), nullable=False),
            Column("long_running_tool_ids_json", Text, nullable=True),
            Column("branch", String(VARCHAR_LEN), nullable=True),
            Column("timestamp", _stamp(), nullable=False),
            Column("content", AdkJSON, nullable=True),
            Column("grounding_metadata", AdkJSON, nullable=True),
            Column("custom_metadata", AdkJSON, nullable=True),
            Column("usage_metadata", AdkJSON, nullable=True),
            Column("citation_metadata", AdkJSON, nullable=True),
            Column("partial", Boolean, nullable=True),
            Column("turn_complete", Boolean, nullable=True),
            Column("error_code", String(VARCHAR_LEN), nullable=True),
            Column("error_message", Text, nullable=True),
            Column("interrupted", Boolean, nullable=True),
            Column("input_transcription", AdkJSON, nullable=True),
            Column("output_transcription", AdkJSON, nullable=True),
        ]
    else:
        cols += [Column("timestamp", _stamp(), nullable=False), Column("event_data", AdkJSON, nullable=True)]
    missing: tuple[str, ...] = ()
    if layout is Layout.V0 and columns is not None:
        missing = tuple(c.name for c in cols if c.name not in columns and c.name not in V0_CORE_COLUMNS)
        cols = [c for c in cols if c.name not in missing]
    events = Table(
        f"{p}events",
        md,
        *cols,
        ForeignKeyConstraint(
            ["app_name", "user_id", "session_id"],
            [f"{p}sessions.app_name", f"{p}sessions.user_id", f"{p}sessions.id"],
            ondelete="CASCADE",
        ),
    )
    Index(
        f"{p}{EVENTS_INDEX}",
        events.c.app_name,
        events.c.user_id,
        events.c.session_id,
        events.c.timestamp.desc(),
        events.c.id.desc(),
    )
    app_states = Table(
        f"{p}app_states",
        md,
        _key("app_name"),
        Column("state", AdkJSON, nullable=False),
        Column("update_time", _stamp(), nullable=False),
    )
    user_states = Table(
        f"{p}user_states",
        md,
        _key("app_name"),
        _key("user_id"),
        Column("state", AdkJSON, nullable=False),
        Column("update_time", _stamp(), nullable=False),
    )
    return Tables(
        Layout.V1 if layout is Layout.EMPTY else layout,
        md,
        sessions,
        events,
        app_states,
        user_states,
        internal,
        missing,
    )


def inspect_layout(sync_conn: Any) -> tuple[Layout, frozenset[str] | None]:
    """The layout and, for v0, the columns its `events` table has (one inspection per open)."""
    layout, columns, _ = inspect_tables(sync_conn)
    return layout, columns


def inspect_tables(sync_conn: Any) -> tuple[Layout, frozenset[str] | None, frozenset[str]]:
    """`inspect_layout`, and the names of every table the database has (vmem's own among them)."""
    from sqlalchemy import inspect

    names = frozenset(inspect(sync_conn).get_table_names())
    layout = detect_layout(sync_conn, names)
    if layout is not Layout.V0:
        return layout, None, names
    return layout, frozenset(c["name"] for c in inspect(sync_conn).get_columns("events")), names


def detect_layout(sync_conn: Any, names: frozenset[str] | None = None) -> Layout:
    """Tell the layout of a connected database the way ADK does (run through `run_sync`);
    `names` are its tables, when already read."""
    from sqlalchemy import inspect, text

    inspector = inspect(sync_conn)
    if names is None:
        names = frozenset(inspector.get_table_names())
    if "adk_internal_metadata" in names:
        quoted = sync_conn.dialect.identifier_preparer.quote("key")
        row = sync_conn.execute(
            text(f"SELECT value FROM adk_internal_metadata WHERE {quoted} = :k"), {"k": SCHEMA_VERSION_KEY}
        ).fetchone()
        version = str(row[0]) if row else ""
        if version == LATEST_SCHEMA_VERSION:
            return Layout.V1
        if version == "0":
            return Layout.V0
        if not row and _unfinished_creation(sync_conn, names):
            return Layout.EMPTY
        raise ValueError(f"unknown ADK schema_version {version!r} in adk_internal_metadata")
    if "events" in names and "sessions" in names:
        cols = {c["name"]: c for c in inspector.get_columns("events")}
        if "actions" in cols and "event_data" not in cols:
            return Layout.V0
        if "event_data" in cols:
            if sync_conn.dialect.name == "sqlite" and "REAL" in str(cols["timestamp"]["type"]).upper():
                return Layout.SQLITE
            return Layout.V1
    if "sessions" in names:
        raise ValueError("a 'sessions' table exists but no ADK 'events' table: not an ADK session database")
    return Layout.EMPTY


def _unfinished_creation(sync_conn: Any, names: frozenset[str]) -> bool:
    """True when ADK's tables were being created and the schema_version row never came: the
    metadata table is there, without the row, and no ADK table holds a row. On MySQL/MariaDB
    each CREATE TABLE commits at once, so a creator stopped (or a second one looking) between the
    tables and the row sees exactly this; the next import finishes the creation."""
    from sqlalchemy import text

    for table in ("sessions", "events", "app_states", "user_states"):
        if table in names:
            quoted = sync_conn.dialect.identifier_preparer.quote(table)
            if sync_conn.execute(text(f"SELECT 1 FROM {quoted} LIMIT 1")).first() is not None:
                return False
    return True


# --- time conversions ------------------------------------------------------------------


def to_epoch(value: Any) -> float:
    """A stored time (naive UTC datetime, aware datetime, or epoch number) as epoch seconds."""
    if value is None:
        return 0.0
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str):
        value = datetime.fromisoformat(value)
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    return float(value.timestamp())


def stored_time(tables: Tables, epoch: float) -> Any:
    """Epoch seconds in the representation this layout's time columns hold."""
    return float(epoch) if tables.epoch_times else naive_utc(epoch)
