"""The LongTermMemory core: local backend, user scoping, idempotency, model checks, conversion."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from veadk_mem.config import VmemSettings
from veadk_mem.embedding.hash import HashEmbedder
from veadk_mem.errors import BadInput, NotSupported
from veadk_mem.ltm.backends.local import LocalBackend, default_path
from veadk_mem.ltm.backends.memory import MemoryBackend, MemoryStore
from veadk_mem.ltm.base import Capability, MemoryRecord
from veadk_mem.ltm.convert import records_of_payload, searchable_text, to_memory_entries
from veadk_mem.ltm.facade import LongTermMemory
from veadk_mem.ltm.registry import load_backend, register_backend


def content(text: str, role: str = "user") -> str:
    """A memory string as VeADK's default policy saves it."""
    return json.dumps({"role": role, "parts": [{"text": text}]}, ensure_ascii=False)


def record(text: str, user: str = "u1", session: str = "s1") -> MemoryRecord:
    return MemoryRecord(
        text=content(text), user_id=user, app_name="app", session_id=session, event_id="e", author="user"
    )


@pytest.fixture
def ltm(tmp_path: Path) -> LongTermMemory:
    settings = VmemSettings()
    settings.long_term_memory.local_path = str(tmp_path / "ltm.db")
    settings.model.embedding.provider = "hash"
    return LongTermMemory.from_settings(settings)


async def test_default_path_is_under_xdg_data_home(isolated_env: Path) -> None:
    assert default_path().parts[-3:] == ("share", "vmem", "ltm.db")


async def test_save_then_search_from_a_fresh_process_view(ltm: LongTermMemory, tmp_path: Path) -> None:
    backend = ltm.backend_for("app")
    ids = await backend.save("u1", [record("I am allergic to peanuts"), record("I like jazz music")])
    assert len(ids) == 2
    from veadk_mem.ltm.backends import local

    local._MATRICES.clear()  # what a second `vmem` invocation sees: only the file
    local._CONNECTIONS.clear()
    again = LongTermMemory.from_settings(ltm.settings)
    hits = await again.search_memory(app_name="app", user_id="u1", query="peanuts allergic")
    assert hits[0]["content"] == {"role": "user", "parts": [{"text": "I am allergic to peanuts"}]}
    assert hits[0]["custom_metadata"]["score"] > hits[1]["custom_metadata"]["score"]
    origin = hits[0]["custom_metadata"]["origin"]
    assert origin["session_id"] == "s1" and origin["index"] == "app" and origin["backend"] == "local"


async def test_search_never_returns_another_users_memories(ltm: LongTermMemory) -> None:
    backend = ltm.backend_for("app")
    await backend.save("alice", [record("alice likes peanuts", user="alice")])
    await backend.save("bob", [record("bob likes peanuts", user="bob")])
    hits = await ltm.search_memory(app_name="app", user_id="bob", query="peanuts", top_k=10)
    assert [h["content"]["parts"][0]["text"] for h in hits] == ["bob likes peanuts"]
    assert await ltm.search_memory(app_name="app", user_id="carol", query="peanuts") == []


async def test_save_is_idempotent_per_user_and_index(ltm: LongTermMemory) -> None:
    backend = ltm.backend_for("app")
    assert len(await backend.save("u1", [record("same")])) == 1
    assert await backend.save("u1", [record("same")]) == []
    assert len(await backend.save("u2", [record("same", user="u2")])) == 1
    assert len(await ltm.backend_for("other").save("u1", [record("same")])) == 1


async def test_top_k_and_min_score(ltm: LongTermMemory) -> None:
    backend = ltm.backend_for("app")
    await backend.save("u1", [record(f"fact number {i} about topic {i}") for i in range(20)])
    assert len(await ltm.search_memory(app_name="app", user_id="u1", query="fact topic")) == 5
    assert len(await ltm.search_memory(app_name="app", user_id="u1", query="fact topic", top_k=7)) == 7
    strict = await ltm.search_memory(app_name="app", user_id="u1", query="fact number 3 about topic 3", min_score=0.9)
    assert [h["content"]["parts"][0]["text"] for h in strict] == ["fact number 3 about topic 3"]


async def test_exact_top_k_matches_brute_force(ltm: LongTermMemory) -> None:
    backend = ltm.backend_for("app")
    assert isinstance(backend, LocalBackend)
    await backend.save("u1", [record(f"memory {i} {i * 7 % 13} {i % 5}") for i in range(200)])
    query = backend.embedder.embed_one("memory 12 3")
    hits = backend.top_k("u1", query, 10)
    matrix = backend.matrix("u1")
    scores = matrix.vectors @ query
    expected = np.sort(scores)[::-1][:10]
    assert np.allclose([s for _, s in hits], expected)


async def test_a_model_or_dimension_mismatch_is_an_error(tmp_path: Path) -> None:
    settings = VmemSettings()
    settings.long_term_memory.local_path = str(tmp_path / "ltm.db")
    first = LongTermMemory.from_settings(settings, embedder=HashEmbedder(dim=384))
    await first.backend_for("app").save("u1", [record("x")])
    other = LongTermMemory.from_settings(settings, embedder=HashEmbedder(dim=128))
    with pytest.raises(BadInput, match=r"holds vectors of hash-v1-384 \(384-d\) but the embedder is hash-v1-128"):
        await other.search_memory(app_name="app", user_id="u1", query="x")
    with pytest.raises(BadInput, match="cannot be compared"):
        await other.backend_for("app").save("u1", [record("y")])


async def test_auto_reuses_the_model_an_index_was_built_with(tmp_path: Path) -> None:
    settings = VmemSettings()
    settings.long_term_memory.local_path = str(tmp_path / "ltm.db")
    first = LongTermMemory.from_settings(settings, embedder=HashEmbedder(dim=256))
    await first.backend_for("app").save("u1", [record("remember the milk")])
    notices: list[str] = []
    auto = LongTermMemory.from_settings(settings, notice=notices.append)
    hits = await auto.search_memory(app_name="app", user_id="u1", query="milk")
    assert len(hits) == 1 and notices == []


async def test_long_memories_are_chunked_and_score_as_their_best_chunk(ltm: LongTermMemory) -> None:
    backend = ltm.backend_for("app")
    emb = HashEmbedder()
    emb.max_chars = 60
    ltm._embedder = emb
    backend._embedder = emb
    long_text = "The weather was fine today. " * 5 + "I am allergic to peanuts."
    await backend.save("u1", [record(long_text), record("I like trains")])
    assert isinstance(backend, LocalBackend)
    assert backend.matrix("u1").owners is not None
    hits = await ltm.search_memory(app_name="app", user_id="u1", query="allergic to peanuts", top_k=2)
    assert hits[0]["content"]["parts"][0]["text"] == long_text  # the whole memory comes back


async def test_list_and_delete_by_id_session_and_all(ltm: LongTermMemory) -> None:
    backend = ltm.backend_for("app")
    await backend.save("u1", [record("a", session="s1"), record("b", session="s2"), record("c", session="s2")])
    await backend.save("u2", [record("a", user="u2")])
    listed = await ltm.list_memories(app_name="app", user_id="u1")
    assert len(listed) == 3
    assert len(await ltm.list_memories(app_name="app", user_id="u1", limit=2)) == 2
    by_session = await ltm.select(app_name="app", user_id="u1", session_id="s2")
    assert sorted(r.session_id for r in by_session) == ["s2", "s2"]
    assert await ltm.delete(app_name="app", user_id="u1", records=by_session) == 2
    one = await ltm.select(app_name="app", user_id="u1", ids=[listed[-1]["id"], "nope"])
    assert len(one) == 1
    everything = await ltm.select(app_name="app", user_id="u1", everything=True)
    assert await ltm.delete(app_name="app", user_id="u1", records=everything) == 1
    assert await ltm.list_memories(app_name="app", user_id="u1") == []
    assert len(await ltm.list_memories(app_name="app", user_id="u2")) == 1
    with pytest.raises(BadInput, match="exactly one"):
        await ltm.select(app_name="app", user_id="u1")


async def test_delete_by_id_never_touches_another_user(ltm: LongTermMemory) -> None:
    backend = ltm.backend_for("app")
    ids = await backend.save("u2", [record("secret", user="u2")])
    assert await backend.delete_memories("u1", ids) == 0
    assert len(await backend.list_memories("u2")) == 1


async def test_forget_plan_covers_every_index(ltm: LongTermMemory) -> None:
    await ltm.backend_for("app1").save("u1", [record("a")])
    await ltm.backend_for("app2").save("u1", [record("b")])
    await ltm.backend_for("app2").save("u2", [record("c", user="u2")])
    plan = await ltm.forget_plan(user_id="u1")
    assert {k: len(v) for k, v in plan.items()} == {"app1": 1, "app2": 1}
    plan = await ltm.forget_plan(user_id="u1", app_name="app2")
    assert list(plan) == ["app2"]


def test_index_falls_back_to_app_name_then_default_app() -> None:
    assert LongTermMemory(index="idx").index_for("app") == "idx"
    assert LongTermMemory().index_for("app") == "app"
    assert LongTermMemory(app_name="mine").index_for(None) == "mine"
    assert LongTermMemory().index_for(None) == "default_app"
    assert LongTermMemory(backend_config={"index": "cfg"}, index="idx").index_for("app") == "cfg"


def test_viking_mem_is_a_deprecated_alias() -> None:
    warnings: list[str] = []
    ltm = LongTermMemory(backend="viking_mem", warn=warnings.append)
    assert ltm.backend_name == "viking"
    assert warnings == ["long_term_memory.backend = 'viking_mem' is deprecated; use 'viking'"]


def test_unknown_and_unavailable_backends() -> None:
    with pytest.raises(BadInput, match="unknown long-term memory backend 'nope'"):
        load_backend("nope")
    from veadk_mem.ltm import registry

    register_backend("fake-unavailable", lambda *a, **k: (_ for _ in ()).throw(NotSupported("no")))
    try:
        assert callable(load_backend("fake-unavailable"))
    finally:
        registry._registered.pop("fake-unavailable", None)  # the configuration accepts every registered name


async def test_backends_that_cannot_list_or_profile_say_so() -> None:
    class SaveOnly(MemoryBackend):
        """A hosted store that can save and search (its payloads converted to records) and nothing else."""

        name = "saveonly"
        capabilities = frozenset({Capability.HASHES})

        async def search(self, user_id: str, query: str, top_k: int) -> list[MemoryRecord]:
            payload = {"memories": [{"memory": "likes tea", "score": 0.5}, "plain string"]}
            return records_of_payload(payload, user_id)

    ltm = LongTermMemory(backend=SaveOnly("i", store=MemoryStore()))
    hits = await ltm.search_memory(app_name="x", user_id="u", query="tea")
    assert [h["content"]["parts"][0]["text"] for h in hits] == ["likes tea", "plain string"]
    assert hits[0]["custom_metadata"]["score"] == 0.5
    with pytest.raises(NotSupported, match="cannot list"):
        await ltm.list_memories(app_name="x", user_id="u")
    with pytest.raises(NotSupported, match="no user profile"):
        await ltm.get_user_profile(app_name="x", user_id="u")
    with pytest.raises(NotSupported, match="cannot tell which indexes"):
        await ltm.forget_plan(user_id="u")


def test_local_index_names_are_checked(tmp_path: Path) -> None:
    with pytest.raises(BadInput, match="invalid local index name"):
        LocalBackend("bad\nname", embedder_factory=lambda m: HashEmbedder(), local_path=str(tmp_path / "x.db"))


@pytest.mark.parametrize(
    ("chunk", "texts", "role"),
    [
        (content("hello", role="model"), ["hello"], "model"),
        ("just a plain string", ["just a plain string"], "user"),
        ('{"memories": [{"text": "a"}, {"abstract": "b"}, "c"]}', ["a", "b", "c"], "user"),
        ({"summary": "sum", "uri": "viking://x", "score": 0.7, "category": "pref"}, ["sum"], "user"),
        ({"content": content("nested")}, ["nested"], "user"),
        ({"nothing": 1}, [], "user"),
        ("[1, 2", ["[1, 2"], "user"),
    ],
)
def test_chunks_become_memory_entries(chunk: object, texts: list[str], role: str) -> None:
    records = records_of_payload(chunk, "u")  # type: ignore[arg-type]
    entries = [e for r in records for e in to_memory_entries(r, backend="viking", index="idx")]
    assert [e["content"]["parts"][0]["text"] for e in entries] == texts
    for entry in entries:
        assert entry["content"]["role"] == role
        # ADK's MemoryEntry keys, and vmem's provenance beside them (ADK's model ignores it)
        assert set(entry) == {"id", "author", "timestamp", "content", "custom_metadata", "source"}
        assert entry["source"] is None  # a hosted service's memory: not recorded
        assert entry["custom_metadata"]["origin"]["backend"] == "viking"


def test_dict_chunk_metadata_is_kept() -> None:
    chunk = {"summary": "s", "uri": "u://1", "score": 0.25, "category": "c"}
    (record,) = records_of_payload(chunk, "u")
    (entry,) = to_memory_entries(record, backend="b", index="i")
    assert entry["custom_metadata"] == {
        "score": 0.25,
        "origin": {"backend": "b", "index": "i", "uri": "u://1", "score": 0.25, "category": "c"},
    }


def test_searchable_text_strips_the_content_scaffolding() -> None:
    assert searchable_text(content("I am vegetarian")) == "I am vegetarian"
    part = {"function_call": {"name": "get_weather", "args": {"city": "Paris"}}}
    call = json.dumps({"role": "model", "parts": [part]})
    assert searchable_text(call) == 'get_weather({"city": "Paris"})'
    assert searchable_text("plain") == "plain"


async def test_large_matrices_are_cached_on_disk_and_dropped_on_delete(
    ltm: LongTermMemory, monkeypatch: pytest.MonkeyPatch
) -> None:
    from veadk_mem.ltm.backends import local

    monkeypatch.setattr(local, "DISK_CACHE_MIN_ROWS", 2)
    backend = ltm.backend_for("app")
    assert isinstance(backend, LocalBackend)
    await backend.save("u1", [record("peanut allergy"), record("likes trains"), record("lives in Hangzhou")])
    first = await ltm.search_memory(app_name="app", user_id="u1", query="peanut", top_k=3)
    cache = Path(backend.path + ".cache")
    assert len(list(cache.glob("*.npy"))) == 2
    local._MATRICES.clear()  # a new process: the matrix comes from the memory-mapped cache
    assert isinstance(backend.matrix("u1").vectors, np.memmap)
    again = await ltm.search_memory(app_name="app", user_id="u1", query="peanut", top_k=3)
    assert [h["id"] for h in again] == [h["id"] for h in first]
    await backend.save("u1", [record("new fact")])  # a write invalidates it
    assert len(await ltm.search_memory(app_name="app", user_id="u1", query="fact", top_k=10)) == 4
    everything = await ltm.select(app_name="app", user_id="u1", everything=True)
    await ltm.delete(app_name="app", user_id="u1", records=everything)
    assert list(cache.glob("*")) == []


async def test_auto_serves_indexes_built_with_different_embedders(tmp_path: Path) -> None:
    settings = VmemSettings()
    settings.long_term_memory.local_path = str(tmp_path / "ltm.db")
    await (
        LongTermMemory.from_settings(settings, embedder=HashEmbedder(dim=256)).backend_for("a").save("u", [record("x")])
    )
    await (
        LongTermMemory.from_settings(settings, embedder=HashEmbedder(dim=128)).backend_for("b").save("u", [record("y")])
    )
    auto = LongTermMemory.from_settings(settings)
    assert len(await auto.search_memory(app_name="a", user_id="u", query="x")) == 1
    assert len(await auto.search_memory(app_name="b", user_id="u", query="y")) == 1


def test_count_sessions_for_the_progress_bar(tmp_path: Path) -> None:
    from veadk_mem.ltm.replay import count_sessions, expand_sources

    examples = Path(__file__).resolve().parents[1] / "docs" / "examples" / "sessions"
    assert count_sessions(expand_sources([str(examples)])) == 8
    jsonl = tmp_path / "x.jsonl"
    jsonl.write_text('{"id": "a"}\n\n{"kind": "app_state", "appName": "x", "state": {}}\n{"id": "b"}\n')
    assert count_sessions([str(jsonl)]) == 2
    assert count_sessions(["-"]) is None


def test_a_backend_from_an_entry_point_is_accepted_by_the_config_and_usable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A package declaring `[project.entry-points."veadk_mem.backends"]` adds a backend, as vmem adds its own."""
    from veadk_mem.config import load_settings
    from veadk_mem.ltm import registry

    site = tmp_path / "site"
    (site / "thirdstore").mkdir(parents=True)
    (site / "thirdstore" / "__init__.py").write_text(
        "from veadk_mem.ltm.base import LongTermMemoryBackend\n"
        "class ThirdBackend(LongTermMemoryBackend):\n"
        "    name = 'thirdstore'\n"
        "    target = 'third://here'\n"
        "    def __init__(self, index, **_):\n"
        "        self.index, self.held = index, []\n"
        "    def precheck_index_naming(self):\n"
        "        pass\n"
        "    async def save(self, user_id, memories, progress=None):\n"
        "        self.held.extend(memories)\n"
        "        return [m.content_hash for m in memories]\n"
        "    async def search(self, user_id, query, top_k):\n"
        "        return [m for m in self.held if m.user_id == user_id][:top_k]\n"
    )
    dist = site / "thirdstore-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: thirdstore\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text("[veadk_mem.backends]\nthirdstore = thirdstore:ThirdBackend\n")
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.setattr(registry, "_plugins", None)  # what a new process finds

    assert {"thirdstore", "local", "redis", "viking"} <= set(registry.backend_names())
    settings = load_settings(environ={"LONG_TERM_MEMORY_BACKEND": "thirdstore"}).settings
    ltm = LongTermMemory.from_settings(settings)
    backend = ltm.backend_for("app")
    assert type(backend).__name__ == "ThirdBackend"
    with pytest.raises(BadInput, match=r"expected .*'thirdstore'.*got 'fourthstore'"):
        load_settings(environ={"LONG_TERM_MEMORY_BACKEND": "fourthstore"})


def test_a_registered_backend_is_accepted_by_the_config() -> None:
    from veadk_mem.config import load_settings
    from veadk_mem.ltm import registry

    register_backend("runtime-store", LocalBackend)
    try:
        assert load_settings(
            environ={"LONG_TERM_MEMORY_BACKEND": "runtime-store"}
        ).settings.long_term_memory.backend == ("runtime-store")
    finally:
        registry._registered.pop("runtime-store", None)


async def test_progress_is_told_for_every_saved_memory_whatever_the_backend_tells() -> None:
    """`progress` is part of the save contract: a store saving in one piece tells nothing, the facade tells the rest."""

    told: list[int] = []
    ltm = LongTermMemory(backend=MemoryBackend("i", store=MemoryStore()))  # saves in one piece, tells nothing
    ids = await ltm.save_records("u1", [record("one"), record("two"), record("three")], "i", progress=told.append)
    assert len(ids) == 3 and sum(told) == 3
