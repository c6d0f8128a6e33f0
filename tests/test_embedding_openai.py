"""The openai embedder against a local HTTP server speaking the OpenAI embeddings protocol.

The real `openai` client talks to 127.0.0.1: a contract test of batching, the 401
message, retries on 429 and 5xx, and the configured-key fallback.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from veadk_mem.config import load_settings
from veadk_mem.embedding import create_embedder
from veadk_mem.embedding.openai import OpenAIEmbedder
from veadk_mem.errors import BadInput, StoreError

pytestmark = pytest.mark.contract

KEY = "sk-test-secret-0123456789"
DIM = 8


@dataclass
class Script:
    """What the fake endpoint does: failures to return first, and a log of requests."""

    failures: list[int] = field(default_factory=list)
    requests: list[dict[str, Any]] = field(default_factory=list)


def _vector(text: str) -> list[float]:
    digest = hashlib.sha256(text.encode()).digest()
    return [b / 255 for b in digest[:DIM]]


def _handler(script: Script) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

        def _send(self, status: int, body: dict[str, Any]) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            script.requests.append({"path": self.path, "auth": self.headers.get("Authorization"), **body})
            if self.headers.get("Authorization") != f"Bearer {KEY}":
                self._send(401, {"error": {"message": "Incorrect API key provided", "type": "invalid_request_error"}})
                return
            if script.failures:
                status = script.failures.pop(0)
                self._send(status, {"error": {"message": f"scripted {status}", "type": "server_error"}})
                return
            inputs = body["input"]
            data = [{"object": "embedding", "index": i, "embedding": _vector(t)} for i, t in enumerate(inputs)]
            data.reverse()  # the client must order by index, not by position
            self._send(200, {"object": "list", "data": data, "model": body["model"], "usage": {}})

    return Handler


@pytest.fixture
def endpoint() -> Iterator[tuple[str, Script]]:
    script = Script()
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(script))
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1", script
    finally:
        server.shutdown()
        server.server_close()


def _embedder(base: str, key: str = KEY, batch_size: int = 64) -> OpenAIEmbedder:
    return OpenAIEmbedder(
        name="test-embedding", dim=DIM, api_base=base, api_key=key, batch_size=batch_size, backoff=0.0, timeout=5
    )


def test_thousand_memories_at_batch_64_take_16_calls(endpoint: tuple[str, Script]) -> None:
    base, script = endpoint
    emb = _embedder(base)
    texts = [f"memory {i}" for i in range(1000)]
    out = emb.embed(texts)
    assert len(script.requests) == 16 == emb.calls
    assert [len(r["input"]) for r in script.requests] == [64] * 15 + [40]
    assert script.requests[0]["path"] == "/v1/embeddings"
    assert script.requests[0]["model"] == "test-embedding"
    import numpy as np

    expected = np.asarray(_vector("memory 999"), dtype=np.float32)
    assert np.allclose(out[999], expected / np.linalg.norm(expected), atol=1e-6)


def test_401_is_one_clear_message_without_the_key(endpoint: tuple[str, Script]) -> None:
    base, script = endpoint
    with pytest.raises(StoreError) as info:
        _embedder(base, key="sk-wrong-key").embed(["x"])
    assert "rejected the API key (401 Unauthorized)" in info.value.message
    assert "MODEL_EMBEDDING_API_KEY" in (info.value.hint or "")
    assert "sk-wrong-key" not in info.value.message + (info.value.hint or "")
    assert len(script.requests) == 1  # never retried


@pytest.mark.parametrize("status", [429, 500, 502, 503])
def test_transient_statuses_are_retried(endpoint: tuple[str, Script], status: int) -> None:
    base, script = endpoint
    script.failures = [status, status]
    assert _embedder(base).embed(["a", "b"]).shape == (2, DIM)
    assert len(script.requests) == 3


def test_persistent_failure_gives_up_with_the_status(endpoint: tuple[str, Script]) -> None:
    base, script = endpoint
    script.failures = [503] * 10
    emb = _embedder(base)
    emb.retries = 2
    with pytest.raises(StoreError, match="after 3 attempts: 503"):
        emb.embed(["a"])


def test_unreachable_endpoint_is_a_store_error() -> None:
    emb = _embedder("http://127.0.0.1:9/v1")
    emb.retries = 1
    with pytest.raises(StoreError, match=r"cannot reach http://127\.0\.0\.1:9/v1"):
        emb.embed(["a"])


def test_wrong_dimension_names_the_setting(endpoint: tuple[str, Script]) -> None:
    base, _ = endpoint
    emb = _embedder(base)
    emb.dim = 2560
    with pytest.raises(StoreError) as info:
        emb.embed(["a"])
    assert "MODEL_EMBEDDING_DIM" in (info.value.hint or "")


def test_settings_fall_back_to_the_agent_key(endpoint: tuple[str, Script]) -> None:
    base, script = endpoint
    env = {"MODEL_AGENT_API_KEY": KEY, "MODEL_EMBEDDING_API_BASE": base, "MODEL_EMBEDDING_DIM": str(DIM)}
    settings = load_settings(environ=env).settings
    emb = create_embedder(settings.model.embedding)
    assert isinstance(emb, OpenAIEmbedder)
    emb.embed(["a"])
    assert script.requests[0]["auth"] == f"Bearer {KEY}"


def test_no_key_is_bad_input() -> None:
    with pytest.raises(BadInput, match="no embedding API key"):
        OpenAIEmbedder(name="m", dim=4, api_base="http://127.0.0.1:9/v1", api_key="")


def test_cli_save_with_a_bad_key_stops_early_and_never_prints_it(
    endpoint: tuple[str, Script], monkeypatch: pytest.MonkeyPatch
) -> None:
    from pathlib import Path

    from typer.testing import CliRunner

    from veadk_mem.cli.app import app

    base, script = endpoint
    monkeypatch.setenv("MODEL_EMBEDDING_API_BASE", base)
    monkeypatch.setenv("MODEL_EMBEDDING_API_KEY", "sk-leaked-if-printed")
    monkeypatch.setenv("MODEL_EMBEDDING_DIM", str(DIM))
    examples = Path(__file__).resolve().parents[1] / "docs" / "examples" / "sessions"
    result = CliRunner().invoke(app, ["ltm", "save", str(examples)])
    assert result.exit_code == 1
    assert "rejected the API key (401 Unauthorized)" in result.stderr
    assert "stopped: the last 3 sessions failed the same way" in result.stderr
    assert "sk-leaked-if-printed" not in result.stdout + result.stderr
    assert len(script.requests) == 3
