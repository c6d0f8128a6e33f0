"""Erasure of memories VeADK 1.1.19 saved itself (#42 item 3), through its own backends.

The real google-adk writes two sessions of a user into a session database; VeADK's own
`LongTermMemory` (tests/veadk_writer.py, in .venv-veadk) saves both through its real
auto-save policy into Redis (RediSearch), OpenSearch (tests/opensearch_server.py), Mem0
(tests/mem0_server.py) and VikingDB memory (tests/hosted_servers.py), as an agent does: no
session id, no hash, no provenance of vmem's. Then `vmem session delete --with-memories` must
find every memory of one session (by content hash; VikingDB by the session id the service
keeps), delete them, leave the other session's, and verify; VeADK's own search must no longer
return them.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import veadk_venv
from google.adk.sessions import DatabaseSessionService
from test_erasure import APP, adk_sessions, adk_write, cli

pytestmark = pytest.mark.contract  # local stand-in servers and a VeADK subprocess: not the fast tier

USER = "user_77"
GONE = ["I am allergic to shellfish", "my passport number ends in 4411"]
STAYS = ["I prefer window seats"]
MEM0_KEY = "m0-test-key"


def adk_session_json(url: str, sid: str) -> dict[str, Any]:
    """The session as ADK reads it back, in the JSON VeADK's ADK validates."""

    async def go() -> dict[str, Any]:
        service = DatabaseSessionService(url)
        try:
            session = await service.get_session(app_name=APP, user_id=USER, session_id=sid)
            assert session is not None
            return session.model_dump(mode="json", by_alias=True, exclude_none=True)
        finally:
            await service.close()

    return asyncio.run(go())


@pytest.fixture(scope="module")
def veadk() -> None:
    veadk_venv.python()


@pytest.fixture
def embeddings() -> Iterator[str]:
    with veadk_venv.embedding_server() as base:
        yield base


@pytest.fixture
def index() -> str:
    return f"erasure{uuid.uuid4().hex[:10]}"


def _redis(request: pytest.FixtureRequest) -> Iterator[tuple[dict[str, str], dict[str, str]]]:
    url = str(request.getfixturevalue("redis_stack"))
    port = url.rsplit(":", 1)[1].split("/")[0]
    yield (
        {"DATABASE_REDIS_HOST": "127.0.0.1", "DATABASE_REDIS_PORT": port, "DATABASE_REDIS_DB": "0"},
        {"DATABASE_REDIS_URL": url},
    )


def _opensearch(request: pytest.FixtureRequest) -> Iterator[tuple[dict[str, str], dict[str, str]]]:
    import opensearch_server

    server = opensearch_server.start(auth=("admin", "Secret-123"))
    env = {
        "DATABASE_OPENSEARCH_HOST": "127.0.0.1",
        "DATABASE_OPENSEARCH_PORT": str(server.port),
        "DATABASE_OPENSEARCH_USERNAME": "admin",
        "DATABASE_OPENSEARCH_PASSWORD": "Secret-123",
        "DATABASE_OPENSEARCH_USE_SSL": "false",
    }
    try:
        yield env, env
    finally:
        server.stop()


def _mem0(request: pytest.FixtureRequest) -> Iterator[tuple[dict[str, str], dict[str, str]]]:
    from mem0_server import Mem0Server

    with Mem0Server(MEM0_KEY) as server:
        env = {"DATABASE_MEM0_BASE_URL": server.url, "DATABASE_MEM0_API_KEY": MEM0_KEY}
        yield env, env


def _viking(request: pytest.FixtureRequest) -> Iterator[tuple[dict[str, str], dict[str, str]]]:
    from hosted_servers import AK, SK, VikingMemoryServer

    server = VikingMemoryServer().start()
    env = {"DATABASE_VIKINGMEM_BASE_URL": server.url, "VOLCENGINE_ACCESS_KEY": AK, "VOLCENGINE_SECRET_KEY": SK}
    try:
        yield env, env
    finally:
        server.stop()


STORES = {"redis": _redis, "opensearch": _opensearch, "mem0": _mem0, "viking": _viking}


@pytest.fixture(params=sorted(STORES))
def store(request: pytest.FixtureRequest) -> Iterator[tuple[str, dict[str, str], dict[str, str]]]:
    """(backend, VeADK's environment, vmem's environment) of a running store of that backend."""
    name = str(request.param)
    for veadk_env, vmem_env in STORES[name](request):
        yield name, veadk_env, vmem_env


def test_vmem_erases_what_veadk_saved(
    veadk: None,
    store: tuple[str, dict[str, str], dict[str, str]],
    embeddings: str,
    index: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    backend, veadk_env, vmem_env = store
    db = f"sqlite+aiosqlite:///{tmp_path / 'sessions.db'}"
    adk_write(db, {(USER, "gone"): GONE, (USER, "stays"): STAYS})
    embedding = veadk_venv.embedding_env(embeddings)
    request = {"op": "save", "backend": backend, "index": index, "policy": None}
    for sid, texts in (("gone", GONE), ("stays", STAYS)):
        session = adk_session_json(db, sid)
        handed = veadk_venv.run({**request, "session": session}, {**veadk_env, **embedding}, tmp_path)
        assert handed == 2 * len(texts)  # a user turn and a reply each: VeADK's default policy keeps the user's

    for key, value in {
        **vmem_env,
        **embedding,
        "LONG_TERM_MEMORY_BACKEND": backend,
        "LONG_TERM_MEMORY_INDEX": index,
        "MODEL_EMBEDDING_PROVIDER": "openai",
    }.items():
        monkeypatch.setenv(key, value)
    code, out, err = cli("ltm", "list", "--user", USER, "--json")
    assert code == 0, err
    listed = json.loads(out)
    assert listed and all(entry["source"] is None for entry in listed)  # VeADK recorded no source
    events = [e for e in listed if "sys_profile_v1" not in json.dumps(e, ensure_ascii=False)]
    assert len(events) == len(GONE) + len(STAYS)  # one memory per user turn, the replies dropped

    code, out, err = cli(
        "session", "delete", APP, USER, "gone", "--with-memories", "--db-url", db, "--dry-run", "--json"
    )
    assert code == 0, err
    plan = json.loads(out)
    expected = "session id" if backend == "viking" else "content hash"
    assert plan["memories"] and {m["matched_by"] for m in plan["memories"]} == {expected}

    code, out, err = cli("session", "delete", APP, USER, "gone", "--with-memories", "--db-url", db, "--yes", "--json")
    assert code == 0, err
    receipt = json.loads(out)
    assert receipt["deleted"]["sessions"] == 1 and receipt["deleted"]["memories"] == len(plan["memories"])
    assert receipt["verification"]["clean"] is True and receipt["verification"]["left"] == []
    if backend != "viking":
        assert sorted(m["text"] for m in receipt["memories"]) == sorted(GONE)
    assert adk_sessions(db, USER) == ["stays"]

    kept = {m["id"] for m in receipt["kept"]}
    if backend == "viking":  # the profile the service derives from both sessions: kept, and said so
        assert len(receipt["kept"]) == 1 and "profile" in receipt["kept"][0]["kept"]
    else:
        assert receipt["kept"] == []

    code, out, err = cli("ltm", "list", "--user", USER, "--json")
    assert code == 0, err
    entries = [e for e in json.loads(out) if e["id"] not in kept]
    left = " ".join(json.dumps(e["content"], ensure_ascii=False) for e in entries)
    assert not any(text in left for text in GONE)
    assert all(text in left for text in STAYS)  # the other session's memories are untouched

    search = {"op": "search", "backend": backend, "index": index, "app_name": APP, "user_id": USER, "top_k": 10}
    for text in GONE:  # VeADK's own retrieval no longer finds them (but in the kept profile)
        found = veadk_venv.run({**search, "query": text}, {**veadk_env, **embedding}, tmp_path)
        assert not any(text in hit for hit in found if "sys_profile_v1" not in hit), (text, found)
