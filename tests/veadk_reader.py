"""VeADK 1.1.19's own LongTermMemory, searching: run with the python of a venv holding veadk-python
1.1.19 and its Redis extension (never vmem's test venv).

    python tests/veadk_reader.py '{"backend": "redis", "index": I, "app": A, "user": U, "queries": [...], "top_k": 1}'

Prints one JSON list per query: the texts of the MemoryEntry parts `search_memory` returned.
The Redis server and the embedding endpoint come from VeADK's own environment variables
(DATABASE_REDIS_*, MODEL_EMBEDDING_*).
"""

from __future__ import annotations

import asyncio
import json
import sys


async def main(request: dict) -> None:
    from veadk.memory.long_term_memory import LongTermMemory

    ltm = LongTermMemory(backend=request["backend"], index=request["index"], top_k=request.get("top_k", 1))
    for query in request["queries"]:
        found = await ltm.search_memory(app_name=request["app"], user_id=request["user"], query=query)
        texts = [p.text for m in found.memories for p in (m.content.parts or []) if p.text is not None]
        print(json.dumps(texts), flush=True)


if __name__ == "__main__":
    asyncio.run(main(json.loads(sys.argv[1])))
