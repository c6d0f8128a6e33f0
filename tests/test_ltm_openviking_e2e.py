"""The openviking backend end to end: vmem against a real OpenViking 0.5.2 server.

The server runs from its own venv (`.venv-openviking`, made by `.ci/test`; about 1.3 GB,
a test-only dependency), offline: its embedding and LLM endpoints point at a local
OpenAI-compatible stub. The stub embeds by hashed words and answers memory extraction
with the short SDK program the server asks for, naming the message's peer. The test
skips loudly only when the server cannot be installed or started.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import re
import socket
import struct
import subprocess
import threading
import time
import zlib
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from veadk_mem.cli.app import app

pytestmark = pytest.mark.contract

ROOT = Path(__file__).resolve().parents[1]
SERVER_BIN = Path(os.environ.get("VMEM_OPENVIKING_SERVER", ROOT / ".venv-openviking" / "bin" / "openviking-server"))
DIM = 64
DUMP = os.environ.get("VMEM_E2E_DUMP")  # a file to append the LLM requests to, for debugging
ROOT_KEY = "ov-root-key-e2e"
PEER = "user-42"
FACT = "allergic to peanuts and vegetarian"


def _vector(text: str) -> list[float]:
    values = [0.0] * DIM
    for word in re.findall(r"\w+", text.lower()):
        values[zlib.crc32(word.encode()) % DIM] += 1.0
    norm = sum(v * v for v in values) ** 0.5 or 1.0
    return [v / norm for v in values]


class _Stub(BaseHTTPRequestHandler):
    """OpenAI-compatible embeddings (float or base64) and chat completions."""

    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True

    def log_message(self, format: str, *args: Any) -> None:
        return

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
        if self.path.endswith("/embeddings"):
            texts = body.get("input")
            texts = [texts] if isinstance(texts, str) else list(texts or [])
            data = []
            for i, text in enumerate(texts):
                vector = _vector(str(text))
                if body.get("encoding_format") == "base64":
                    embedding: Any = base64.b64encode(struct.pack(f"<{DIM}f", *vector)).decode()
                else:
                    embedding = vector
                data.append({"object": "embedding", "index": i, "embedding": embedding})
            payload: Any = {
                "object": "list",
                "data": data,
                "model": body.get("model"),
                "usage": {"prompt_tokens": 1, "total_tokens": 1},
            }
        else:
            prompt = json.dumps(body.get("messages", []))
            if DUMP:
                with open(DUMP, "a") as dump:
                    dump.write(json.dumps(body) + "\n")
            # memory extraction asks for a restricted Python program; anything else gets a line of text
            content = _program(prompt) if "sdk." in prompt else "A short conversation about diet."
            payload = {
                "id": "chatcmpl-stub",
                "object": "chat.completion",
                "created": int(time.time()),
                "model": body.get("model"),
                "choices": [
                    {"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}
                ],
                "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
            }
        data_bytes = json.dumps(payload).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data_bytes)))
        self.end_headers()
        self.wfile.write(data_bytes)


def _program(prompt: str) -> str:
    """One preference about the peer, with exactly the fields the server's prompt lists."""
    match = re.search(r"sdk\.create_preferences\(\*, ([^)]*)\)", prompt)
    names = [field.split(":")[0].strip() for field in match.group(1).split(",")] if match else ["content"]
    values = {"peer_id": PEER, "user": PEER, "topic": "food_preference", "content": FACT}
    arguments = ", ".join(f"{name}={values.get(name, 'unknown')!r}" for name in names)
    return f"sdk.create_preferences({arguments})\nsdk.commit()"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture(scope="module")
def openviking(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """A real OpenViking server with an account whose user key the tests use."""
    if not SERVER_BIN.exists():
        pytest.skip(f"*** OpenViking server not installed at {SERVER_BIN}: .ci/test installs it ***")
    stub = ThreadingHTTPServer(("127.0.0.1", 0), _Stub)
    threading.Thread(target=stub.serve_forever, daemon=True).start()
    stub_url = f"http://127.0.0.1:{stub.server_address[1]}/v1"
    work = tmp_path_factory.mktemp("openviking")
    port = _free_port()
    config = {
        "server": {"host": "127.0.0.1", "port": port, "root_api_key": ROOT_KEY},
        "storage": {"workspace": str(work / "workspace")},
        "embedding": {
            "dense": {
                "provider": "openai",
                "model": "stub-embed",
                "api_key": "stub",
                "api_base": stub_url,
                "dimension": DIM,
            }
        },
        "vlm": {"provider": "openai", "model": "stub-llm", "api_key": "stub", "api_base": stub_url},
    }
    (work / "ov.conf").write_text(json.dumps(config))
    env = {**os.environ, "HOME": str(work), "OPENVIKING_CONFIG_FILE": str(work / "ov.conf")}
    log = (work / "server.log").open("wb")
    process = subprocess.Popen([str(SERVER_BIN), "--config", str(work / "ov.conf")], env=env, stdout=log, stderr=log)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline and process.poll() is None:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=1):
                    break
            except OSError:
                time.sleep(0.5)
        if process.poll() is not None or time.monotonic() >= deadline:
            tail = (work / "server.log").read_text(errors="replace")[-800:]
            pytest.skip(f"*** OpenViking server did not start: {tail} ***")
        time.sleep(1)
        user_key = asyncio.run(_create_account(url))
        yield {"url": url, "key": user_key, "user": "alice"}
    finally:
        process.terminate()
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
        stub.shutdown()


async def _create_account(url: str) -> str:
    from openviking_sdk import AsyncHTTPClient

    client = AsyncHTTPClient(url=url, api_key=ROOT_KEY)
    await client.initialize()
    try:
        result = await client.admin_create_account("vmem-e2e", "alice")
    finally:
        await client.close()
    key = result.get("user_key") or result.get("api_key") or result.get("key")
    assert key, f"no key in {result}"
    return str(key)


def _env(monkeypatch: pytest.MonkeyPatch, server: dict[str, str], user: str | None) -> None:
    monkeypatch.setenv("LONG_TERM_MEMORY_BACKEND", "openviking")
    monkeypatch.setenv("DATABASE_OPENVIKING_URL", server["url"])
    monkeypatch.setenv("DATABASE_OPENVIKING_API_KEY", server["key"])
    if user is not None:
        monkeypatch.setenv("DATABASE_OPENVIKING_USER_ID", user)


def test_saved_session_is_extracted_and_found(
    runner: CliRunner, openviking: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    _env(monkeypatch, openviking, openviking["user"])
    session = ROOT / "docs" / "examples" / "sessions" / "ltm_demo-session-1.json"
    result = runner.invoke(app, ["--json", "ltm", "save", str(session)])
    assert result.exit_code == 0, result.stderr
    # The server indexes an extracted memory's vectors after its extraction task ends: on a
    # busy machine the first search can come before that (seen once in CI); give it 20 s.
    deadline = time.monotonic() + 20
    while True:
        result = runner.invoke(app, ["--json", "ltm", "search", "peanuts vegetarian", "-u", PEER])
        assert result.exit_code == 0, result.stderr
        entries = json.loads(result.stdout)
        if entries or time.monotonic() > deadline:
            break
        time.sleep(1)
    assert entries and any("peanuts" in json.dumps(e["content"]) for e in entries)
    assert all(e["custom_metadata"]["origin"]["uri"].startswith(f"viking://user/alice/peers/{PEER}/") for e in entries)

    result = runner.invoke(app, ["--json", "ltm", "save", str(session)])
    assert result.exit_code == 0 and json.loads(result.stdout)["totals"]["saved"] == 0  # the session holds them
    result = runner.invoke(app, ["--json", "ltm", "list", "-u", PEER])
    assert result.exit_code == 0, result.stderr
    listed = json.loads(result.stdout)
    found = {e["custom_metadata"]["origin"]["uri"] for e in entries}
    files = {uri for uri in found if not uri.rsplit("/", 1)[-1].startswith(".")}  # search also hits .overview.md
    assert files and files <= {e["id"] for e in listed}


def test_another_user_id_is_access_denied_not_an_empty_search(
    runner: CliRunner, openviking: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    _env(monkeypatch, openviking, "bob")
    result = runner.invoke(app, ["ltm", "search", "peanuts", "-u", PEER])
    assert result.exit_code == 1 and result.stdout == ""
    assert "DATABASE_OPENVIKING_USER_ID" in result.stderr and openviking["key"] not in result.stderr
