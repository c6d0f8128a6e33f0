# ruff: noqa: F811  (the fixtures imported from test_ltm_redis are parameters here)
"""`ltm search --mode` on a real Redis 8 + RediSearch: keyword and hybrid over VeADK's `text` field.

`--mode vector` must stay exactly what VeADK's agent retrieves (and what vmem's search
returned before modes existed); keyword and hybrid use RediSearch's own full-text search
on the TEXT field VeADK's index declares, without changing the layout.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest
from test_ltm_redis import HASH, _backend, _records, _settings, _veadk_search, llama, plain_redis, stack  # noqa: F401
from typer.testing import CliRunner

from veadk_mem.cli.app import app
from veadk_mem.errors import NotSupported
from veadk_mem.ltm.base import MemoryRecord
from veadk_mem.ltm.facade import LongTermMemory

pytestmark = pytest.mark.redis

TEXTS = [
    "My sister Lena lives in Porto and works as a dentist.",
    "I drive a blue Subaru Outback.",
    "The quarterly report is due on March 14.",
    "我住在北京海淀区，离公司很近。",
    "下周三我要去上海出差三天。",
    "I run every morning before work.",
]
MEMORIES = [json.dumps({"role": "user", "parts": [{"text": t}]}, ensure_ascii=False) for t in TEXTS]


@pytest.fixture
def index() -> str:
    return f"vmemhyb{uuid.uuid4().hex[:10]}"


def text_of(record: Any) -> str:
    return str(json.loads(record.text)["parts"][0]["text"])


async def test_vector_mode_is_todays_search_and_the_default(stack: str, index: str) -> None:
    backend = _backend(stack, index)
    ltm = LongTermMemory(backend=backend, settings=_settings(stack))
    try:
        await backend.save("alice", _records("alice", MEMORIES))
        # Every memory is returned (k = all), ordered by (score, id): RediSearch orders equal
        # scores as it likes from one call to the next, which is no difference between modes.
        k = len(MEMORIES)
        for query in ("where does Lena live", "car", "北京", "report deadline"):
            today = [r for r in await backend.search("alice", query, k) if isinstance(r, MemoryRecord)]
            expected = sorted((-round(r.score or 0, 6), r.id) for r in today)
            for mode in ("vector", None):  # None: the default, which is vector on redis
                entries = await ltm.search_memory(app_name=None, user_id="alice", query=query, top_k=k, mode=mode)
                assert sorted((-e["custom_metadata"]["score"], e["id"]) for e in entries) == expected
                scores = [e["custom_metadata"]["score"] for e in entries]
                assert scores == sorted(scores, reverse=True)  # best first, as today
                assert "score_kind" not in entries[0]["custom_metadata"]  # the agent's own cosine, as before
    finally:
        await backend.close()


async def test_vector_mode_equals_veadks_retriever(redis_stack: str, index: str, llama: None) -> None:
    backend = _backend(redis_stack, index)
    ltm = LongTermMemory(backend=backend, settings=_settings(redis_stack))
    try:
        await backend.save("bob", _records("bob", MEMORIES))
        for query in ("morning run", "Lena the dentist in Porto"):  # queries without ties among the top 2
            entries = await ltm.search_memory(app_name=None, user_id="bob", query=query, top_k=2, mode="vector")
            veadk = _veadk_search(redis_stack, index, "bob", query, 2)
            assert [e["content"] for e in entries] == [json.loads(t) for t in veadk]
    finally:
        await backend.close()


async def test_keyword_and_hybrid_use_redisearch_full_text(stack: str, index: str) -> None:
    backend = _backend(stack, index)
    try:
        await backend.save("carol", _records("carol", MEMORIES))
        await backend.save("carol2", _records("carol2", [MEMORIES[1]]))  # a user whose id extends carol's
        keyword = await backend.search_by("carol", "Subaru", 5, "keyword")
        assert [text_of(r) for r in keyword] == [TEXTS[1]]
        first = keyword[0]
        assert isinstance(first, MemoryRecord) and first.metadata["score_kind"] == "bm25" and (first.score or 0) > 0
        assert [text_of(r) for r in await backend.search_by("carol", "dentists in Porto", 5, "keyword")] == [TEXTS[0]]
        assert [text_of(r) for r in await backend.search_by("carol", "北京", 5, "keyword")] == [TEXTS[3]]
        assert [text_of(r) for r in await backend.search_by("carol", "上海出差", 5, "keyword")] == [TEXTS[4]]
        assert await backend.search_by("carol", "zebra", 5, "keyword") == []
        hybrid = await backend.search_by("carol", "quarterly report March", 6, "hybrid")
        assert text_of(hybrid[0]) == TEXTS[2] and len(hybrid) == 6
        meta = hybrid[0].metadata  # type: ignore[union-attr]
        assert meta["score_kind"] == "fused" and meta["keyword_score"] > 0 and meta["vector_score"] is not None
        assert sum(1 for r in hybrid if r.metadata["keyword_score"] is None) == 5  # type: ignore[union-attr]
        assert await backend.search_by("nobody", "Subaru", 5, "hybrid") == []
    finally:
        await backend.close()


def test_cli_modes_on_redis(stack: str, index: str, tmp_path: Any) -> None:
    runner = CliRunner()
    env = {
        "LONG_TERM_MEMORY_BACKEND": "redis",
        "LONG_TERM_MEMORY_INDEX": index,
        "DATABASE_REDIS_URL": stack,
        "MODEL_EMBEDDING_PROVIDER": "hash",
    }
    path = tmp_path / "s.json"
    events = [
        {"id": f"e{i}", "author": "user", "content": {"role": "user", "parts": [{"text": t}]}}
        for i, t in enumerate(TEXTS)
    ]
    path.write_text(json.dumps({"id": "s1", "appName": "shop", "userId": "dan", "events": events}))
    assert runner.invoke(app, ["ltm", "save", str(path)], env=env).exit_code == 0
    result = runner.invoke(app, ["--json", "ltm", "search", "Subaru", "-u", "dan", "--mode", "hybrid"], env=env)
    assert result.exit_code == 0, result.stderr
    found = json.loads(result.stdout)
    assert found[0]["content"]["parts"][0]["text"] == TEXTS[1] and found[0]["custom_metadata"]["score_kind"] == "fused"
    queries = tmp_path / "q.txt"
    queries.write_text("Subaru\n北京\n", encoding="utf-8")
    result = runner.invoke(app, ["ltm", "search", "--queries", str(queries), "-u", "dan", "-m", "keyword"], env=env)
    assert result.exit_code == 0, result.stderr
    lines = [json.loads(line) for line in result.stdout.splitlines()]
    assert [line["results"][0]["content"]["parts"][0]["text"] for line in lines] == [TEXTS[1], TEXTS[3]]


async def test_keyword_modes_without_the_search_module_say_so(plain_redis: str, redis_prefix: str) -> None:
    backend = _backend(plain_redis, redis_prefix, HASH)
    try:
        await backend.save("lee", _records("lee", MEMORIES))
        with pytest.raises(NotSupported, match="no search module"):
            await backend.search_by("lee", "Subaru", 3, "hybrid")
        assert len(await backend.search_by("lee", "Subaru", 3, "vector")) == 3  # the exact scan, as before
    finally:
        await backend.close()
