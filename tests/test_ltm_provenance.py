"""Provenance on save (#42 item 1): what vmem records of a memory's source, per backend, and how it reads back.

Local: columns, and a store made before them migrated so its rows stay readable (by this vmem
and by an older one, which names its columns). Redis: the node metadata and flat hash fields,
with VeADK's own llama-index reader finding the same documents as without them (in
test_ltm_redis.py's venv; skipped loudly without it). Export and import carry the source.
"""

from __future__ import annotations

import json
import sqlite3
import uuid
from pathlib import Path
from typing import Any

import pytest

from veadk_mem import __version__
from veadk_mem.config import VmemSettings
from veadk_mem.events import parse_session
from veadk_mem.ltm.facade import LongTermMemory
from veadk_mem.ltm.provenance import Provenance, from_fields
from veadk_mem.ltm.transfer import ExportScope, export_lines, import_records, open_export

T0 = 1764489600.0


def session(user: str = "u1", session_id: str = "s1", texts: tuple[str, ...] = ("I am allergic to peanuts",)) -> Any:
    """An ADK session of `user`: one user event per text (ids e0, e1 ...), then an agent reply."""
    events = [
        {
            "id": f"e{n}",
            "invocationId": f"inv-{n}",
            "author": "user",
            "timestamp": T0 + n,
            "content": {"role": "user", "parts": [{"text": text}]},
        }
        for n, text in enumerate(texts)
    ]
    events.append(
        {
            "id": "reply",
            "invocationId": "inv-r",
            "author": "agent",
            "timestamp": T0 + 99,
            "content": {"role": "model", "parts": [{"text": "Noted."}]},
        }
    )
    body = {"id": session_id, "appName": "app", "userId": user, "state": {}, "lastUpdateTime": T0, "events": events}
    return parse_session(body, "test")


def facade(path: Path) -> LongTermMemory:
    settings = VmemSettings()
    settings.long_term_memory.local_path = str(path)
    settings.model.embedding.provider = "hash"
    return LongTermMemory.from_settings(settings)


async def test_a_saved_memory_carries_its_source(tmp_path: Path) -> None:
    async with facade(tmp_path / "ltm.db") as ltm:
        report = await ltm.add_session_to_memory(session(), ltm.resolve_policy("default"))
        assert report.saved == 1
        [entry] = await ltm.list_memories(app_name="app", user_id="u1")
    source = entry["source"]
    assert source["saved_at"] is not None and abs(source["saved_at"] - entry_epoch(entry)) < 5
    assert {k: v for k, v in source.items() if k != "saved_at"} == {
        "app_name": "app",
        "user_id": "u1",
        "session_id": "s1",
        "event_ids": ["e0"],  # the agent's reply is dropped by the default preset
        "author": "user",
        "event_time": T0,
        "policy": "default",
        "vmem_version": __version__,
    }
    assert set(entry) == {"id", "author", "timestamp", "content", "custom_metadata", "source"}  # ADK's keys kept


def entry_epoch(entry: dict[str, Any]) -> float:
    from veadk_mem.ltm.convert import epoch_of

    value = epoch_of(entry["timestamp"])
    assert value is not None
    return value


async def test_a_string_said_twice_is_one_memory_from_both_events(tmp_path: Path) -> None:
    async with facade(tmp_path / "ltm.db") as ltm:
        twice = session(texts=("call me Ana", "something else", "call me Ana"))
        report = await ltm.add_session_to_memory(twice, ltm.resolve_policy("all"))
        listed = await ltm.list_memories(app_name="app", user_id="u1")
    assert report.saved == 3  # Ana once, the other text, the agent's reply (preset all)
    by_events = sorted(e["source"]["event_ids"] for e in listed)
    assert by_events == [["e0", "e2"], ["e1"], ["reply"]]
    assert {e["source"]["policy"] for e in listed} == {"all"}


async def test_a_named_policy_is_recorded_by_its_name(tmp_path: Path) -> None:
    settings = VmemSettings.model_validate({"policy": {"default": "default", "strict": {"preset": "default"}}})
    settings.long_term_memory.local_path = str(tmp_path / "ltm.db")
    settings.model.embedding.provider = "hash"
    async with LongTermMemory.from_settings(settings) as ltm:
        await ltm.add_session_to_memory(session(), ltm.resolve_policy("strict"))
        [entry] = await ltm.list_memories(app_name="app", user_id="u1")
    assert entry["source"]["policy"] == "strict"


def _old_store(path: Path) -> None:
    """A local store as vmem wrote it before provenance: no provenance columns, one row."""
    conn = sqlite3.connect(path)
    conn.executescript(
        """
        CREATE TABLE ltm_indexes (name TEXT PRIMARY KEY, model TEXT NOT NULL, dim INTEGER NOT NULL,
            created_at REAL NOT NULL, generation INTEGER NOT NULL DEFAULT 0);
        CREATE TABLE memories (id TEXT PRIMARY KEY, index_name TEXT NOT NULL, user_id TEXT NOT NULL,
            app_name TEXT NOT NULL DEFAULT '', session_id TEXT NOT NULL DEFAULT '',
            event_id TEXT NOT NULL DEFAULT '', author TEXT NOT NULL DEFAULT '', text TEXT NOT NULL,
            content_hash TEXT NOT NULL, model TEXT NOT NULL, dim INTEGER NOT NULL,
            chunks INTEGER NOT NULL DEFAULT 1, created_at REAL NOT NULL, vector BLOB NOT NULL,
            UNIQUE (index_name, user_id, content_hash));
        CREATE TABLE ltm_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
        """
    )
    conn.close()


async def test_an_older_store_is_migrated_and_stays_readable(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    _old_store(path)
    async with facade(path) as ltm:  # an older vmem's save, then ours, into the same file
        await ltm.add_session_to_memory(session(session_id="new"), ltm.resolve_policy("default"))
    conn = sqlite3.connect(path)
    columns = [r[1] for r in conn.execute("PRAGMA table_info(memories)")]
    assert columns[-5:] == ["event_ids", "event_time", "policy", "saved_at", "vmem_version"]
    # what an older vmem does (it names its columns): insert a row, read rows back
    conn.execute(
        "INSERT INTO memories (id, index_name, user_id, app_name, session_id, event_id, author, text, "
        "content_hash, model, dim, chunks, created_at, vector) SELECT 'old1', index_name, user_id, app_name, "
        "'olds', 'olde', author, 'x' || text, 'h' || content_hash, model, dim, chunks, created_at, vector "
        "FROM memories"
    )
    conn.commit()
    old_columns = "id, user_id, app_name, session_id, event_id, author, text, content_hash, created_at, model"
    assert len(conn.execute(f"SELECT {old_columns} FROM memories").fetchall()) == 2
    conn.close()
    async with facade(path) as ltm:
        listed = {e["id"]: e["source"] for e in await ltm.list_memories(app_name="app", user_id="u1")}
    old = listed.pop("old1")
    assert old is not None and old["session_id"] == "olds" and old["event_ids"] == ["olde"]
    assert old["policy"] == "" and old["vmem_version"] == ""  # not known for what an older vmem saved
    [new] = listed.values()
    assert new["session_id"] == "new" and new["policy"] == "default"


async def test_a_memory_without_provenance_says_not_recorded(tmp_path: Path) -> None:
    from veadk_mem.cli.ltm import _source_label
    from veadk_mem.ltm.base import MemoryRecord

    async with facade(tmp_path / "ltm.db") as ltm:  # as an import of what a VeADK agent saved
        await ltm.backend_for(index="app").save("u1", [MemoryRecord(text="agent saved this", user_id="u1")])
        [entry] = await ltm.list_memories(app_name="app", user_id="u1")
    assert entry["source"] is None
    assert _source_label(entry["source"]) == "not recorded"
    recorded = Provenance("app", "u1", "s1", ["e0", "e1"], "user", T0, "default", T0).to_json()
    assert _source_label(recorded) == "default: s1/e0 +1"


async def test_export_and_import_keep_the_source(tmp_path: Path) -> None:
    async with facade(tmp_path / "a.db") as source:
        await source.add_session_to_memory(session(), source.resolve_policy("default"))
        lines = [line async for line in export_lines(source, ExportScope(user_id="u1", index="app"))]
    [line] = [line for line in lines if line.get("kind") == "memory"]
    assert line["source"]["session_id"] == "s1" and line["source"]["event_ids"] == ["e0"]
    dump = tmp_path / "dump.jsonl"
    dump.write_text("".join(json.dumps(x) + "\n" for x in lines))
    async with facade(tmp_path / "b.db") as target:
        file = open_export(str(dump))
        try:
            await import_records(target, file.records())
        finally:
            file.close()
        [entry] = await target.list_memories(app_name="app", user_id="u1")
    assert entry["source"] == line["source"]  # saved-at too: the original save, not the import


def test_bad_source_in_an_import_names_the_line(tmp_path: Path) -> None:
    from veadk_mem.errors import BadInput
    from veadk_mem.ltm.transfer import parse_record

    with pytest.raises(BadInput, match=r"dump.jsonl:2: field 'source' must be an object"):
        parse_record({"kind": "memory", "text": "t", "user_id": "u", "source": "s1"}, "dump.jsonl", 2)


def test_fields_round_trip_and_tolerate_older_layouts() -> None:
    full = Provenance("app", "u", "s", ["e1", "e,2"], "user", T0, "strict", T0 + 1)
    flat = full.fields()
    assert all(isinstance(v, (str, float)) for v in flat.values())  # llama-index flat metadata, Redis hash
    assert from_fields(flat) == full
    as_redis = {k: v if isinstance(v, str) else repr(v) for k, v in flat.items()}  # what a hash read gives
    assert from_fields(as_redis) == full
    older = from_fields({"vmem": 1, "app_name": "app", "session_id": "s", "event_id": "e1", "author": "user"})
    assert older is not None and older.event_ids == ["e1"] and older.vmem_version == ""
    assert from_fields({"vmem": 1, "content_hash": "ab"}) is None
    assert from_fields(None) is None


# --- Redis: flat hash fields, and VeADK's reader finds the same documents -------------------


@pytest.mark.redis
async def test_redis_keeps_the_source_and_veadk_reads_the_same(redis_stack: str) -> None:
    import llama_venv
    import redis
    from test_ltm_redis import HASH, _backend, _veadk_search

    from veadk_mem.ltm.backends.redis import index_name
    from veadk_mem.ltm.base import MemoryRecord

    llama_venv.python()
    index = f"provenance{uuid.uuid4().hex[:10]}"
    texts = [
        '{"role": "user", "parts": [{"text": "I am allergic to peanuts"}]}',
        '{"role": "user", "parts": [{"text": "my favourite city is Lisbon"}]}',
        '{"role": "user", "parts": [{"text": "I run every morning before work"}]}',
    ]
    backend = _backend(redis_stack, index, HASH)
    try:
        with_source = [
            MemoryRecord(
                text=t,
                user_id="withsrc",
                app_name="app",
                session_id="s1",
                event_id=f"e{n}",
                author="user",
                source=Provenance("app", "withsrc", "s1", [f"e{n}"], "user", T0 + n, "default", T0 + 10),
            )
            for n, t in enumerate(texts)
        ]
        await backend.save("withsrc", with_source)
        await backend.save("nosrc", [MemoryRecord(text=t, user_id="nosrc") for t in texts])
        listed = {r.text: r.source for r in await backend.list_memories("withsrc")}
        assert listed[texts[1]] == with_source[1].source
        assert all(r.source is None for r in await backend.list_memories("nosrc"))
    finally:
        await backend.close()
    raw = redis.Redis.from_url(redis_stack, protocol=2)
    try:
        fields = raw.hgetall(raw.keys(f"{index_name(index, 'withsrc')}_*")[0])
    finally:
        raw.close()
    assert fields[b"session_id"] == b"s1" and fields[b"policy"] == b"default"
    assert fields[b"vmem_version"] == __version__.encode() and b"saved_at" in fields
    for query in ("morning run before work", "peanuts", "Lisbon city"):
        with_found = _veadk_search(redis_stack, index, "withsrc", query, 3)
        without = _veadk_search(redis_stack, index, "nosrc", query, 3)
        # the same documents, the same best (a tie below it may fall either way: the node ids differ)
        assert sorted(with_found) == sorted(without) and len(with_found) == 3
        assert with_found[0] == without[0]
