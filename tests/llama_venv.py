"""Drive tests/llama_writer.py (VeADK's llama-index writer and reader) in its own venv.

The venv is `.venv-llama/` at the repository root, or `$VMEM_LLAMA_VENV`; `.ci/test`
makes it with llama-index-vector-stores-redis and llama-index-vector-stores-opensearch,
whose pins must not reach the test venv (they took redis-py down to 5.3 and numpy to 1.26).
Without it the tests that need it skip with a loud reason (under CI a skip fails).
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
WRITER = Path(__file__).resolve().parent / "llama_writer.py"
PACKAGES = "llama-index-vector-stores-redis llama-index-vector-stores-opensearch"

Embed = Callable[[list[str]], Sequence[Sequence[float]]]


def venv() -> Path:
    """The reference venv: $VMEM_LLAMA_VENV, else .venv-llama at the repository root."""
    return Path(os.environ.get("VMEM_LLAMA_VENV") or ROOT / ".venv-llama")


def missing() -> str:
    """Why the venv cannot be used, or "" when its interpreter is there."""
    found = venv() / "bin" / "python"
    if found.exists():
        return ""
    return (
        f"the llama-index reference venv {venv()} is missing: python3 -m venv {venv()} && "
        f"{venv()}/bin/pip install {PACKAGES} (bash .ci/test makes it)"
    )


def python() -> Path:
    """The venv's interpreter; a loud skip when the venv is not there."""
    if reason := missing():
        pytest.skip(f"*** {reason} ***")
    return venv() / "bin" / "python"


class Writer:
    """One llama_writer.py process taking requests in turn (its indexes are kept between them)."""

    def __init__(self, interpreter: Path, embed: Embed | None = None, timeout: float = 300) -> None:
        self.embed, self.timeout = embed, timeout
        # stderr goes to a file, not a pipe: a chatty writer must never block on it.
        self.errors = tempfile.TemporaryFile("w+")  # noqa: SIM115 (closed by close())
        self.process = subprocess.Popen(
            [str(interpreter), str(WRITER)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.errors,
            text=True,
            cwd=str(WRITER.parent),
        )

    def request(self, request: dict[str, Any]) -> Any:
        """Send `request`, answer its embedding requests with the embedder, return its result."""
        stdin, stdout = self.process.stdin, self.process.stdout
        assert stdin is not None and stdout is not None
        stdin.write(json.dumps(request) + "\n")
        stdin.flush()
        while line := stdout.readline():
            message = json.loads(line)
            if "embed" in message:
                if self.embed is None:
                    raise AssertionError(f"llama_writer.py asked for vectors of {message['embed'][:3]}...")
                vectors = [[float(x) for x in row] for row in self.embed(message["embed"])]
                stdin.write(json.dumps({"vectors": vectors}) + "\n")
                stdin.flush()
            elif "error" in message:
                raise AssertionError(f"llama_writer.py failed:\n{message['error']}")
            else:
                return message["result"]
        self.process.wait(timeout=self.timeout)
        self.errors.seek(0)
        raise AssertionError(f"llama_writer.py ended without an answer: {self.errors.read()[-2000:]}")

    def close(self) -> None:
        """End the process (it stops at the end of its stdin)."""
        assert self.process.stdin is not None and self.process.stdout is not None
        self.process.stdin.close()
        try:
            self.process.wait(timeout=self.timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self.process.stdout.close()
        self.errors.close()

    def __enter__(self) -> Writer:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()


def run(request: dict[str, Any], embed: Embed, timeout: float = 300) -> Any:
    """Send `request` to a fresh writer, answer its embedding requests with `embed`, return its result."""
    with Writer(python(), embed, timeout) as writer:
        return writer.request(request)
