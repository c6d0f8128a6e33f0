"""Run by VeADK 1.1.19 in its own venv (.venv-veadk): VeADK's own LongTermMemory saving a session.

The erasure tests (tests/test_erasure_veadk.py) need memories exactly as a VeADK agent saves
them, with no vmem in the path: VeADK's `LongTermMemory(backend=...)` filters the session's
events through its real auto-save policy and hands the strings to its own backend (Redis and
OpenSearch through llama-index, Mem0 through mem0ai 1.x, VikingDB through its SDK), configured
from the environment as an agent's is (DATABASE_*, MODEL_EMBEDDING_*). Nothing here imports vmem.

Protocol: one JSON request on stdin, one JSON answer on stdout.
  {"op": "save", "backend": B, "index": I, "session": ADK session JSON, "policy": P|null}
      -> {"result": the number of events handed to VeADK}
  {"op": "search", "backend": B, "index": I, "app_name": A, "user_id": U, "query": Q, "top_k": K}
      -> {"result": [the texts of VeADK's search_memory answer]}
  an error -> {"error": traceback}
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import traceback
from typing import Any

PROTOCOL_OUT = os.fdopen(os.dup(sys.stdout.fileno()), "w", encoding="utf-8")
sys.stdout = sys.stderr  # VeADK and its libraries print: the protocol keeps the real stdout


def memory(request: dict[str, Any]) -> Any:
    from veadk.memory.long_term_memory import LongTermMemory

    return LongTermMemory(backend=request["backend"], index=request["index"])


async def save(request: dict[str, Any]) -> int:
    from google.adk.sessions import Session

    session = Session.model_validate(request["session"])
    await memory(request).add_session_to_memory(session, auto_save_memory_policy=request.get("policy"))
    return len(session.events)


async def search(request: dict[str, Any]) -> list[str]:
    ltm = memory(request)
    answer = await ltm.search_memory(app_name=request["app_name"], user_id=request["user_id"], query=request["query"])
    texts = []
    for entry in answer.memories:
        texts.extend(part.text or "" for part in (entry.content.parts or []))
    return texts


def main() -> None:
    request = json.loads(sys.stdin.readline())
    try:
        result = asyncio.run(save(request) if request["op"] == "save" else search(request))
        PROTOCOL_OUT.write(json.dumps({"result": result}) + "\n")
    except Exception:  # the test shows VeADK's traceback
        PROTOCOL_OUT.write(json.dumps({"error": traceback.format_exc()}) + "\n")
    PROTOCOL_OUT.flush()


if __name__ == "__main__":
    main()
