"""`ltm search --mode` on the opensearch backend, against the contract stand-in (tests/opensearch_server.py).

OpenSearch cannot run here: the stand-in checks the `match` request on VeADK's `content`
field and the fusion vmem does with its ranking, not OpenSearch's own BM25 scores.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from test_ltm_opensearch import _backend, _records, index, server  # noqa: F401  (fixtures)

from veadk_mem.ltm.base import MemoryRecord
from veadk_mem.ltm.facade import LongTermMemory

pytestmark = pytest.mark.contract

TEXTS = [
    "My sister Lena lives in Porto and works as a dentist.",
    "I drive a blue Subaru Outback.",
    "The quarterly report is due on March 14.",
    "我住在北京海淀区，离公司很近。",
    "I run every morning before work.",
]
MEMORIES = [json.dumps({"role": "user", "parts": [{"text": t}]}, ensure_ascii=False) for t in TEXTS]


def text_of(record: Any) -> str:
    return str(json.loads(record.text)["parts"][0]["text"])


async def test_modes_on_opensearch(server: Any, index: str) -> None:  # noqa: F811
    backend = _backend(server.port, index)
    ltm = LongTermMemory(backend=backend)
    try:
        await backend.save("alice", _records("alice", MEMORIES))
        today = [r for r in await backend.search("alice", "where does Lena live", 3) if isinstance(r, MemoryRecord)]
        for mode in ("vector", None):  # vector is the default here: exactly the knn search VeADK runs
            entries = await ltm.search_memory(
                app_name=None, user_id="alice", query="where does Lena live", top_k=3, mode=mode
            )
            assert [e["id"] for e in entries] == [r.id for r in today]
            assert "score_kind" not in entries[0]["custom_metadata"]
        keyword = await backend.search_by("alice", "Subaru", 5, "keyword")
        assert [text_of(r) for r in keyword] == [TEXTS[1]]
        assert keyword[0].metadata["score_kind"] == "bm25"  # type: ignore[union-attr]
        assert [text_of(r) for r in await backend.search_by("alice", "北京", 5, "keyword")] == [TEXTS[3]]
        hybrid = await backend.search_by("alice", "quarterly report", 5, "hybrid")
        assert text_of(hybrid[0]) == TEXTS[2] and len(hybrid) == 5
        assert hybrid[0].metadata["score_kind"] == "fused"  # type: ignore[union-attr]
        assert hybrid[0].metadata["keyword_score"] > 0  # type: ignore[union-attr]
    finally:
        await backend.close()
