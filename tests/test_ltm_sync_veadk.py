"""What `vmem ltm sync` saved is what VeADK's agents read (#44): VeADK's Redis layout through the
llama-index reader VeADK drives (.venv-llama), and VeADK 1.1.19's own LongTermMemory (a venv of
its own: `.venv-veadk`, or $VMEM_VEADK_VENV) searching the Redis store sync filled."""

from __future__ import annotations

import json
import os
import subprocess
import threading
import uuid
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import llama_venv
import pytest
from sync_helpers import APP, append, expected, stored, turns
from typer.testing import CliRunner

from veadk_mem.cli.app import app
from veadk_mem.embedding.hash import HashEmbedder
from veadk_mem.ltm.backends.redis import index_name

DIM = 64
HASH = HashEmbedder(dim=DIM)
ROOT = Path(__file__).resolve().parent.parent
READER = Path(__file__).resolve().parent / "veadk_reader.py"


def _veadk_python() -> Path:
    venv = Path(os.environ.get("VMEM_VEADK_VENV") or ROOT / ".venv-veadk")
    python = venv / "bin" / "python"
    if not python.exists():
        pytest.skip(
            f"*** VeADK 1.1.19's venv {venv} is missing: python3 -m venv {venv} && {venv}/bin/pip install "
            "veadk-python==1.1.19 llama-index-vector-stores-redis llama-index-embeddings-openai-like ***"
        )
    return python


@pytest.fixture
def embeddings() -> Iterator[str]:
    """An OpenAI-compatible /embeddings endpoint giving vmem's hash vectors: one embedder for both sides."""

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            inputs = body["input"] if isinstance(body["input"], list) else [body["input"]]
            vectors = HASH.embed([str(t) for t in inputs]).tolist()
            data = [{"object": "embedding", "index": i, "embedding": v} for i, v in enumerate(vectors)]
            out = json.dumps({"object": "list", "data": data, "model": body.get("model", ""), "usage": {}}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(out)))
            self.end_headers()
            self.wfile.write(out)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    finally:
        server.shutdown()
        server.server_close()


def _synced_into_redis(
    redis_stack: str, index: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, env: dict[str, str]
) -> tuple[str, dict[str, list[str]]]:
    for name, value in {
        "LONG_TERM_MEMORY_BACKEND": "redis",
        "LONG_TERM_MEMORY_INDEX": index,
        "DATABASE_REDIS_URL": redis_stack,
        **env,
    }.items():
        monkeypatch.setenv(name, value)
    url = f"sqlite+aiosqlite:///{tmp_path / 'sessions.db'}"
    append(url, "ann", "a1", turns("a1", 2))
    append(url, "ann", "a2", turns("a2", 1))
    append(url, "ben", "b1", turns("b1", 1))
    result = CliRunner().invoke(app, ["--json", "ltm", "sync", "--once", "--db-url", url])
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["totals"]["saved"] == 4
    want = expected(url)
    assert {u: sorted(c.elements()) for u, c in stored(sorted(want)).items()} == want  # vmem reads them back
    return url, want


def test_llama_index_reads_what_sync_saved_in_veadks_redis_layout(
    redis_stack: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    llama_venv.python()
    index = f"sync{uuid.uuid4().hex[:10]}"
    _, want = _synced_into_redis(redis_stack, index, tmp_path, monkeypatch, {"MODEL_EMBEDDING_PROVIDER": "hash"})
    vmems = HashEmbedder(dim=384)  # the hash provider's vectors, as sync saved them
    for user, memories in want.items():
        request = {"store": "redis", "url": redis_stack.split("?", 1)[0], "name": index_name(index, user), "dim": 384}
        for text in memories:
            found = llama_venv.run(
                {**request, "op": "search", "query": text, "top_k": 1}, lambda ts: vmems.embed(ts).tolist()
            )
            assert found == [text]


def test_veadks_own_long_term_memory_finds_what_sync_saved(
    redis_stack: str, embeddings: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    python = _veadk_python()
    index = f"sync{uuid.uuid4().hex[:10]}"
    model = {
        "MODEL_EMBEDDING_NAME": "test-embedding",
        "MODEL_EMBEDDING_DIM": str(DIM),
        "MODEL_EMBEDDING_API_BASE": embeddings,
        "MODEL_EMBEDDING_API_KEY": "test-key",
    }
    _, want = _synced_into_redis(
        redis_stack, index, tmp_path, monkeypatch, {"MODEL_EMBEDDING_PROVIDER": "openai", **model}
    )
    host, port = redis_stack.split("://", 1)[1].split("/", 1)[0].split("?", 1)[0].rsplit(":", 1)
    env = {
        "PATH": os.environ["PATH"],
        "HOME": os.environ["HOME"],
        "DATABASE_REDIS_HOST": host,
        "DATABASE_REDIS_PORT": port,
        **model,
    }
    for user, memories in want.items():
        request = {"backend": "redis", "index": index, "app": APP, "user": user, "queries": memories, "top_k": 1}
        done = subprocess.run(
            [str(python), str(READER), json.dumps(request)],
            capture_output=True,
            text=True,
            env=env,
            timeout=300,
            check=False,
        )
        assert done.returncode == 0, done.stderr[-2000:]
        answers = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("[")]
        assert len(answers) == len(memories)
        for text, found in zip(memories, answers, strict=True):
            assert found == [json.loads(text)["parts"][0]["text"]], (text, found)
