"""`vmem ltm export / import / copy`: long-term memory as a file and between stores."""

from __future__ import annotations

import asyncio
import json
import tracemalloc
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from typer.testing import CliRunner

from veadk_mem.cli.app import app
from veadk_mem.config import VmemSettings
from veadk_mem.embedding.hash import HashEmbedder
from veadk_mem.errors import BadInput
from veadk_mem.ltm.backends.local import LocalBackend
from veadk_mem.ltm.backends.memory import MemoryBackend
from veadk_mem.ltm.base import MemoryRecord
from veadk_mem.ltm.facade import LongTermMemory
from veadk_mem.ltm.registry import _registered, register_backend
from veadk_mem.ltm.transfer import ExportScope, export_lines, import_records, open_export

FIELDS = ("text", "user_id", "app_name", "index", "session_id", "event_id", "author", "content_hash", "created_at")


class CountingHash(HashEmbedder):
    """The hash embedder, counting the texts it is asked to embed."""

    def __init__(self, dim: int = 64) -> None:
        super().__init__(dim)
        self.embedded = 0
        self.calls = 0

    def embed_batch(self, texts: list[str]) -> Any:
        self.embedded += len(texts)
        self.calls += 1
        return super().embed_batch(texts)


def facade(path: Path, embedder: HashEmbedder | None = None) -> LongTermMemory:
    settings = VmemSettings()
    settings.long_term_memory.local_path = str(path)
    settings.model.embedding.provider = "hash"
    return LongTermMemory.from_settings(settings, embedder=embedder)


def memory(text: str, user: str, session: str = "s1", app: str = "app") -> MemoryRecord:
    body = json.dumps({"role": "user", "parts": [{"text": text}]})
    return MemoryRecord(text=body, user_id=user, app_name=app, session_id=session, event_id=f"e-{text}", author="user")


async def aseed(ltm: LongTermMemory, index: str, user: str, texts: list[str]) -> None:
    await ltm.backend_for(index=index).save(user, [memory(t, user) for t in texts])


def seed(ltm: LongTermMemory, index: str, user: str, texts: list[str]) -> None:
    asyncio.run(aseed(ltm, index, user, texts))


async def collect(ltm: LongTermMemory, scope: ExportScope, vectors: bool = False) -> list[dict[str, Any]]:
    return [line async for line in export_lines(ltm, scope, vectors=vectors)]


def write(path: Path, lines: list[dict[str, Any]]) -> None:
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))


async def import_file(ltm: LongTermMemory, path: Path, **kw: Any) -> Any:
    file = open_export(str(path))
    try:
        return await import_records(ltm, file.records(), **kw)
    finally:
        file.close()


async def test_local_to_file_to_local_equals_record_for_record(tmp_path: Path) -> None:
    src = facade(tmp_path / "a.db", CountingHash())
    await aseed(src, "app", "u1", ["peanuts", "trains", "jazz"])
    await aseed(src, "other", "u1", ["Lisbon"])
    await aseed(src, "app", "u2", ["tennis"])
    lines = await collect(src, ExportScope(all_users=True), vectors=True)
    assert lines[0]["kind"] == "header" and lines[0]["embedding_model"] == "hash-v1-64"
    assert len(lines) == 6
    file = tmp_path / "backup.jsonl"
    write(file, lines)

    counting = CountingHash()
    dst = facade(tmp_path / "b.db", counting)
    summary = await import_file(dst, file)
    assert (summary.read, summary.saved, summary.duplicates, summary.failed) == (5, 5, 0, 0)
    assert summary.reused_vectors == 5 and counting.embedded == 0  # same model: no embedding at all
    again = await collect(dst, ExportScope(all_users=True), vectors=True)

    def key(line: dict[str, Any]) -> tuple[Any, ...]:
        return tuple(line[f] for f in FIELDS)

    assert sorted(map(key, lines[1:])) == sorted(map(key, again[1:]))
    by_hash = {line["content_hash"]: line["vectors_b64"] for line in again[1:]}
    for line in lines[1:]:
        assert by_hash[line["content_hash"]] == line["vectors_b64"]
    # The copy searches like the original.
    hits = await dst.search_memory(app_name="app", user_id="u1", query="peanuts")
    assert "peanuts" in hits[0]["content"]["parts"][0]["text"]


async def test_importing_twice_stores_nothing_new(tmp_path: Path) -> None:
    src = facade(tmp_path / "a.db")
    await aseed(src, "app", "u1", ["one", "two"])
    file = tmp_path / "x.jsonl"
    write(file, await collect(src, ExportScope(user_id="u1")))
    dst = facade(tmp_path / "b.db")
    first = await import_file(dst, file)
    second = await import_file(dst, file)
    assert (first.saved, second.saved, second.duplicates) == (2, 0, 2)
    assert len(await dst.backend_for(index="app").list_memories("u1")) == 2


async def test_vectors_of_another_model_are_reembedded_in_batches(tmp_path: Path) -> None:
    src = facade(tmp_path / "a.db", CountingHash(64))
    await aseed(src, "app", "u1", [f"memory {i}" for i in range(300)])
    file = tmp_path / "x.jsonl"
    write(file, await collect(src, ExportScope(user_id="u1"), vectors=True))
    counting = CountingHash(32)  # another model: hash-v1-32
    notes: list[str] = []
    summary = await import_file(facade(tmp_path / "b.db", counting), file, notice=notes.append)
    assert summary.saved == 300 and summary.reembedded == 300 and summary.reused_vectors == 0
    assert counting.embedded == 300
    assert counting.calls < 10  # batches, never one call per memory
    assert any("re-embedding with hash-v1-32" in n for n in notes)


async def test_a_bad_line_in_the_middle_stores_nothing(tmp_path: Path) -> None:
    src = facade(tmp_path / "a.db")
    await aseed(src, "app", "u1", ["one", "two", "three"])
    lines = await collect(src, ExportScope(user_id="u1"), vectors=True)
    lines[2]["vectors"] = [[0.5] * 384, [0.5, 0.5, 0.5, "x", *([0.5] * 380)]]
    lines[2].pop("vectors_b64")
    file = tmp_path / "bad.jsonl"
    write(file, lines)
    with pytest.raises(BadInput, match=r"bad\.jsonl:3: field 'vectors\[1\]' holds 'x'"):
        open_export(str(file))
    dst = tmp_path / "b.db"
    runner = CliRunner()
    result = runner.invoke(app, ["ltm", "import", str(file)], env={"LONG_TERM_MEMORY_LOCAL_PATH": str(dst)})
    assert result.exit_code == 2 and "bad.jsonl:3" in result.stderr
    assert not dst.exists()


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ('{"text": "", "user_id": "u"}', "field 'text' is missing or empty"),
        ('{"text": "a"}', "field 'user_id' is missing or empty"),
        ('{"text": "a", "user_id": "u", "created_at": 1e300}', "field 'created_at' is out of range"),
        ('{"text": "a", "user_id": "u", "content_hash": "zz"}', "field 'content_hash'"),
        ('{"text": "a", "user_id": "u", "metadata": []}', "field 'metadata' must be an object"),
        ('{"text": "a", "user_id": "u", "vectors": [[1.0]]}', "field 'embedding_model' is required"),
        ('{"text": "a", "user_id": "u", "vectors": [[1e999]], "embedding_model": "m", "dimension": 1}', "not a finite"),
        ('{"text": "a", "user_id": "u", "vectors": [[true]], "embedding_model": "m", "dimension": 1}', "True"),
        ('{"text": "a", "user_id": "u", "vectors_b64": "AAAA", "embedding_model": "m", "dimension": 2}', "whole 2-d"),
        ('{"text": "a", "user_id": "u", "vectors_b64": "!!", "embedding_model": "m", "dimension": 1}', "base64"),
        ('{"text": "a", "user_id": "u", "created_at": Infinity}', "Infinity is not a JSON number"),
        ('{"text": "a\\u0000", "user_id": "u"}', "NUL character"),
        ("[" * 100000, "nested too deeply"),
        ("{nope", "invalid JSON"),
    ],
)
def test_bad_lines_name_the_line_and_field(tmp_path: Path, line: str, message: str) -> None:
    file = tmp_path / "f.jsonl"
    file.write_text('{"kind": "header", "format": "vmem-ltm", "version": 1}\n\n' + line + "\n")
    with pytest.raises(BadInput) as caught:
        open_export(str(file))
    assert caught.value.message.startswith(f"{file}:3: ") and message in caught.value.message


def test_a_file_without_the_header_is_refused(tmp_path: Path) -> None:
    file = tmp_path / "sessions.jsonl"
    file.write_text('{"id": "s1", "appName": "a", "userId": "u", "events": []}\n')
    with pytest.raises(BadInput, match=r"sessions\.jsonl:1: not a vmem long-term memory export"):
        open_export(str(file))
    newer = tmp_path / "newer.jsonl"
    newer.write_text('{"kind": "header", "format": "vmem-ltm", "version": 2}\n')
    with pytest.raises(BadInput, match="format version 1, not 2"):
        open_export(str(newer))


async def test_export_streams_in_constant_memory(tmp_path: Path) -> None:
    """Peak Python memory of an export does not grow with the store (pages of 1,000)."""
    ltm = facade(tmp_path / "big.db")
    backend = ltm.backend_for(index="app")
    assert isinstance(backend, LocalBackend)
    conn = backend.conn
    await backend.save("u1", [memory("seed", "u1")])
    blob = np.zeros(8, dtype=np.float32).tobytes()  # small vectors: the test is about rows, not floats

    def fill(upto: int, start: int) -> None:
        conn.execute("BEGIN")
        conn.executemany(
            "INSERT INTO memories (id, index_name, user_id, text, content_hash, model, dim, created_at, vector) "
            "VALUES (?, 'app', 'u1', ?, ?, 'hash-v1-8', 8, 0, ?)",
            ((f"id{i}", f"memory text number {i} " * 8, f"{i:064x}", blob) for i in range(start, upto)),
        )
        conn.execute("COMMIT")

    async def peak() -> tuple[int, int]:
        tracemalloc.start()
        count = 0
        async for line in export_lines(ltm, ExportScope(user_id="u1", index="app"), vectors=True):
            count += 1
            del line
        _, top = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        return count, top

    fill(10_000, 0)
    small_count, small_peak = await peak()
    fill(100_000, 10_000)
    big_count, big_peak = await peak()
    assert (small_count, big_count) == (10_002, 100_002)
    assert big_peak < small_peak * 1.5, (small_peak, big_peak)


def test_cli_round_trip_and_failed_write_leaves_no_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MODEL_EMBEDDING_PROVIDER", "hash")
    runner = CliRunner()
    a, b = tmp_path / "a.db", tmp_path / "b.db"
    seed(facade(a), "app", "u1", ["peanuts", "trains"])
    out = tmp_path / "out.jsonl"
    result = runner.invoke(
        app, ["ltm", "export", "-u", "u1", "--vectors", "-o", str(out)], env={"LONG_TERM_MEMORY_LOCAL_PATH": str(a)}
    )
    assert result.exit_code == 0, result.stderr
    assert "exported 2 memories" in result.stderr
    assert len(out.read_text().splitlines()) == 3
    plain = tmp_path / "plain.jsonl"
    result = runner.invoke(  # --json with -o: the report on stdout, the data in the file
        app, ["ltm", "export", "-u", "u1", "-o", str(plain), "--json"], env={"LONG_TERM_MEMORY_LOCAL_PATH": str(a)}
    )
    assert result.exit_code == 0 and json.loads(result.stdout) == {"output": str(plain), "memories": 2}
    assert len(plain.read_text().splitlines()) == 3
    result = runner.invoke(app, ["ltm", "import", str(out), "--dry-run"], env={"LONG_TERM_MEMORY_LOCAL_PATH": str(b)})
    assert result.exit_code == 0, result.stderr
    assert not b.exists(), "a dry run created the target store"
    result = runner.invoke(app, ["--json", "ltm", "import", str(out)], env={"LONG_TERM_MEMORY_LOCAL_PATH": str(b)})
    assert result.exit_code == 0, result.stderr
    report = json.loads(result.stdout)
    assert (report["read"], report["saved"], report["reused_vectors"]) == (2, 2, 2)

    # A failure part-way: the old file stays as it was and no temporary file is left.
    async def broken(self: Any, user_id: str, **_: Any) -> AsyncIterator[list[MemoryRecord]]:
        yield [memory("x", user_id)]
        raise OSError("disk gone")

    monkeypatch.setattr(LocalBackend, "iter_memories", broken)
    before = out.read_text()
    result = runner.invoke(
        app, ["ltm", "export", "-u", "u1", "-o", str(out)], env={"LONG_TERM_MEMORY_LOCAL_PATH": str(a)}
    )
    assert result.exit_code == 1
    assert out.read_text() == before
    assert not [p.name for p in tmp_path.iterdir() if p.name.endswith(".part")]


def test_cli_usage_errors(tmp_path: Path) -> None:
    runner = CliRunner()
    result = runner.invoke(app, ["ltm", "export"])
    assert result.exit_code == 2 and "--user U or --all-users" in result.stderr
    result = runner.invoke(app, ["ltm", "export", "-u", "u", "-o", str(tmp_path / "nowhere" / "f.jsonl")])
    assert result.exit_code == 2 and "no such directory" in result.stderr
    result = runner.invoke(app, ["ltm", "import", str(tmp_path / "missing.jsonl")])
    assert result.exit_code == 2 and "no such file" in result.stderr
    result = runner.invoke(app, ["ltm", "copy", "--from-backend", "local", "--to-backend", "nope"])
    assert result.exit_code == 2 and "unknown backend 'nope'" in result.stderr


def test_a_backend_that_cannot_list_exits_4_naming_it() -> None:
    class WriteOnly(MemoryBackend):
        name = "writeonly"
        capabilities = frozenset()

    register_backend("writeonly", WriteOnly)
    try:
        runner = CliRunner()
        result = runner.invoke(app, ["ltm", "export", "--all-users", "--backend", "writeonly"])
        assert result.exit_code == 4 and "writeonly backend cannot list" in result.stderr
        result = runner.invoke(app, ["ltm", "export", "-u", "u1", "--index", "i", "--backend", "writeonly"])
        assert result.exit_code == 4 and "writeonly backend cannot list memories" in result.stderr
    finally:
        _registered.pop("writeonly", None)


def test_copy_between_two_stores(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`ltm copy` from one backend to another: here two registered local stores on two files."""
    monkeypatch.setenv("MODEL_EMBEDDING_PROVIDER", "hash")
    a, b = tmp_path / "a.db", tmp_path / "b.db"
    seed(facade(a), "app", "u1", ["peanuts", "trains"])
    seed(facade(a), "app", "u2", ["jazz"])

    def at(path: Path) -> Any:
        return lambda index, **kw: LocalBackend(index, **{**kw, "local_path": str(path)})

    register_backend("store_a", at(a))
    register_backend("store_b", at(b))
    try:
        runner = CliRunner()
        args = ["--json", "ltm", "copy", "--from-backend", "store_a", "--to-backend", "store_b"]
        result = runner.invoke(app, args)
        assert result.exit_code == 0, result.stderr
        assert json.loads(result.stdout)["saved"] == 3
        result = runner.invoke(app, [*args, "--user", "u1"])
        assert json.loads(result.stdout)["duplicates"] == 2
        copied = LocalBackend("app", embedder_factory=lambda _m: HashEmbedder(64), local_path=str(b))
        assert len(asyncio.run(copied.list_memories("u2"))) == 1
    finally:
        _registered.pop("store_a", None)
        _registered.pop("store_b", None)


async def test_vectors_as_plain_numbers_are_read_too(tmp_path: Path) -> None:
    """A hand-made or script-made file may give vectors as lists of numbers instead of base64."""
    import base64

    src = facade(tmp_path / "a.db")
    await aseed(src, "app", "u1", ["peanuts", "trains"])
    lines = await collect(src, ExportScope(user_id="u1"), vectors=True)
    for line in lines[1:]:
        packed = np.frombuffer(base64.b64decode(line.pop("vectors_b64")), dtype="<f4")
        line["vectors"] = packed.reshape(-1, line["dimension"]).tolist()
    file = tmp_path / "plain.jsonl"
    write(file, lines)
    counting = CountingHash(384)
    counting.name = "hash-v1-384"
    summary = await import_file(facade(tmp_path / "b.db", counting), file)
    assert (summary.saved, summary.reused_vectors, counting.embedded) == (2, 2, 0)
    again = await collect(facade(tmp_path / "b.db"), ExportScope(user_id="u1"), vectors=True)
    assert sorted(x["vectors_b64"] for x in again[1:]) == sorted(
        base64.b64encode(np.asarray(x["vectors"], dtype="<f4").tobytes()).decode() for x in lines[1:]
    )


def test_backend_options_complete_backend_names() -> None:
    from veadk_mem.cli.completion import script
    from veadk_mem.cli.docs import root_command

    bash = script("bash", root_command())
    for option in ("ltm copy --from-backend", "ltm copy --to-backend", "ltm import --backend", "ltm export -b"):
        line = next(x for x in bash.splitlines() if x.strip().startswith(f'" {option}")'))
        assert "redis" in line and "opensearch" in line and "local" in line


# --- between real stores: Redis 8 + RediSearch, the OpenSearch contract server ----------------

ROUND_FIELDS = ("text", "user_id", "app_name", "index", "session_id", "event_id", "author", "content_hash")


def _cli(env: dict[str, str], *args: str) -> Any:
    result = CliRunner().invoke(app, list(args), env={"MODEL_EMBEDDING_PROVIDER": "hash", **env})
    assert result.exit_code == 0, result.stderr
    return result


def _lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(x) for x in path.read_text().splitlines()]


@pytest.mark.redis
def test_local_to_redis_to_local_with_veadks_layout(
    redis_stack: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """local -> file -> Redis (vectors reused) -> llama-index finds it -> file -> another local store."""
    import uuid

    import llama_venv
    import test_ltm_redis

    llama_venv.python()  # VeADK's reader runs there; a loud skip when it is missing
    # VeADK's reader with the embedder the CLI uses here (the hash embedder at 384-d).
    monkeypatch.setattr(test_ltm_redis, "DIM", 384)
    monkeypatch.setattr(test_ltm_redis, "HASH", HashEmbedder(384))

    index = f"vmemcopy{uuid.uuid4().hex[:8]}"
    src = tmp_path / "src.db"
    texts = ["I am allergic to peanuts", "my favourite city is Lisbon", "I run every morning"]
    seed(facade(src), index, "u1", texts)
    seed(facade(src), index, "u2", ["jazz on Sundays"])
    local = {"LONG_TERM_MEMORY_LOCAL_PATH": str(src)}
    redis = {"LONG_TERM_MEMORY_BACKEND": "redis", "DATABASE_REDIS_URL": redis_stack}
    first = tmp_path / "local.jsonl"
    _cli(local, "ltm", "export", "--all-users", "--index", index, "--vectors", "-o", str(first))
    report = json.loads(_cli(redis, "--json", "ltm", "import", str(first)).stdout)
    assert (report["saved"], report["reused_vectors"], report["reembedded"]) == (4, 4, 0)
    again = json.loads(_cli(redis, "--json", "ltm", "import", str(first)).stdout)
    assert (again["saved"], again["duplicates"]) == (0, 4)

    # VeADK's own reader (llama-index's RedisVectorStore with VeADK's schema) finds them.
    hits = test_ltm_redis._veadk_search(redis_stack, index, "u1", "peanuts allergy", 3)
    assert any("allergic to peanuts" in h for h in hits)

    back = tmp_path / "redis.jsonl"
    _cli(redis, "ltm", "export", "--all-users", "--index", index, "-o", str(back))
    dst = tmp_path / "dst.db"
    _cli({"LONG_TERM_MEMORY_LOCAL_PATH": str(dst)}, "ltm", "import", str(back))
    final = tmp_path / "final.jsonl"
    _cli({"LONG_TERM_MEMORY_LOCAL_PATH": str(dst)}, "ltm", "export", "--all-users", "--index", index, "-o", str(final))

    def key(line: dict[str, Any]) -> tuple[Any, ...]:
        return tuple(line[f] for f in ROUND_FIELDS)

    assert sorted(map(key, _lines(first)[1:])) == sorted(map(key, _lines(final)[1:]))


@pytest.mark.contract
def test_local_to_opensearch_contract_server_and_back(tmp_path: Path) -> None:
    import opensearch_server

    server = opensearch_server.start(auth=("admin", "Secret-pw-1"))
    try:
        src = tmp_path / "src.db"
        seed(facade(src), "shop", "u1", ["I am allergic to peanuts", "send invoices by email"])
        first = tmp_path / "local.jsonl"
        _cli({"LONG_TERM_MEMORY_LOCAL_PATH": str(src)}, "ltm", "export", "-u", "u1", "--vectors", "-o", str(first))
        target = {
            "LONG_TERM_MEMORY_BACKEND": "opensearch",
            "DATABASE_OPENSEARCH_HOST": "127.0.0.1",
            "DATABASE_OPENSEARCH_PORT": str(server.port),
            "DATABASE_OPENSEARCH_USERNAME": "admin",
            "DATABASE_OPENSEARCH_PASSWORD": "Secret-pw-1",
            "DATABASE_OPENSEARCH_USE_SSL": "false",
        }
        report = json.loads(_cli(target, "--json", "ltm", "import", str(first)).stdout)
        assert report["saved"] == 2 and report["failed"] == 0
        found = json.loads(_cli(target, "--json", "ltm", "search", "peanuts", "-u", "u1", "--app", "shop").stdout)
        assert "allergic to peanuts" in json.dumps(found[0])
        back = tmp_path / "os.jsonl"
        _cli(target, "ltm", "export", "-u", "u1", "--index", "shop", "-o", str(back))
        assert sorted(x["content_hash"] for x in _lines(back)[1:]) == sorted(
            x["content_hash"] for x in _lines(first)[1:]
        )
    finally:
        server.stop()


def test_empty_db_url_is_refused_by_every_command_that_takes_it() -> None:
    runner = CliRunner()
    for args in (["doctor"], ["config", "show"], ["session", "list"], ["ltm", "save", "--from-store", "a", "u", "s"]):
        result = runner.invoke(app, [*args, "--db-url", ""])
        assert result.exit_code == 2 and "--db-url: empty" in result.stderr, args
    result = runner.invoke(app, ["ltm", "copy", "--from-backend", "nope", "--to-backend", "local"])
    assert result.exit_code == 2 and "--from-backend: unknown backend 'nope'" in result.stderr


def test_an_index_the_target_refuses_stores_nothing(tmp_path: Path) -> None:
    lines = [
        {"kind": "header", "format": "vmem-ltm", "version": 1},
        {"text": "first", "user_id": "u", "index": "fine"},
        {"text": "second", "user_id": "u", "index": "x" * 300},  # over the local backend's 255
    ]
    file = tmp_path / "f.jsonl"
    write(file, lines)
    dst = tmp_path / "b.db"
    result = CliRunner().invoke(
        app,
        ["ltm", "import", str(file)],
        env={"LONG_TERM_MEMORY_LOCAL_PATH": str(dst), "MODEL_EMBEDDING_PROVIDER": "hash"},
    )
    assert result.exit_code == 2 and "invalid local index name" in result.stderr
    assert not dst.exists()
