"""The openai and ark embedders against a local HTTP server speaking their protocols.

The real `openai` client talks to 127.0.0.1: a contract test of batching, the 401
message, the client's retries on 429 and 5xx, the configured-key fallback, Ark's
multimodal endpoint (one text per request) and what a misbehaving endpoint gets: an
echoed key, HTML instead of JSON, NaN in a vector.
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
    """What the fake endpoint does: failures to return first, a canned answer, and a log of requests."""

    failures: list[int] = field(default_factory=list)
    requests: list[dict[str, Any]] = field(default_factory=list)
    raw: tuple[int, str, bytes] | None = None  # (status, content type, body) answered instead
    vector: list[float] | None = None  # answered for every input instead of the real vector


def _vector(text: str) -> list[float]:
    digest = hashlib.sha256(text.encode()).digest()
    return [b / 255 for b in digest[:DIM]]


def _handler(script: Script) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

        def _send(self, status: int, body: dict[str, Any], content_type: str = "application/json") -> None:
            data = json.dumps(body).encode()
            self._send_raw(status, content_type, data)

        def _send_raw(self, status: int, content_type: str, data: bytes) -> None:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(data)))
            self.send_header("retry-after-ms", "1")  # the client's retries, without the wait
            self.end_headers()
            self.wfile.write(data)

        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            script.requests.append({"path": self.path, "auth": self.headers.get("Authorization"), **body})
            if self.headers.get("Authorization") != f"Bearer {KEY}":
                # Some endpoints echo the key they were given: it must never reach the user.
                given = str(self.headers.get("Authorization", "")).removeprefix("Bearer ")
                message = f"Incorrect API key provided: {given}"
                self._send(401, {"error": {"message": message, "type": "invalid_request_error"}})
                return
            if script.failures:
                status = script.failures.pop(0)
                message = f"scripted {status} for key {KEY}"
                self._send(status, {"error": {"message": message, "type": "server_error"}})
                return
            if script.raw is not None:
                self._send_raw(*script.raw)
                return
            if self.path.endswith("/embeddings/multimodal"):
                (item,) = body["input"]  # Ark: one input, one vector
                assert item["type"] == "text"
                vector = script.vector or _vector(item["text"])
                embedding = {"object": "embedding", "embedding": vector}
                self._send(200, {"object": "list", "data": embedding, "model": body["model"], "usage": {}})
                return
            inputs = body["input"]
            data = [
                {"object": "embedding", "index": i, "embedding": script.vector or _vector(t)}
                for i, t in enumerate(inputs)
            ]
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
    emb = OpenAIEmbedder(name="test-embedding", dim=DIM, api_base=base, api_key=key, batch_size=batch_size, timeout=5)
    emb.retry_delays = (0.01,) * 4  # the policy's four retries, briefly
    return emb


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
    assert "refused the API key (HTTP 401) while embedding" in info.value.message
    assert "MODEL_EMBEDDING_API_KEY" in info.value.message
    assert "sk-wrong-key" not in info.value.message + (info.value.hint or "")
    assert len(script.requests) == 1  # never retried
    assert script.requests[0]["auth"] == "Bearer sk-wrong-key"  # the endpoint did see (and echo) it


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
    emb.retry_delays = (0.01, 0.01)
    with pytest.raises(StoreError, match=r"failed \(HTTP 503\) after 2 retries while embedding") as info:
        emb.embed(["a"])
    assert KEY not in info.value.message and "scripted 503 for key ****" in info.value.message
    assert len(script.requests) == 3  # the one retry policy's (the openai client's own are off)


def test_unreachable_endpoint_is_a_store_error() -> None:
    emb = _embedder("http://127.0.0.1:9/v1")
    emb.retry_delays = (0.01,)
    with pytest.raises(StoreError, match=r"cannot reach embedding endpoint http://127\.0\.0\.1:9/v1"):
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
    assert "refused the API key (HTTP 401)" in result.stderr
    assert "stopped: the last 3 sessions failed the same way" in result.stderr
    assert "sk-leaked-if-printed" not in result.stdout + result.stderr
    # one request embedding every session's memories together, then each session's own
    # (so a failure is reported on the session it belongs to) until the breaker stops it
    assert len(script.requests) == 1 + 3


# --- Ark's multimodal endpoint, and endpoints that misbehave -------------------------------


def test_auto_sends_veadks_default_model_to_arks_multimodal_endpoint(endpoint: tuple[str, Script]) -> None:
    from veadk_mem.embedding.ark import ArkEmbedder

    base, script = endpoint
    env = {"MODEL_EMBEDDING_API_KEY": KEY, "MODEL_EMBEDDING_API_BASE": base, "MODEL_EMBEDDING_DIM": str(DIM)}
    settings = load_settings(environ=env).settings
    assert settings.model.embedding.name == "doubao-embedding-vision-250615"  # VeADK 1.1.19's default
    emb = create_embedder(settings.model.embedding)
    assert isinstance(emb, ArkEmbedder)
    out = emb.embed(["first memory", "second memory"])
    assert [r["path"] for r in script.requests] == ["/v1/embeddings/multimodal"] * 2  # one text per request
    assert script.requests[0]["input"] == [{"type": "text", "text": "first memory"}]
    assert script.requests[0]["model"] == "doubao-embedding-vision-250615"
    import numpy as np

    expected = np.asarray(_vector("second memory"), dtype=np.float32)
    assert np.allclose(out[1], expected / np.linalg.norm(expected), atol=1e-6)


def test_other_model_names_go_to_the_openai_endpoint(endpoint: tuple[str, Script]) -> None:
    base, script = endpoint
    env = {
        "MODEL_EMBEDDING_API_KEY": KEY,
        "MODEL_EMBEDDING_API_BASE": base,
        "MODEL_EMBEDDING_DIM": str(DIM),
        "MODEL_EMBEDDING_NAME": "doubao-embedding-text-240715",
    }
    emb = create_embedder(load_settings(environ=env).settings.model.embedding)
    emb.embed(["a", "b"])
    assert [r["path"] for r in script.requests] == ["/v1/embeddings"]


def test_ark_retries_and_errors_like_openai(endpoint: tuple[str, Script]) -> None:
    from veadk_mem.embedding.ark import ArkEmbedder

    base, script = endpoint
    script.failures = [429, 503]
    emb = ArkEmbedder(name="doubao-embedding-vision-250615", dim=DIM, api_base=base, api_key=KEY, timeout=5)
    emb.retry_delays = (0.01,) * 4
    assert emb.embed(["x"]).shape == (1, DIM)
    assert len(script.requests) == 3
    wrong = ArkEmbedder(name="doubao-embedding-vision-250615", dim=DIM, api_base=base, api_key="sk-echoed", timeout=5)
    with pytest.raises(StoreError, match=r"refused the API key \(HTTP 401") as info:
        wrong.embed(["x"])
    assert "sk-echoed" not in info.value.message


@pytest.mark.parametrize("path", ["/v1/embeddings", "/v1/embeddings/multimodal"])
def test_an_html_answer_is_one_clear_error(endpoint: tuple[str, Script], path: str) -> None:
    base, script = endpoint
    script.raw = (200, "text/html", b"<html><body>Welcome to nginx!</body></html>")
    name = "doubao-embedding-vision-250615" if path.endswith("multimodal") else "test-embedding"
    env = {"MODEL_EMBEDDING_API_KEY": KEY, "MODEL_EMBEDDING_API_BASE": base, "MODEL_EMBEDDING_DIM": str(DIM)}
    emb = create_embedder(load_settings(environ={**env, "MODEL_EMBEDDING_NAME": name}).settings.model.embedding)
    with pytest.raises(StoreError) as info:
        emb.embed(["x"])
    assert "did not answer with embeddings JSON" in info.value.message
    assert "MODEL_EMBEDDING_API_BASE" in info.value.message


def test_nan_from_the_endpoint_is_refused(endpoint: tuple[str, Script]) -> None:
    base, script = endpoint
    script.vector = [float("nan")] * DIM  # json.dumps writes NaN, which Python's parser reads back
    with pytest.raises(StoreError, match="NaN or infinity"):
        _embedder(base).embed(["x"])


def test_user_info_in_the_api_base_is_masked_everywhere(
    endpoint: tuple[str, Script], monkeypatch: pytest.MonkeyPatch
) -> None:
    from pathlib import Path

    from typer.testing import CliRunner

    from veadk_mem.cli.app import app

    examples = Path(__file__).resolve().parents[1] / "docs" / "examples" / "sessions"
    base, _ = endpoint
    secret_base = base.replace("http://", "http://tok-user-secret:pw-secret@").replace("/v1", "/nowhere")
    token_only = base.replace("http://", "http://tok-only-secret@")
    runner = CliRunner()
    for api_base in (secret_base, token_only):
        monkeypatch.setenv("MODEL_EMBEDDING_API_BASE", api_base)
        monkeypatch.setenv("MODEL_EMBEDDING_API_KEY", "sk-wrong-but-secret")
        monkeypatch.setenv("MODEL_EMBEDDING_PROVIDER", "openai")
        monkeypatch.setenv("MODEL_EMBEDDING_DIM", str(DIM))
        shown = runner.invoke(app, ["config", "show"])
        saved = runner.invoke(app, ["--verbose", "ltm", "save", str(examples)])
        assert saved.exit_code == 1 and "embedding endpoint http://****@127.0.0.1:" in saved.stderr
        text = shown.stdout + shown.stderr + saved.stdout + saved.stderr
        for secret in ("tok-user-secret", "pw-secret", "tok-only-secret", "sk-wrong-but-secret"):
            assert secret not in text, secret
        assert "****" in shown.stdout
