"""Drive tests/veadk_writer.py (VeADK 1.1.19's own LongTermMemory) in its own venv, and serve it embeddings.

The venv is `.venv-veadk/` at the repository root, or `$VMEM_VEADK_VENV`; `.ci/test` makes it
with veadk-python==1.1.19 and the libraries its long-term-memory backends import
(llama-index's Redis and OpenSearch stores, mem0ai 1.x). Its pins (google-adk, redis-py,
llama-index) must not reach the test venv. Without it the tests that need it skip with a loud
reason (under CI a skip fails).

VeADK embeds through an OpenAI-compatible endpoint (`MODEL_EMBEDDING_API_BASE`, llama-index's
OpenAILikeEmbedding for a model name that is not Ark's): `embedding_server` is one, on
127.0.0.1, answering with vmem's hash embedder, so VeADK and vmem (provider `openai`, the same
endpoint) make the same vectors.
"""

from __future__ import annotations

import json
import os
import subprocess
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from veadk_mem.embedding.hash import HashEmbedder

ROOT = Path(__file__).resolve().parent.parent
WRITER = Path(__file__).resolve().parent / "veadk_writer.py"
PACKAGES = (
    "veadk-python==1.1.19 redis llama-index-vector-stores-redis llama-index-vector-stores-opensearch "
    "llama-index-embeddings-openai-like opensearch-py 'mem0ai<2'"
)
EMBEDDING_MODEL, EMBEDDING_KEY, DIM = "vmem-test-embedding", "sk-embedding-test", 64


def venv() -> Path:
    return Path(os.environ.get("VMEM_VEADK_VENV") or ROOT / ".venv-veadk")


def python() -> Path:
    """The venv's interpreter; a loud skip when it is not there."""
    found = venv() / "bin" / "python"
    if not found.exists():
        pytest.skip(
            f"*** the VeADK 1.1.19 venv {venv()} is missing: python3 -m venv {venv()} && "
            f"{venv()}/bin/pip install {PACKAGES} (bash .ci/test makes it) ***"
        )
    return found


def run(request: dict[str, Any], env: dict[str, str], cwd: Path, timeout: float = 300) -> Any:
    """One request to a fresh writer under `env` (VeADK's configuration), in `cwd`; its result."""
    base = {k: v for k, v in os.environ.items() if not k.startswith(("DATABASE_", "MODEL_", "VOLCENGINE_"))}
    done = subprocess.run(
        [str(python()), str(WRITER)],
        input=json.dumps(request) + "\n",
        capture_output=True,
        text=True,
        env={**base, **env},
        cwd=str(cwd),
        timeout=timeout,
        check=False,
    )
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if not lines:
        raise AssertionError(f"veadk_writer.py gave no answer (rc {done.returncode}):\n{done.stderr[-3000:]}")
    answer = json.loads(lines[-1])
    if "error" in answer:
        raise AssertionError(f"VeADK failed:\n{answer['error']}\n{done.stderr[-2000:]}")
    return answer["result"]


def _handler(embedder: HashEmbedder) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            inputs = body["input"] if isinstance(body["input"], list) else [body["input"]]
            vectors = embedder.embed([str(t) for t in inputs]).tolist()
            data = [{"object": "embedding", "index": i, "embedding": v} for i, v in enumerate(vectors)]
            answer = {"object": "list", "data": data, "model": body.get("model", ""), "usage": {}}
            raw = json.dumps({**answer, "usage": {"prompt_tokens": 0, "total_tokens": 0}}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(raw)))
            self.end_headers()
            self.wfile.write(raw)

    return Handler


@contextmanager
def embedding_server() -> Iterator[str]:
    """An OpenAI-compatible embeddings endpoint answering with vmem's hash embedder; its base URL."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(HashEmbedder(dim=DIM)))
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    finally:
        server.shutdown()
        server.server_close()


def embedding_env(base: str) -> dict[str, str]:
    """The MODEL_EMBEDDING_* both VeADK and vmem read, naming the endpoint."""
    return {
        "MODEL_EMBEDDING_NAME": EMBEDDING_MODEL,
        "MODEL_EMBEDDING_DIM": str(DIM),
        "MODEL_EMBEDDING_API_BASE": base,
        "MODEL_EMBEDDING_API_KEY": EMBEDDING_KEY,
    }
