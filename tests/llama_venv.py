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


def python() -> Path:
    """The venv's interpreter; a loud skip when the venv is not there."""
    venv = Path(os.environ.get("VMEM_LLAMA_VENV") or ROOT / ".venv-llama")
    found = venv / "bin" / "python"
    if not found.exists():
        pytest.skip(
            f"*** the llama-index reference venv {venv} is missing: python3 -m venv {venv} && "
            f"{venv}/bin/pip install {PACKAGES} (bash .ci/test makes it) ***"
        )
    return found


def run(request: dict[str, Any], embed: Embed, timeout: float = 300) -> Any:
    """Send `request` to the writer, answer its embedding requests with `embed`, return its result."""
    # stderr goes to a file, not a pipe: a chatty writer must never block on it.
    with tempfile.TemporaryFile("w+") as errors:
        process = subprocess.Popen(
            [str(python()), str(WRITER)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=errors,
            text=True,
            cwd=str(WRITER.parent),
        )
        assert process.stdin is not None and process.stdout is not None
        try:
            process.stdin.write(json.dumps(request) + "\n")
            process.stdin.flush()
            while line := process.stdout.readline():
                message = json.loads(line)
                if "embed" in message:
                    vectors = [[float(x) for x in row] for row in embed(message["embed"])]
                    process.stdin.write(json.dumps({"vectors": vectors}) + "\n")
                    process.stdin.flush()
                elif "error" in message:
                    raise AssertionError(f"llama_writer.py failed:\n{message['error']}")
                else:
                    return message["result"]
            process.wait(timeout=timeout)
            errors.seek(0)
            raise AssertionError(f"llama_writer.py ended without an answer: {errors.read()[-2000:]}")
        finally:
            process.stdin.close()
            try:
                process.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
            process.stdout.close()
