"""The backend interface itself: declared capabilities, the in-memory backend, embedding off the loop, registries."""

from __future__ import annotations

import asyncio
import importlib
import threading
from pathlib import Path
from typing import Any

import pytest

from veadk_mem.config import VmemSettings
from veadk_mem.embedding.hash import HashEmbedder
from veadk_mem.errors import NotSupported
from veadk_mem.events import Event, Session
from veadk_mem.ltm.backends.memory import MemoryBackend, MemoryStore
from veadk_mem.ltm.base import Capability, LongTermMemoryBackend, MemoryRecord
from veadk_mem.ltm.facade import LongTermMemory
from veadk_mem.ltm.registry import BUILTIN, load_backend

# The methods a capability stands for: a backend declares it exactly when it implements them.
METHODS = {
    Capability.LIST: "list_memories",
    Capability.DELETE: "delete_memories",
    Capability.HASHES: "existing_hashes",
    Capability.INDEXES: "known_indexes",
    Capability.USERS: "scopes",
    Capability.PROFILE: "profile",
    Capability.EMBEDS: "embedder",
}


def _class(name: str) -> type[LongTermMemoryBackend]:
    module, _, attr = BUILTIN[name].partition(":")
    found: type[LongTermMemoryBackend] = getattr(importlib.import_module(module), attr)
    return found


@pytest.mark.parametrize("name", sorted(BUILTIN))
def test_every_backend_declares_what_it_implements(name: str) -> None:
    cls = _class(name)
    for capability, method in METHODS.items():
        implemented = getattr(cls, method) is not getattr(LongTermMemoryBackend, method)
        assert implemented == (capability in cls.capabilities), (name, capability)
    assert isinstance(cls.__dict__.get("target") or cls.target, property)


def test_the_memory_backend_is_registered_and_searches_by_terms() -> None:
    assert load_backend("memory") is MemoryBackend
    ltm = LongTermMemory(backend="memory", backend_config={"store": MemoryStore()}, index="app")
    records = [MemoryRecord(text=t, user_id="u") for t in ("I like green tea", "I live in Porto", "tea at five")]

    async def go() -> list[dict[str, Any]]:
        async with ltm:
            assert len(await ltm.save_records("u", records, "app")) == 3
            assert await ltm.save_records("u", records, "app") == []  # the same memories: none again
            return await ltm.search_memory(app_name="app", user_id="u", query="green tea")

    hits = asyncio.run(go())
    assert [h["content"]["parts"][0]["text"] for h in hits] == ["I like green tea", "tea at five"]


async def test_a_capability_not_declared_is_not_supported_even_when_a_method_exists() -> None:
    class NoDelete(MemoryBackend):
        capabilities = frozenset({Capability.LIST, Capability.HASHES})

    ltm = LongTermMemory(backend=NoDelete("i", store=MemoryStore()))
    await ltm.save_records("u", [MemoryRecord(text="x", user_id="u")], "i")
    found = await ltm.select(app_name=None, user_id="u", everything=True, index="i")
    with pytest.raises(NotSupported, match="cannot delete memories"):
        await ltm.delete(app_name=None, user_id="u", records=found, index="i")


class _Recording(HashEmbedder):
    """Notes the threads it embedded on (as a model would: not `inline`)."""

    inline = False

    def __init__(self) -> None:
        super().__init__(dim=64)
        self.threads: set[int] = set()

    def embed_batch(self, texts: list[str]) -> Any:
        self.threads.add(threading.get_ident())
        return super().embed_batch(texts)


def _session(*texts: str) -> Session:
    events = [
        Event(id=f"e{i}", author="user", content={"role": "user", "parts": [{"text": t}]}, timestamp=float(i))
        for i, t in enumerate(texts)
    ]
    return Session(id="s1", app_name="app", user_id="u", events=events)


def test_the_facade_embeds_once_off_the_event_loop(tmp_path: Path) -> None:
    """Saves and searches embed in a worker thread: the loop's thread never runs the model."""
    embedder = _Recording()
    ltm = LongTermMemory(backend_config={"local_path": str(tmp_path / "m.db")}, embedder=embedder, index="app")

    async def go() -> tuple[int, list[dict[str, Any]]]:
        async with ltm:
            loop_thread = threading.get_ident()
            report = await ltm.add_session_to_memory(_session("I like green tea", "I live in Porto"))
            hits = await ltm.search_memory(app_name="app", user_id="u", query="green tea", mode="vector")
            assert loop_thread not in embedder.threads
            return report.saved, hits

    saved, hits = asyncio.run(go())
    assert saved == 2 and embedder.threads
    assert hits[0]["content"]["parts"][0]["text"] == "I like green tea"


def test_an_inline_embedder_embeds_a_single_query_on_the_loop(tmp_path: Path) -> None:
    """The hash embedder's query costs less than a thread's hop: no worker thread for it."""
    embedder = _Recording()
    embedder.inline = True
    ltm = LongTermMemory(backend_config={"local_path": str(tmp_path / "m.db")}, embedder=embedder, index="app")

    async def go() -> set[int]:
        async with ltm:
            await ltm.add_session_to_memory(_session("I like green tea"))
            embedder.threads.clear()
            await ltm.search_memory(app_name="app", user_id="u", query="green tea", mode="vector")
            return {threading.get_ident()}

    assert embedder.threads == asyncio.run(go())


def test_a_dry_run_saves_into_memory_and_leaves_the_store_alone(tmp_path: Path) -> None:
    path = tmp_path / "m.db"
    ltm = LongTermMemory(backend_config={"local_path": str(path)}, embedder=HashEmbedder(dim=64), index="app")

    async def go() -> Any:
        async with ltm:
            return await ltm.add_session_to_memory(_session("a", "b", "a"), dry_run=True)

    report = asyncio.run(go())
    assert (report.memories, report.saved, report.duplicates) == (3, 2, 1)
    assert not path.exists()


def test_a_dry_run_counts_a_memory_two_sessions_share_once(tmp_path: Path) -> None:
    """As a real run would: the second session finds it saved by the first."""
    ltm = LongTermMemory(backend_config={"local_path": str(tmp_path / "m.db")}, embedder=HashEmbedder(dim=64))

    async def go() -> list[Any]:
        async with ltm:
            first = _session("I like tea", "I live in Porto")
            second = _session("I like tea", "I cycle to work").model_copy(update={"id": "s2"})
            return [await ltm.add_session_to_memory(s, dry_run=True) for s in (first, second)]

    reports = asyncio.run(go())
    assert [(r.saved, r.duplicates) for r in reports] == [(2, 0), (1, 1)]


def test_the_facade_is_an_async_context_manager_that_closes() -> None:
    closed: list[bool] = []

    class Closing(MemoryBackend):
        async def close(self) -> None:
            closed.append(True)

    ltm = LongTermMemory(backend="memory")
    ltm._backends["i"] = Closing("i", store=MemoryStore())

    async def go() -> None:
        async with ltm:
            raise RuntimeError("boom")

    with pytest.raises(RuntimeError):
        asyncio.run(go())
    assert closed == [True]


def test_embedders_come_from_the_registry_by_name() -> None:
    from veadk_mem.embedding import create_embedder, registry

    assert {"openai", "ark", "local", "hash"} <= set(registry.embedder_names())

    class Tiny(HashEmbedder):
        @classmethod
        def from_settings(cls, settings: Any, **options: Any) -> Tiny:
            return cls(dim=8)

    registry.register_embedder("tiny", Tiny)
    try:
        embedder = create_embedder(VmemSettings().model.embedding, "tiny")
        assert isinstance(embedder, Tiny) and embedder.dim == 8
    finally:
        registry._registered.pop("tiny", None)
    assert create_embedder(VmemSettings().model.embedding, "hash", hash_dim=32).dim == 32
