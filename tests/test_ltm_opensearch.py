"""The opensearch backend through opensearch-py against a local OpenSearch contract server.

OpenSearch cannot run here: tests/opensearch_server.py answers the REST calls (also over
TLS with a self-signed certificate made in the test) and computes k-NN itself. The layout
is proven with llama-index's OpensearchVectorClient, built with exactly VeADK's
arguments (tests/llama_writer.py, run from .venv-llama), each side reading the other's
documents.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import llama_venv
import opensearch_server
import pytest
from typer.testing import CliRunner

from veadk_mem.config import load_settings
from veadk_mem.embedding.hash import HashEmbedder
from veadk_mem.errors import BadInput, StoreError
from veadk_mem.ltm.backends.opensearch import OpensearchBackend, index_body
from veadk_mem.ltm.base import MemoryRecord

pytestmark = pytest.mark.contract
DIM = 32
HASH = HashEmbedder(dim=DIM)
USER, PASSWORD = "admin", "os-secret-pw"
MEMORIES = [
    '{"role": "user", "parts": [{"text": "I am allergic to peanuts"}]}',
    '{"role": "user", "parts": [{"text": "my favourite city is Lisbon"}]}',
    '{"role": "user", "parts": [{"text": "I run every morning before work"}]}',
]


@pytest.fixture
def server() -> Iterator[opensearch_server.Server]:
    running = opensearch_server.start(auth=(USER, PASSWORD))
    yield running
    running.stop()


@pytest.fixture(scope="module")
def cert(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    return opensearch_server.self_signed(tmp_path_factory.mktemp("tls"))


def _env(port: int, *, ssl: bool = False, cert_path: str = "", password: str = PASSWORD) -> dict[str, str]:
    return {
        "LONG_TERM_MEMORY_BACKEND": "opensearch",
        "DATABASE_OPENSEARCH_HOST": "127.0.0.1",
        "DATABASE_OPENSEARCH_PORT": str(port),
        "DATABASE_OPENSEARCH_USERNAME": USER,
        "DATABASE_OPENSEARCH_PASSWORD": password,
        "DATABASE_OPENSEARCH_USE_SSL": "true" if ssl else "false",
        "DATABASE_OPENSEARCH_CERT_PATH": cert_path,
    }


def _backend(port: int, index: str = "app", embedder: Any = HASH, **env: Any) -> OpensearchBackend:
    settings = load_settings(environ=_env(port, **env)).settings
    return OpensearchBackend(index, settings=settings, embedder_factory=lambda _m: embedder)


def _records(user: str, texts: list[str]) -> list[MemoryRecord]:
    return [MemoryRecord(text=t, user_id=user, app_name="app", session_id="s1") for t in texts]


@pytest.fixture
def index() -> str:
    return f"t{uuid.uuid4().hex[:8]}"


# --- llama-index's OpensearchVectorClient, with exactly VeADK's arguments ------------------


def _embed(texts: list[str]) -> Any:
    return HASH.embed(texts).tolist()


def _request(port: int, name: str, ssl: bool = False, cert_path: str = "") -> dict[str, Any]:
    """What the reference writer needs to build VeADK's OpensearchVectorClient for index `name`."""
    return {"store": "opensearch", "port": port, "auth": [USER, PASSWORD], "ssl": ssl, "cert_path": cert_path}


def _veadk_save(port: int, name: str, texts: list[str], **kw: Any) -> None:
    """VeADK's add through llama-index (in .venv-llama): split, embed, insert."""
    llama_venv.run({**_request(port, name, **kw), "name": name, "dim": DIM, "op": "save", "texts": texts}, _embed)


def _veadk_search(port: int, name: str, query: str, top_k: int, **kw: Any) -> list[str]:
    """VeADK's search through llama-index's retriever: the top_k nodes' texts."""
    request = {**_request(port, name, **kw), "name": name, "dim": DIM, "op": "search", "query": query, "top_k": top_k}
    return llama_venv.run(request, _embed)  # type: ignore[no-any-return]


# --- the backend ------------------------------------------------------------------------


async def test_save_search_list_delete(server: opensearch_server.Server, index: str) -> None:
    backend = _backend(server.port, index)
    try:
        ids = await backend.save("alice", _records("alice", MEMORIES))
        hits = await backend.search("alice", "peanuts allergy", 2)
        assert "peanuts" in hits[0].text  # type: ignore[union-attr]
        assert sorted(r.text for r in await backend.list_memories("alice")) == sorted(MEMORIES)
        assert await backend.delete_memories("alice", [ids[0]]) == 1
        assert len(await backend.list_memories("alice")) == 2
        assert await backend.known_indexes("alice") == [index]
    finally:
        await backend.close()
    stored = server.cluster.indices[f"{index}_alice"]
    assert {k: stored[k] for k in ("settings", "mappings")} == index_body(DIM)


async def test_mapping_and_documents_are_veadks(server: opensearch_server.Server, index: str) -> None:
    _veadk_save(server.port, f"{index}_bob", MEMORIES[:1])
    backend = _backend(server.port, index)
    try:
        await backend.save("carol", _records("carol", MEMORIES[:1]))
    finally:
        await backend.close()
    theirs, ours = server.cluster.indices[f"{index}_bob"], server.cluster.indices[f"{index}_carol"]
    assert (theirs["settings"], theirs["mappings"]) == (ours["settings"], ours["mappings"])
    (their_doc,), (our_doc,) = theirs["docs"].values(), ours["docs"].values()
    assert set(their_doc) == set(our_doc) == {"embedding", "content", "metadata"}
    assert set(their_doc["metadata"]) <= set(our_doc["metadata"])
    assert our_doc["content"] == MEMORIES[0] and len(our_doc["embedding"]) == DIM


async def test_vmem_reads_what_veadk_wrote_and_the_other_way(server: opensearch_server.Server, index: str) -> None:
    long_text = " ".join(f"Sentence number {i} talks about gardening and tomatoes." for i in range(120))
    _veadk_save(server.port, f"{index}_dave", [*MEMORIES, long_text])
    backend = _backend(server.port, index)
    try:
        hits = await backend.search("dave", "favourite city Lisbon", 1)
        assert [h.text for h in hits] == [MEMORIES[1]]  # type: ignore[union-attr]
        listed = await backend.list_memories("dave")
        assert len(listed) == 4 and long_text in [r.text for r in listed]
        long_id = next(r.id for r in listed if r.text == long_text)
        assert await backend.delete_memories("dave", [long_id]) == 1
        assert len(await backend.list_memories("dave")) == 3
        await backend.save("erin", _records("erin", MEMORIES))
    finally:
        await backend.close()
    assert _veadk_search(server.port, f"{index}_erin", "morning run before work", 1) == [MEMORIES[2]]


async def test_tls_with_a_self_signed_certificate(cert: tuple[Path, Path], index: str, tmp_path: Path) -> None:
    server = opensearch_server.start(tls=cert, auth=(USER, PASSWORD))
    try:
        warnings: list[str] = []
        unverified = _backend(server.port, index, ssl=True)
        unverified.warn = warnings.append
        verified = _backend(server.port, index, ssl=True, cert_path=str(cert[0]))
        other_ca, _ = opensearch_server.self_signed(tmp_path)
        wrong_ca = _backend(server.port, index, ssl=True, cert_path=str(other_ca))
        try:
            await unverified.save("fay", _records("fay", MEMORIES[:2]))
            assert warnings and "not verified" in warnings[0]  # VeADK's default, said out loud
            assert [h.text for h in await verified.search("fay", "Lisbon", 1)] == [MEMORIES[1]]  # type: ignore[union-attr]
            with pytest.raises(StoreError, match=r"cannot reach opensearch at https://127\.0\.0\.1:\d+ .*TLS failed"):
                await wrong_ca.list_memories("fay")
        finally:
            for backend in (unverified, verified, wrong_ca):
                await backend.close()
        assert _veadk_search(server.port, f"{index}_fay", "peanuts", 1, ssl=True, cert_path=str(cert[0])) == [
            MEMORIES[0]
        ]
    finally:
        server.stop()


async def test_bulk_writes_two_requests_per_thousand_memories(server: opensearch_server.Server, index: str) -> None:
    backend = _backend(server.port, index)
    try:
        await backend.save("gus", _records("gus", [f"memory {i}" for i in range(1000)]))
    finally:
        await backend.close()
    bulk = [r for r in server.cluster.requests if r[1].endswith("/_bulk")]
    assert len(bulk) == 2 and len(server.cluster.docs(f"{index}_gus")) == 1000


async def test_a_failure_mid_save_says_what_was_stored_and_a_rerun_stores_the_rest(
    server: opensearch_server.Server, index: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    import veadk_mem.ltm.backends.opensearch as module
    from veadk_mem.ltm.facade import LongTermMemory

    monkeypatch.setattr(module, "BATCH", 2)
    monkeypatch.setattr(OpensearchBackend, "retry_delays", (0.01,) * 4)  # the 503 is retried, briefly
    server.cluster.fail_bulk_after = 1
    texts = [f"memory number {i}" for i in range(5)]
    backend = _backend(server.port, index)
    try:
        with pytest.raises(StoreError) as info:
            await backend.save("jo", _records("jo", texts))
    finally:
        await backend.close()
    assert "2 of 5 memories were stored, 3 were not (re-run to store the rest)" in info.value.message
    assert "503" in info.value.message
    server.cluster.fail_bulk_after = None
    settings = load_settings(environ=_env(server.port)).settings
    ltm = LongTermMemory(backend="opensearch", settings=settings, embedder=HASH, index=index)
    try:
        new = await ltm.new_records("jo", _records("jo", texts), index)
        assert len(new) == 3
        await ltm.backend_for(index=index).save("jo", new)
    finally:
        await ltm.close()
    assert sorted(d["content"] for d in server.cluster.docs(f"{index}_jo").values()) == texts


async def test_names_are_checked_naming_the_character(server: opensearch_server.Server) -> None:
    with pytest.raises(BadInput, match=r"'MyApp': 'M' is not allowed \(upper-case"):
        _backend(server.port, "MyApp")
    with pytest.raises(BadInput, match=r"must not start with '_'"):
        _backend(server.port, "_app")
    backend = _backend(server.port, "app")
    with pytest.raises(BadInput, match=r"'app_Alice': 'A' is not allowed .*from the user id 'Alice'"):
        await backend.save("Alice", _records("Alice", ["x"]))
    await backend.close()


async def test_another_dimension_is_refused_naming_both(server: opensearch_server.Server, index: str) -> None:
    backend = _backend(server.port, index)
    other = _backend(server.port, index, HashEmbedder(dim=16))
    try:
        await backend.save("hal", _records("hal", MEMORIES[:1]))
        with pytest.raises(BadInput) as info:
            await other.save("hal", _records("hal", MEMORIES[1:]))
        assert "32-d vectors" in info.value.message and "hash-v1-16 (16-d)" in info.value.message
        health = await other.health(None)
        assert health.version == f"opensearch {opensearch_server.VERSION}" and health.dimension == DIM
        assert health.problems and "16-d" in health.problems[0]
    finally:
        await backend.close()
        await other.close()


def test_cli_wrong_password_and_forget(server: opensearch_server.Server, index: str, tmp_path: Path) -> None:
    from veadk_mem.cli.app import app

    runner = CliRunner()
    env = {**_env(server.port), "LONG_TERM_MEMORY_INDEX": index, "MODEL_EMBEDDING_PROVIDER": "hash"}
    env["SHORT_TERM_MEMORY_BACKEND"] = "local"
    source = tmp_path / "s.json"
    events = [{"id": "e1", "author": "user", "content": {"role": "user", "parts": [{"text": "I like jazz"}]}}]
    source.write_text(json.dumps({"id": "s1", "appName": "shop", "userId": "ivy", "events": events}))
    result = runner.invoke(app, ["ltm", "save", str(source)], env=env)
    assert result.exit_code == 0, result.stderr
    bad = runner.invoke(app, ["ltm", "list", "--user", "ivy"], env={**env, "DATABASE_OPENSEARCH_PASSWORD": "nope"})
    assert bad.exit_code == 1 and "refused the username or password" in bad.stderr
    assert "nope" not in bad.stderr and "Traceback" not in bad.stderr
    gone = runner.invoke(app, ["forget", "ivy", "--yes", "--json"], env=env)
    assert gone.exit_code == 0, gone.stderr
    assert json.loads(gone.stdout)["deleted"]["memories"] == 1
    assert server.cluster.docs(f"{index}_ivy") == {}


# --- opensearch-py without its async extra (no aiohttp) --------------------------------------


@pytest.mark.parametrize(
    "args",
    [
        ["ltm", "search", "jazz", "--user", "ivy"],
        ["ltm", "list", "--user", "ivy"],
        ["ltm", "save", "SOURCE"],
        ["ltm", "delete", "--user", "ivy", "--id", "x", "--yes"],
        ["ltm", "export", "--user", "ivy", "-o", "OUT"],
        ["forget", "ivy", "--yes"],
        ["doctor"],
    ],
    ids=lambda a: " ".join(a[:2]),
)
def test_without_aiohttp_every_command_exits_4_with_the_install_line(
    args: list[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """opensearch-py installed without `[async]`: its AsyncOpenSearch is absent and aiohttp does not import."""
    import sys

    import opensearchpy

    from veadk_mem.cli.app import app

    monkeypatch.delattr(opensearchpy, "AsyncOpenSearch")  # what `import opensearchpy` gives without aiohttp
    monkeypatch.setitem(sys.modules, "aiohttp", None)  # and `import aiohttp` raises ImportError
    source = tmp_path / "s.json"
    events = [{"id": "e1", "author": "user", "content": {"role": "user", "parts": [{"text": "I like jazz"}]}}]
    source.write_text(json.dumps({"id": "s1", "appName": "shop", "userId": "ivy", "events": events}))
    args = [str(source) if a == "SOURCE" else str(tmp_path / "out.jsonl") if a == "OUT" else a for a in args]
    env = {**_env(9), "MODEL_EMBEDDING_PROVIDER": "hash", "SHORT_TERM_MEMORY_BACKEND": "local"}
    result = CliRunner().invoke(app, args, env=env)
    said = result.stderr + result.stdout  # doctor puts its checks on stdout
    assert result.exit_code == 4, said
    assert "aiohttp is not installed" in said and "pip install 'opensearch-py[async]'" in said
    assert "Traceback" not in said and "unexpected" not in said


async def test_ltm_edit_replaces_a_memory_veadks_reader_then_finds(
    server: opensearch_server.Server, index: str
) -> None:
    """`ltm edit` (#42 item 5) on OpenSearch's layout: the corrected text replaces the old in
    the index VeADK's llama-index retriever reads, re-embedded."""
    from veadk_mem.ltm.edit import edit_memory
    from veadk_mem.ltm.facade import LongTermMemory

    backend = _backend(server.port, index)
    ltm = LongTermMemory(backend=backend)
    try:
        ids = await ltm.save_records("gina", _records("gina", MEMORIES), index)
        done = await edit_memory(ltm, memory_id=ids[0], text="I am allergic to hazelnuts", user_id="gina")
        texts = {r.id: r.text for r in await backend.list_memories("gina")}
        assert ids[0] not in texts and texts[done.new_id] == done.new.text and len(texts) == len(MEMORIES)
    finally:
        await ltm.close()
    found = _veadk_search(server.port, f"{index}_gina", "hazelnuts allergy", 1)
    assert found == [done.new.text]
