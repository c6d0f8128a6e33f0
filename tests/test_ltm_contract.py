"""The backend contract, once for every backend: each runs against its local server or protocol stand-in.

What every long-term-memory backend promises the facade (veadk_mem/ltm/base.py): a saved
session is found by its user and by no other, listed, exported and deleted by id (or the
delete is refused as not supported), a replay saves nothing twice, and `health` answers.
The hosted backends share one failure path (veadk_mem/failure.py): a 429 is retried
and the call then succeeds, a 5xx or 429 that persists is retried and then reported in
one line, any other 4xx is reported at once. The per-backend files keep what is particular
to one protocol (request shapes, credentials, the service's own error codes).
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from hosted_servers import ACCOUNT, AK, SK, TosContextServer, VikingMemoryServer
from mem0_server import Mem0Server
from openviking_server import OpenvikingServer

from veadk_mem.config import VmemSettings, load_settings
from veadk_mem.embedding.hash import HashEmbedder
from veadk_mem.errors import NotSupported, StoreError
from veadk_mem.events import parse_session
from veadk_mem.failure import one_line
from veadk_mem.ltm.base import BackendHealth, LongTermMemoryBackend, MemoryRecord
from veadk_mem.ltm.facade import LongTermMemory

HASH = HashEmbedder(dim=32)
FAST = (0.01, 0.01, 0.01)  # three retries, 10 ms apart
MEM0_KEY, OV_KEY, OV_USER = "m0-contract-key", "ov-contract-key", "alice"
ALICE = "I am allergic to peanuts and I live in Hangzhou."
BOB = "My favourite city is Lisbon and I cycle to work."


@dataclass
class Rig:
    """One backend wired to its server: the backend, and (hosted) how to script faults on its search."""

    backend: LongTermMemoryBackend
    fail: Callable[[int, int], None] | None = None  # status, times: the next searches answer so
    searches: Callable[[], int] | None = None  # search requests the server has seen
    deletes: bool = True


def _local(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest) -> Iterator[Rig]:
    settings = VmemSettings()
    settings.long_term_memory.local_path = str(tmp_path / "ltm.db")
    settings.model.embedding.provider = "hash"
    yield Rig(LongTermMemory.from_settings(settings).backend_for("contract"))


def _redis(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest) -> Iterator[Rig]:
    from veadk_mem.ltm.backends.redis import RedisBackend

    url = request.getfixturevalue("redis_stack")
    settings = load_settings(environ={"DATABASE_REDIS_URL": url, "LONG_TERM_MEMORY_BACKEND": "redis"}).settings
    index = f"vmemcontract{uuid.uuid4().hex[:10]}"
    yield Rig(RedisBackend(index, settings=settings, embedder_factory=lambda _model: HASH))


def _opensearch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest) -> Iterator[Rig]:
    import opensearch_server

    from veadk_mem.ltm.backends.opensearch import OpensearchBackend

    server = opensearch_server.start()
    environ = {
        "LONG_TERM_MEMORY_BACKEND": "opensearch",
        "DATABASE_OPENSEARCH_HOST": "127.0.0.1",
        "DATABASE_OPENSEARCH_PORT": str(server.port),
        "DATABASE_OPENSEARCH_USE_SSL": "false",
    }
    settings = load_settings(environ=environ).settings
    yield Rig(OpensearchBackend("contract", settings=settings, embedder_factory=lambda _model: HASH))
    server.stop()


def _viking(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest) -> Iterator[Rig]:
    from veadk_mem.ltm.backends.viking import VikingBackend

    server = VikingMemoryServer().start()
    monkeypatch.setenv("DATABASE_VIKINGMEM_BASE_URL", server.url)
    monkeypatch.setenv("VOLCENGINE_ACCESS_KEY", AK)
    monkeypatch.setenv("VOLCENGINE_SECRET_KEY", SK)
    monkeypatch.setattr(VikingBackend, "retry_delays", FAST)
    body = {429: {"code": 1000029, "message": "qps limit"}, 503: {"code": 1000028, "message": "busy"}}

    def fail(status: int, times: int) -> None:
        server.fail("/api/memory/search", status, body.get(status, {"code": 1000003, "message": "bad"}), times=times)

    yield Rig(
        VikingBackend("contract", settings=load_settings().settings),
        fail,
        lambda: len(server.calls("/api/memory/search")),
    )
    server.stop()


def _tos_context(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest) -> Iterator[Rig]:
    from veadk_mem.ltm.backends.tos_context import TosContextBackend

    server = TosContextServer().start()
    for name in ("NO_PROXY", "no_proxy"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HTTP_PROXY", server.url)
    monkeypatch.setenv("http_proxy", server.url)
    monkeypatch.setenv("DATABASE_TOS_CONTEXT_ACCOUNT_ID", ACCOUNT)
    monkeypatch.setenv("DATABASE_TOS_CONTEXT_CONTROL_ENDPOINT", "http://tos-control.test")
    monkeypatch.setenv("VOLCENGINE_ACCESS_KEY", AK)
    monkeypatch.setenv("VOLCENGINE_SECRET_KEY", SK)
    monkeypatch.setattr(TosContextBackend, "retry_delays", FAST)

    def fail(status: int, times: int) -> None:
        server.fail("/v1/memories/search", status, {"Code": f"E{status}", "Message": "scripted"}, times=times)

    yield Rig(
        TosContextBackend("vmem-contract", settings=load_settings().settings),
        fail,
        lambda: len(server.calls("/v1/memories/search")),
        deletes=False,  # the ContextBucket API has no delete of one memory
    )
    server.stop()


def _mem0(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest) -> Iterator[Rig]:
    from veadk_mem.ltm.backends.mem0 import Mem0Backend

    monkeypatch.setattr(Mem0Backend, "retry_delays", FAST)
    monkeypatch.setenv("DATABASE_MEM0_API_KEY", MEM0_KEY)
    path = "/v3/memories/search/"
    with Mem0Server(MEM0_KEY) as server:
        monkeypatch.setenv("DATABASE_MEM0_BASE_URL", server.url)
        yield Rig(
            Mem0Backend("default_app", settings=load_settings().settings),
            lambda status, times: server.fail(status, times, path, headers={"Retry-After": "0"}),
            lambda: len(server.requests("POST", path)),
        )


def _openviking(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest) -> Iterator[Rig]:
    from veadk_mem.ltm.backends import openviking

    monkeypatch.setattr(openviking.OpenvikingBackend, "retry_delays", FAST)
    monkeypatch.setattr(openviking.OpenvikingBackend, "poll_interval", 0.01)
    monkeypatch.setenv("DATABASE_OPENVIKING_API_KEY", OV_KEY)
    monkeypatch.setenv("DATABASE_OPENVIKING_USER_ID", OV_USER)
    monkeypatch.setenv("OPENVIKING_CONFIG_FILE", "/nonexistent")
    path = "/api/v1/search/find"
    with OpenvikingServer({OV_KEY: OV_USER}) as server:
        monkeypatch.setenv("DATABASE_OPENVIKING_URL", server.url)
        yield Rig(
            openviking.OpenvikingBackend("contract", settings=load_settings().settings),
            lambda status, times: server.fail(status, times, path),
            lambda: len(server.requests("POST", path)),
        )


RIGS: dict[str, Callable[..., Iterator[Rig]]] = {
    "local": _local,
    "redis": _redis,
    "opensearch": _opensearch,
    "viking": _viking,
    "tos_context": _tos_context,
    "mem0": _mem0,
    "openviking": _openviking,
}
HOSTED = ["viking", "tos_context", "mem0", "openviking"]
MARKS = {"redis": pytest.mark.redis}


def _params(names: list[str]) -> list[Any]:
    return [pytest.param(name, marks=[MARKS.get(name, pytest.mark.contract)], id=name) for name in names]


@pytest.fixture
def rig(request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Rig]:
    made = RIGS[request.param](tmp_path, monkeypatch, request)
    built = next(made)
    yield built  # each test's facade closes the backend
    next(made, None)


def session(user: str, text: str, session_id: str = "s1") -> Any:
    """A two-event ADK session of `user` whose first (user) event says `text`."""
    events = [("user", "user", text), ("agent", "model", "Noted.")]
    return parse_session(
        {
            "id": session_id,
            "appName": "contract",
            "userId": user,
            "state": {},
            "lastUpdateTime": 1764489600.0,
            "events": [
                {
                    "id": f"{session_id}-e{n}",
                    "invocationId": f"i{n}",
                    "author": author,
                    "timestamp": 1764489600.0 + n,
                    "content": {"role": role, "parts": [{"text": said}]},
                }
                for n, (author, role, said) in enumerate(events)
            ],
        },
        "contract",
    )


@asynccontextmanager
async def saved(rig: Rig) -> AsyncIterator[LongTermMemory]:
    """A facade over the rig's backend, with alice's and bob's sessions saved; closed after."""
    ltm = LongTermMemory(rig.backend, settings=VmemSettings(), embedder=HASH)
    try:
        for user, text in (("alice", ALICE), ("bob", BOB)):
            report = await ltm.add_session_to_memory(session(user, text))
            assert report.saved >= 1 and report.error is None
        yield ltm
    finally:
        await rig.backend.close()  # the facade closes only the backends it made
        await ltm.close()


def _texts(hits: list[dict[str, Any]]) -> str:
    return " ".join(str(h.get("content")) for h in hits)


EVERY = list(RIGS)


@pytest.mark.parametrize("rig", _params(EVERY), indirect=True)
async def test_a_saved_session_is_found_by_its_user_and_no_other(rig: Rig) -> None:
    async with saved(rig) as ltm:
        hits = await ltm.search_memory(app_name="contract", user_id="alice", query="allergic to peanuts", top_k=5)
        assert hits and "peanuts" in _texts(hits)
        theirs = await ltm.search_memory(app_name="contract", user_id="bob", query="allergic to peanuts", top_k=5)
        assert "peanuts" not in _texts(theirs)
        assert await ltm.search_memory(app_name="contract", user_id="carol", query="peanuts", top_k=5) == []


@pytest.mark.parametrize("rig", _params(EVERY), indirect=True)
async def test_a_replay_saves_nothing_twice(rig: Rig) -> None:
    async with saved(rig) as ltm:
        again = await ltm.add_session_to_memory(session("alice", ALICE))
        assert again.saved == 0 and again.error is None
        assert again.duplicates + len(again.ledger_skipped) >= 1


@pytest.mark.parametrize("rig", _params(EVERY), indirect=True)
async def test_list_export_and_delete_stay_with_the_user(rig: Rig) -> None:
    backend = rig.backend
    async with saved(rig):
        mine = await backend.list_memories("alice")
        theirs = await backend.list_memories("bob")
        assert mine and theirs and not {r.id for r in mine} & {r.id for r in theirs}
        assert all(isinstance(r, MemoryRecord) for r in mine)
        exported = [r for batch in [b async for b in backend.iter_memories("alice")] for r in batch]
        assert sorted(r.id for r in exported) == sorted(r.id for r in mine)
        if not rig.deletes:
            with pytest.raises(NotSupported):
                await backend.delete_memories("alice", [r.id for r in mine])
            return
        assert await backend.delete_memories("alice", [r.id for r in theirs]) == 0  # never another user's
        assert await backend.delete_memories("alice", [r.id for r in mine]) == len(mine)
        assert await backend.list_memories("alice") == []
        assert sorted(r.id for r in await backend.list_memories("bob")) == sorted(r.id for r in theirs)


@pytest.mark.parametrize("rig", _params(EVERY), indirect=True)
async def test_health_names_the_store_and_finds_no_problem(rig: Rig) -> None:
    async with saved(rig):
        report = await rig.backend.health("alice")
        assert isinstance(report, BackendHealth) and report.target and report.problems == []


# --- faults: one failure path for the hosted backends ---------------------------------------


FAULTS = [  # status, times the server answers it, what the search says, search requests sent
    pytest.param(429, 2, None, 3, id="429-retried-then-served"),
    pytest.param(429, 10, "is still rate limiting (HTTP 429", 4, id="429-retried-then-reported"),
    pytest.param(503, 10, "failed (HTTP 503", 4, id="5xx-retried-then-reported"),
    pytest.param(400, 1, "rejected the request (HTTP 400", 1, id="4xx-reported-at-once"),
]


@pytest.mark.parametrize(("status", "times", "said", "sent"), FAULTS)
@pytest.mark.parametrize("rig", _params(HOSTED), indirect=True)
async def test_faults_are_retried_or_reported_the_same_way(
    rig: Rig, status: int, times: int, said: str | None, sent: int
) -> None:
    assert rig.fail is not None and rig.searches is not None
    async with saved(rig) as ltm:
        before = rig.searches()
        rig.fail(status, times)
        if said is None:
            assert await ltm.search_memory(app_name="contract", user_id="alice", query="peanuts", top_k=5)
        else:
            with pytest.raises(StoreError) as info:
                await ltm.search_memory(app_name="contract", user_id="alice", query="peanuts", top_k=5)
            message = info.value.message
            assert said in message and info.value.exit_code == 1 and "\n" not in message
            assert sent == 1 or "after 3 retries while" in message
        assert rig.searches() - before == sent


def test_one_line_masks_a_secret_before_cutting_it() -> None:
    """A key the cut would have split (the old `_scrub`s cut first, then masked) never shows in part."""
    secret = "sk-" + "x" * 40
    text = "a" * 180 + secret + "\n  trace line 2"
    line = one_line(text, secrets=[secret])
    assert "sk-" not in line and "xxxx" not in line and "\n" not in line and len(line) <= 200
