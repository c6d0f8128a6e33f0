"""Issue 41 item 9: `ltm search --queries` streams its results, a batch of queries at a time.

200,000 queries held every result to the end (2 GB, nothing printed for 125 s). Each result
line now goes out as its query completes, in the file's order and today's format, and memory
holds one batch of queries (cut by count and by bytes). The peak RSS against the file's length
is bench/ltm_search_stream.py's. Each test here failed on the code before its fix.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
from test_ltm_safety import _hosted_session, tos_server, vmem  # noqa: F401  (fixtures)
from typer.testing import CliRunner

from veadk_mem.config import load_settings
from veadk_mem.embedding.hash import HashEmbedder
from veadk_mem.ltm.facade import LongTermMemory

SEARCHES = "/v1/memories/search"


@pytest.fixture
def tos(tos_server: Any) -> Any:  # noqa: F811  (test_ltm_safety's TOS ContextBucket stand-in)
    return tos_server


@pytest.mark.slow  # a vmem process against a store that holds one answer back
def test_results_come_out_as_each_query_completes(runner: CliRunner, tmp_path: Path, tos: Any) -> None:
    """The store holds back its answer to query 30 until the test has read the first result
    line: a search that printed only at the end would wait out the store's 30 s."""
    assert vmem(runner, "ltm", "save", str(_hosted_session(tmp_path))).exit_code == 0
    queries = tmp_path / "q.txt"
    queries.write_text("".join(f"peanuts question {n}\n" for n in range(40)))
    first_line_read = threading.Event()
    waited: list[bool] = []
    dispatch = tos.dispatch

    def held_back(seen: Any) -> Any:
        if seen.path == SEARCHES and (seen.body or {}).get("query") == "peanuts question 30":
            waited.append(first_line_read.wait(30))
        return dispatch(seen)

    tos.dispatch = held_back
    child = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "veadk_mem",
            "ltm",
            "search",
            "--queries",
            str(queries),
            "-u",
            "user-42",
            "-a",
            "ltm_demo",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert child.stdout is not None
    first = child.stdout.readline()
    first_line_read.set()
    rest, err = child.communicate(timeout=120)
    assert child.returncode == 0, err
    assert waited == [True]  # the first line came out while query 30 was still waiting
    lines = [json.loads(line) for line in [first, *rest.splitlines()]]
    assert [line["query"] for line in lines] == [f"peanuts question {n}" for n in range(40)]  # the file's order
    assert set(lines[0]) == {"query", "user_id", "app_name", "index", "results"}
    assert "peanuts" in lines[0]["results"][0]["content"]["parts"][0]["text"]


class Counting(HashEmbedder):
    """The hash embedder, counting the texts of each embed_batch call."""

    def __init__(self, calls: list[int]) -> None:
        super().__init__(384, 64)
        self.calls = calls

    def embed_batch(self, texts: list[str]) -> Any:
        self.calls.append(len(texts))
        return super().embed_batch(texts)


def _seeded(tmp_path: Path, runner: CliRunner, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MODEL_EMBEDDING_PROVIDER", "hash")
    monkeypatch.setenv("LONG_TERM_MEMORY_LOCAL_PATH", str(tmp_path / "ltm.db"))
    session = {
        "id": "s1",
        "appName": "app",
        "userId": "alice",
        "state": {},
        "events": [
            {
                "id": f"e{n}",
                "author": "user",
                "invocationId": "i",
                "timestamp": 1_790_000_000.0 + n,
                "content": {"role": "user", "parts": [{"text": text}]},
            }
            for n, text in enumerate(["Lena lives in Porto.", "Bob keeps bees.", "The dentist is on Monday."])
        ],
    }
    path = tmp_path / "s1.json"
    path.write_text(json.dumps(session))
    assert vmem(runner, "ltm", "save", str(path)).exit_code == 0


def _search(ltm: LongTermMemory, queries: list[str], **options: Any) -> list[Any]:
    from veadk_mem.ltm.facade import SearchRequest
    from veadk_mem.ltm.queries import search_each

    async def go() -> list[Any]:
        out = []
        try:
            requests = (SearchRequest(query=q, user_id="alice", app_name="app") for q in queries)
            async for request in search_each(ltm, requests, mode="hybrid", **options):
                out.append((request.query, request.error, [e["id"] for e in request.entries]))
        finally:
            await ltm.close()
        return out

    return asyncio.run(go())


def test_queries_are_embedded_a_batch_at_a_time(
    runner: CliRunner, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _seeded(tmp_path, runner, monkeypatch)
    settings = load_settings().settings
    calls: list[int] = []
    queries = [f"question {n} about Porto" for n in range(600)]
    found = _search(LongTermMemory.from_settings(settings, embedder=Counting(calls)), queries)
    assert [q for q, _, _ in found] == queries and all(err is None and ids for _, err, ids in found)
    # batches of 256 queries, each embedded in the embedder's batches of 64
    assert calls == [64, 64, 64, 64] * 2 + [64, 24]
    # cut by bytes too: queries of 1,000 characters, 10,000 bytes a batch
    calls.clear()
    long = [f"{n:03d} " + "Porto " * 166 for n in range(25)]
    found = _search(LongTermMemory.from_settings(settings, embedder=Counting(calls)), long, batch_bytes=10_000)
    assert len(found) == 25 and calls == [10, 10, 5]


def test_a_batch_search_keeps_only_its_batchs_query_vectors() -> None:
    from veadk_mem.ltm.base import QueryVectors

    embedder = HashEmbedder(384, 64)
    vectors = QueryVectors()
    vectors.prepare(embedder, ["a", "b"])
    first = vectors.vector(embedder, "a")
    vectors.prepare(embedder, ["a", "c"])
    assert vectors.vector(embedder, "a") is first  # kept: in this batch too
    assert sorted(vectors._vectors) == ["a", "c"]  # "b" let go: memory holds one batch


def test_stdin_and_a_file_give_the_same_lines_and_the_spool_goes(
    runner: CliRunner, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _seeded(tmp_path, runner, monkeypatch)
    spool_dir = tmp_path / "tmp"
    spool_dir.mkdir()
    monkeypatch.setenv("TMPDIR", str(spool_dir))
    monkeypatch.setattr("tempfile.tempdir", None)
    text = 'where does Lena live\n\n{"query": "bees", "top_k": 1}\nPorto\x0cMonday\n'  # \x0c ends a line too
    queries = tmp_path / "q.txt"
    queries.write_text(text)
    args = ["ltm", "search", "-u", "alice", "-a", "app", "--queries"]
    from_file = vmem(runner, *args, str(queries))
    from_stdin = vmem(runner, *args, "-", input=text)
    assert from_file.exit_code == from_stdin.exit_code == 0, from_stdin.output
    assert from_file.stdout == from_stdin.stdout
    assert [json.loads(line)["query"] for line in from_file.stdout.splitlines()] == [
        "where does Lena live",
        "bees",
        "Porto",
        "Monday",
    ]
    assert list(spool_dir.iterdir()) == []
    bad = vmem(runner, *args, "-", input="fine\n{not json\n")
    assert bad.exit_code == 2 and "stdin: line 2, column 2: invalid JSON" in bad.stderr and bad.stdout == ""
    assert list(spool_dir.iterdir()) == []
