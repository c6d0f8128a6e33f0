"""An import's checks against the target before anything is written: what it accepts, which
keys its collation takes for one, which stored sessions are newer than the file's."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from veadk_mem.sessions.bigline import BIG_LINE, SQLITE_BIG_LINE, big_line_bytes
from veadk_mem.sessions.layout import Layout, to_epoch
from veadk_mem.sessions.records import BATCH

if TYPE_CHECKING:
    from veadk_mem.sessions.engine import Database
    from veadk_mem.sessions.limits import Limits
    from veadk_mem.sessions.records import FileKey


def newer(stored: float, file_time: float) -> bool:
    """True when a stored update time is later than the file's (beyond the columns' microseconds)."""
    return stored > file_time + 1e-3


class Preflight:
    """The checks `importer.import_file` runs before the first write."""

    def __init__(self, db: Database) -> None:
        self.db = db

    def big_line_bytes(self) -> int:
        """The JSONL line length from which an import streams a session and writes it on its own.

        `$VMEM_BIG_LINE` bytes when set; else 2 MB on sqlite (some 6,000 events), where such a
        session is written in short transactions (`BigWrites._write_big_staged`) instead of its
        batch's one transaction, which holds the whole file's write lock; else 16 MB, where
        streaming only bounds the import's memory.
        """
        return big_line_bytes(SQLITE_BIG_LINE if self.db.dialect == "sqlite" else BIG_LINE)

    def offline_limits(self) -> Limits | None:
        """The limits of a sqlite file that does not exist yet (known without creating it), else None."""
        from veadk_mem.sessions.limits import Limits

        path = self.db.sqlite_path()
        if self.db.dialect == "sqlite" and path is not None and not Path(path).exists():
            return Limits("sqlite", Layout.V1)
        return None

    async def limits(self) -> Limits:
        """What this database accepts (column sizes, time range, MariaDB's max_allowed_packet)."""
        from veadk_mem.sessions.limits import Limits

        packet = 0
        if self.db.dialect == "mysql":
            from sqlalchemy import text

            with self.db.failures():
                async with self.db.engine.connect() as conn:
                    packet = int((await conn.execute(text("SELECT @@max_allowed_packet"))).scalar_one())
        return Limits(self.db.dialect, Layout.V1 if self.db.layout is Layout.EMPTY else self.db.layout, packet)

    async def key_collisions(
        self, keys: Sequence[FileKey], states: Sequence[tuple[str, str | None, str]] = ()
    ) -> list[str]:
        """Distinct session keys the database's collation takes for one (MySQL/MariaDB only).

        Under MariaDB's default utf8mb4_general_ci, "Order-1", "order-1" and "order-1 " are the
        same primary key: writing them would merge sessions. The keys are compared by the
        database itself, in a temporary table with the sessions table's own collations, with
        each other and with the stored sessions. App and user names get the same check
        (`name_collisions`): their state rows are keyed by them. Returns one description per
        collision.
        """
        if self.db.dialect != "mysql" or not (keys or states):
            return []
        names = await self.name_collisions(
            [(k.app_name, k.user_id, k.where) for k in keys] + [(a, u, w) for a, u, w in states]
        )
        if not keys:
            return names
        from sqlalchemy import text

        out: list[str] = []
        with self.db.failures():
            async with self.db.engine.connect() as conn:
                if self.db.layout is Layout.EMPTY:  # the columns ADK will create get the database default
                    await conn.execute(
                        text(
                            "CREATE TEMPORARY TABLE vmem_keys (app_name VARCHAR(128) NOT NULL, "
                            "user_id VARCHAR(128) NOT NULL, id VARCHAR(128) NOT NULL, n INT NOT NULL)"
                        )
                    )
                else:
                    await conn.execute(
                        text(
                            "CREATE TEMPORARY TABLE vmem_keys "
                            "SELECT app_name, user_id, id, 0 AS n FROM sessions LIMIT 0"
                        )
                    )
                try:
                    insert = text("INSERT INTO vmem_keys (app_name, user_id, id, n) VALUES (:a, :u, :i, :n)")
                    for i in range(0, len(keys), BATCH):
                        chunk = keys[i : i + BATCH]
                        await conn.execute(
                            insert,
                            [{"a": k.app_name, "u": k.user_id, "i": k.id, "n": i + j} for j, k in enumerate(chunk)],
                        )
                    bin3 = "CAST(app_name AS BINARY), CAST(user_id AS BINARY), CAST(id AS BINARY)"
                    rows = await conn.execute(
                        text(
                            f"SELECT GROUP_CONCAT(n ORDER BY n) FROM vmem_keys GROUP BY app_name, user_id, id "
                            f"HAVING COUNT(DISTINCT {bin3}) > 1"
                        )
                    )
                    for (group,) in rows:
                        seen: dict[str, FileKey] = {}
                        for n in str(group).split(","):
                            key = keys[int(n)]
                            seen.setdefault(repr(str(key)), key)
                        out.append(" = ".join(f"{k} ({seen[k].where})" for k in seen))
                    if self.db.layout is not Layout.EMPTY:
                        rows = await conn.execute(
                            text(
                                "SELECT k.n, s.app_name, s.user_id, s.id FROM vmem_keys k JOIN sessions s "
                                "ON s.app_name = k.app_name AND s.user_id = k.user_id AND s.id = k.id "
                                "WHERE CAST(s.app_name AS BINARY) <> CAST(k.app_name AS BINARY) "
                                "OR CAST(s.user_id AS BINARY) <> CAST(k.user_id AS BINARY) "
                                "OR CAST(s.id AS BINARY) <> CAST(k.id AS BINARY)"
                            )
                        )
                        for n, app, user, sid in rows:
                            key = keys[int(n)]
                            out.append(f"{str(key)!r} ({key.where}) = {f'{app}/{user}/{sid}'!r} in the database")
                finally:
                    await conn.execute(text("DROP TEMPORARY TABLE IF EXISTS vmem_keys"))
        return names + out

    async def name_collisions(self, names: Sequence[tuple[str, str | None, str]]) -> list[str]:
        """App names, and user ids within an app, that the state tables' collation takes for one (MySQL).

        `names` are (app, user or None for an app_state record, where). App state rows are
        keyed by the app name and user state rows by (app, user): "Shop" and "shop" would
        merge two apps' state (or fail half-way on a duplicate key). Compared by the database
        with each other and with the stored state rows, as `key_collisions` does for sessions.
        """

        first: dict[tuple[str, str | None], str] = {}
        for app, user, where in names:
            first.setdefault((app, user), where)
        entries = list(first.items())

        def name(i: int) -> str:
            (app, user), where = entries[i]
            return f"{app!r} ({where})" if user is None else f"{f'{app}/{user}'!r} ({where})"

        with self.db.failures():
            return await self._name_collisions(entries, name)

    async def _name_collisions(self, entries: list[tuple[tuple[str, str | None], str]], name: Any) -> list[str]:
        from sqlalchemy import text

        out: list[str] = []
        async with self.db.engine.connect() as conn:
            if self.db.layout is Layout.EMPTY:
                await conn.execute(
                    text(
                        "CREATE TEMPORARY TABLE vmem_names (app_name VARCHAR(128) NOT NULL, "
                        "user_id VARCHAR(128) NOT NULL, n INT NOT NULL, has_user INT NOT NULL)"
                    )
                )
            else:
                await conn.execute(
                    text(
                        "CREATE TEMPORARY TABLE vmem_names "
                        "SELECT app_name, user_id, 0 AS n, 0 AS has_user FROM user_states LIMIT 0"
                    )
                )
            try:
                insert = text("INSERT INTO vmem_names (app_name, user_id, n, has_user) VALUES (:a, :u, :n, :h)")
                rows = [
                    {"a": app, "u": user or "", "n": i, "h": int(user is not None)}
                    for i, ((app, user), _) in enumerate(entries)
                ]
                for i in range(0, len(rows), BATCH):
                    await conn.execute(insert, rows[i : i + BATCH])
                app_bin, user_bin = "CAST(app_name AS BINARY)", "CAST(user_id AS BINARY)"
                found = await conn.execute(
                    text(
                        "SELECT GROUP_CONCAT(n ORDER BY n) FROM vmem_names GROUP BY app_name "
                        f"HAVING COUNT(DISTINCT {app_bin}) > 1"
                    )
                )
                for (group,) in found:
                    apps: dict[str, int] = {}
                    for n in str(group).split(","):
                        apps.setdefault(entries[int(n)][0][0], int(n))
                    out.append("apps " + " = ".join(f"{a!r} ({entries[n][1]})" for a, n in apps.items()))
                found = await conn.execute(
                    text(
                        "SELECT GROUP_CONCAT(n ORDER BY n) FROM vmem_names WHERE has_user = 1 "
                        f"GROUP BY app_name, user_id HAVING COUNT(DISTINCT {app_bin}) = 1 "
                        f"AND COUNT(DISTINCT {user_bin}) > 1"
                    )
                )
                for (group,) in found:
                    out.append("users " + " = ".join(name(int(n)) for n in str(group).split(",")))
                if self.db.layout is not Layout.EMPTY:
                    stored = await conn.execute(
                        text(
                            "SELECT k.n, a.app_name FROM vmem_names k JOIN app_states a ON a.app_name = k.app_name "
                            "WHERE CAST(a.app_name AS BINARY) <> CAST(k.app_name AS BINARY)"
                        )
                    )
                    for n, app in stored:
                        out.append(f"app {entries[int(n)][0][0]!r} ({entries[int(n)][1]}) = {app!r} in the database")
                    stored = await conn.execute(
                        text(
                            "SELECT k.n, u.app_name, u.user_id FROM vmem_names k JOIN user_states u "
                            "ON u.app_name = k.app_name AND u.user_id = k.user_id WHERE k.has_user = 1 "
                            "AND CAST(u.app_name AS BINARY) = CAST(k.app_name AS BINARY) "
                            "AND CAST(u.user_id AS BINARY) <> CAST(k.user_id AS BINARY)"
                        )
                    )
                    for n, app, user in stored:
                        out.append(f"user {name(int(n))} = {f'{app}/{user}'!r} in the database")
            finally:
                await conn.execute(text("DROP TEMPORARY TABLE IF EXISTS vmem_names"))
        return list(dict.fromkeys(out))

    async def newer_sessions(self, keys: Sequence[FileKey]) -> list[str]:
        """The sessions of `keys` stored with an update time later than the file's."""
        if self.db.layout is Layout.EMPTY or not keys:
            return []
        from sqlalchemy import select

        s = self.db.tables.sessions.c
        wanted = {(k.app_name, k.user_id, k.id): k for k in keys}
        out: list[str] = []
        with self.db.failures():
            async with self.db.reader.connect() as conn:
                groups: dict[tuple[str, str], list[str]] = defaultdict(list)
                for k in keys:
                    groups[(k.app_name, k.user_id)].append(k.id)
                for (a, u), ids in groups.items():
                    for j in range(0, len(ids), BATCH):
                        rows = await conn.execute(
                            select(s.app_name, s.user_id, s.id, s.update_time).where(
                                s.app_name == a, s.user_id == u, s.id.in_(ids[j : j + BATCH])
                            )
                        )
                        for app, user, sid, stamp in rows:
                            key = wanted.get((app, user, sid))
                            if key is not None and newer(to_epoch(stamp), key.update_time):
                                out.append(f"{key} ({key.where})")
        return out
