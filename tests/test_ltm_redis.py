"""The redis backend on a real Redis 8 + RediSearch, against VeADK's own writer and reader.

VeADK writes long-term memory through llama-index's `RedisVectorStore` with the schema
of `redis_backend.py`; these tests run that same code (same schema, same splitter, one
deterministic embedder for both sides) in its own venv (tests/llama_writer.py, run from
.venv-llama) and check that each side finds what the other saved. The search-less
fallback runs on the machine's plain Redis 7 (db 13).

redis-py answers raw commands in RESP2 or RESP3 (redis-py 8's default): the backend's
tests run with a client of each protocol (`?protocol=2|3` in the URL).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from typing import Any

import llama_venv
import pytest
from typer.testing import CliRunner

from veadk_mem.config import load_settings
from veadk_mem.embedding.hash import HashEmbedder
from veadk_mem.errors import BadInput, NotFound, StoreError
from veadk_mem.ltm.backends.redis import RedisBackend, index_name
from veadk_mem.ltm.base import MemoryRecord
from veadk_mem.ltm.facade import LongTermMemory

pytestmark = pytest.mark.redis
DIM = 64
HASH = HashEmbedder(dim=DIM)
FALLBACK_DB = 13


def _settings(url: str) -> Any:
    return load_settings(environ={"DATABASE_REDIS_URL": url, "LONG_TERM_MEMORY_BACKEND": "redis"}).settings


def _backend(url: str, index: str, embedder: Any = HASH) -> RedisBackend:
    return RedisBackend(index, settings=_settings(url), embedder_factory=lambda _model: embedder)


def _records(user: str, texts: list[str], session: str = "s1") -> list[MemoryRecord]:
    return [MemoryRecord(text=t, user_id=user, app_name="app", session_id=session) for t in texts]


@pytest.fixture
def index() -> str:
    return f"vmemtest{uuid.uuid4().hex[:10]}"


@pytest.fixture(params=[2, 3], ids=["resp2", "resp3"])
def stack(redis_stack: str, request: pytest.FixtureRequest) -> str:
    """The RediSearch server's URL with the reply protocol the backend's client speaks."""
    return f"{redis_stack}?protocol={request.param}"


@pytest.fixture
def raw(redis_stack: str) -> Iterator[Any]:
    """A synchronous client on the RediSearch server, for looking at what was written (RESP2 replies)."""
    import redis

    client = redis.Redis.from_url(redis_stack, protocol=2)
    yield client
    client.close()


MEMORIES = [
    '{"role": "user", "parts": [{"text": "I am allergic to peanuts"}]}',
    '{"role": "user", "parts": [{"text": "my favourite city is Lisbon"}]}',
    '{"role": "user", "parts": [{"text": "I run every morning before work"}]}',
]


# --- llama-index, exactly as VeADK's redis_backend.py drives it (in .venv-llama) -----------


def _embed(texts: list[str]) -> Any:
    return HASH.embed(texts).tolist()


def _plain(url: str) -> str:
    """The URL without a query: the reference writer's redis-py speaks its own default protocol."""
    return url.split("?", 1)[0]


def _veadk_save(url: str, index: str, user: str, texts: list[str]) -> None:
    """VeADK's add: llama-index's RedisVectorStore with VeADK's schema, split and inserted."""
    request = {"store": "redis", "url": _plain(url), "name": index_name(index, user), "dim": DIM}
    llama_venv.run({**request, "op": "save", "texts": texts}, _embed)


def _veadk_search(url: str, index: str, user: str, query: str, top_k: int) -> list[str]:
    """VeADK's search: the same index's retriever, top_k nodes' texts."""
    request = {"store": "redis", "url": _plain(url), "name": index_name(index, user), "dim": DIM}
    return llama_venv.run({**request, "op": "search", "query": query, "top_k": top_k}, _embed)  # type: ignore[no-any-return]


@pytest.fixture(scope="module")
def llama() -> None:
    """The llama-index reference venv, or a loud skip naming how to make it."""
    llama_venv.python()


# --- the backend on Redis 8 + RediSearch ------------------------------------------------


async def test_save_search_list_delete(stack: str, index: str, raw: Any) -> None:
    backend = _backend(stack, index)
    try:
        ids = await backend.save("alice", _records("alice", MEMORIES))
        assert len(ids) == 3
        hits = await backend.search("alice", "peanuts allergy", 2)
        assert isinstance(hits[0], MemoryRecord) and "peanuts" in hits[0].text
        assert hits[0].score is not None and 0 < hits[0].score <= 1.0001
        listed = await backend.list_memories("alice")
        assert sorted(r.text for r in listed) == sorted(MEMORIES)
        assert {r.session_id for r in listed} == {"s1"}
        assert await backend.delete_memories("alice", [ids[0]]) == 1
        assert len(await backend.list_memories("alice")) == 2
        assert raw.execute_command("FT.INFO", index_name(index, "alice"))  # the index stays
    finally:
        await backend.close()


async def test_index_and_hashes_have_veadks_layout(redis_stack: str, index: str, raw: Any, llama: None) -> None:
    backend = _backend(redis_stack, index)
    try:
        await backend.save("bob", _records("bob", MEMORIES[:1]))
    finally:
        await backend.close()
    _veadk_save(redis_stack, index, "carol", MEMORIES[:1])

    def schema(user: str) -> Any:
        info = raw.execute_command("FT.INFO", index_name(index, user))
        pairs = dict(zip(info[::2], info[1::2], strict=False))
        definition = dict(zip(pairs[b"index_definition"][::2], pairs[b"index_definition"][1::2], strict=False))
        attributes = [[x for x in a if x not in (index_name(index, user).encode(),)] for a in pairs[b"attributes"]]
        return definition[b"key_type"], definition[b"prefixes"][0].decode().replace(user, "U"), attributes

    assert schema("bob") == schema("carol")  # the same index as llama-index builds from VeADK's schema
    ours = raw.hgetall(raw.keys(f"{index_name(index, 'bob')}_*")[0])
    theirs = raw.hgetall(raw.keys(f"{index_name(index, 'carol')}_*")[0])
    assert set(theirs) <= set(ours)  # every field VeADK writes, and only llama-index's own besides
    assert ours[b"text"] == MEMORIES[0].encode() and len(ours[b"vector"]) == 4 * DIM
    key = raw.keys(f"{index_name(index, 'bob')}_*")[0].decode()
    assert key == f"{index_name(index, 'bob')}_{ours[b'id'].decode()}"


async def test_vmem_reads_what_veadk_wrote(stack: str, index: str, llama: None) -> None:
    long_text = " ".join(f"Sentence number {i} talks about gardening and tomatoes." for i in range(120))
    _veadk_save(stack, index, "dave", [*MEMORIES, long_text])
    backend = _backend(stack, index)
    try:
        hits = await backend.search("dave", "favourite city Lisbon", 1)
        assert [h.text for h in hits] == [MEMORIES[1]]  # type: ignore[union-attr]
        listed = await backend.list_memories("dave")
        assert len(listed) == 4  # the long memory is several hashes but one memory
        assert long_text in [r.text for r in listed]  # rebuilt from its chunks
        assert await backend.existing_hashes("dave", [r.content_hash for r in _records("dave", MEMORIES)]) == {
            r.content_hash for r in _records("dave", MEMORIES)
        }
        long_id = next(r.id for r in listed if r.text == long_text)
        assert await backend.delete_memories("dave", [long_id]) == 1
        assert len(await backend.list_memories("dave")) == 3
    finally:
        await backend.close()


async def test_veadk_finds_what_vmem_saved(stack: str, index: str, llama: None) -> None:
    backend = _backend(stack, index)
    try:
        await backend.save("erin", _records("erin", MEMORIES))
    finally:
        await backend.close()
    assert _veadk_search(stack, index, "erin", "morning run before work", 1) == [MEMORIES[2]]


async def test_a_user_never_sees_a_user_whose_id_extends_theirs(stack: str, index: str) -> None:
    # VeADK's index of "u" has prefix veadk-ltm/{index}/u, which also covers "u2"'s keys.
    backend = _backend(stack, index)
    try:
        await backend.save("u2", _records("u2", ["u2 secret: peanuts everywhere"]))
        await backend.save("u", _records("u", ["u likes peanuts"]))
        assert [h.text for h in await backend.search("u", "peanuts", 5)] == ["u likes peanuts"]  # type: ignore[union-attr]
        # u2's memory is the nearest: the KNN is widened past it, not answered empty.
        nearest = await backend.search("u", "u2 secret: peanuts everywhere", 1)
        assert [h.text for h in nearest] == ["u likes peanuts"]  # type: ignore[union-attr]
        assert [r.text for r in await backend.list_memories("u")] == ["u likes peanuts"]
        known = await backend.known_indexes("u")  # (the server is shared: other tests have users "u" too)
        assert [i for i in known if index in i] == [index]
    finally:
        await backend.close()


async def test_facade_saves_are_idempotent(stack: str, index: str) -> None:
    from veadk_mem.events import Session

    session = Session.model_validate(
        {
            "id": "s1",
            "appName": index,
            "userId": "frank",
            "events": [
                {"id": f"e{i}", "author": "user", "content": {"role": "user", "parts": [{"text": t}]}}
                for i, t in enumerate(["I like tea", "I like tea", "I have a dog"])
            ],
        }
    )
    ltm = LongTermMemory(backend="redis", settings=_settings(stack), embedder=HASH, app_name=index)
    try:
        first = await ltm.add_session_to_memory(session)
        second = await ltm.add_session_to_memory(session)
    finally:
        await ltm.close()
    assert (first.saved, first.duplicates) == (2, 1)
    assert (second.saved, second.duplicates) == (0, 3)


async def test_another_dimension_is_refused_naming_both(stack: str, index: str) -> None:
    backend = _backend(stack, index)
    other = _backend(stack, index, HashEmbedder(dim=32))
    try:
        await backend.save("gina", _records("gina", MEMORIES[:1]))
        with pytest.raises(BadInput) as info:
            await other.save("gina", _records("gina", MEMORIES[1:2]))
        assert "64-d vectors" in info.value.message and "hash-v1-32 (32-d)" in info.value.message
        with pytest.raises(BadInput, match="64-d vectors"):
            await other.search("gina", "x", 3)
    finally:
        await backend.close()
        await other.close()


async def test_a_failure_mid_save_says_what_was_stored_and_a_rerun_stores_the_rest(
    redis_stack: str, index: str, raw: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    import veadk_mem.ltm.backends.redis as module

    monkeypatch.setattr(module, "BATCH", 2)

    class Breaking(HashEmbedder):
        calls = 0

        def embed_batch(self, texts: list[str]) -> Any:
            Breaking.calls += 1
            if Breaking.calls == 2:  # the server starts refusing us between two batches
                raw.execute_command("CONFIG", "SET", "requirepass", "now-locked")
                raw.execute_command("CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes")
            return super().embed_batch(texts)

    texts = [f"memory number {i}" for i in range(5)]
    backend = _backend(redis_stack, index, Breaking(dim=DIM))
    try:
        with pytest.raises(StoreError) as info:
            await backend.save("hana", _records("hana", texts))
    finally:
        await backend.close()
        raw.execute_command("AUTH", "now-locked")
        raw.execute_command("CONFIG", "SET", "requirepass", "")
    assert "2 of 5 memories were stored, 3 were not (re-run to store the rest)" in info.value.message
    assert "now-locked" not in info.value.message
    ltm = LongTermMemory(backend="redis", settings=_settings(redis_stack), embedder=HASH, index=index)
    try:
        records = _records("hana", texts)
        new = await ltm.new_records("hana", records, index)
        assert len(new) == 3
        await ltm.backend_for(index=index).save("hana", new)
        assert sorted(r.text for r in await ltm.backend_for(index=index).list_memories("hana")) == texts
    finally:
        await ltm.close()


# --- the CLI: one event loop per command, faults as one line -------------------------------


def _cli(runner: CliRunner, env: dict[str, str], *args: str, input: str | None = None) -> tuple[int, str, str]:
    from veadk_mem.cli.app import app

    result = runner.invoke(app, list(args), env=env, input=input)
    return result.exit_code, result.stdout, result.stderr


def _session_file(tmp_path: Any, user: str, texts: list[str]) -> str:
    path = tmp_path / "s.json"
    events = [
        {"id": f"e{i}", "author": "user", "content": {"role": "user", "parts": [{"text": t}]}}
        for i, t in enumerate(texts)
    ]
    path.write_text(json.dumps({"id": "s1", "appName": "shop", "userId": user, "events": events}))
    return str(path)


def test_cli_save_search_delete_and_forget(stack: str, index: str, tmp_path: Any) -> None:
    runner = CliRunner()
    env = {
        "LONG_TERM_MEMORY_BACKEND": "redis",
        "LONG_TERM_MEMORY_INDEX": index,
        "DATABASE_REDIS_URL": stack,
        "MODEL_EMBEDDING_PROVIDER": "hash",
        "SHORT_TERM_MEMORY_BACKEND": "local",
    }
    source = _session_file(tmp_path, "ivan", ["I collect stamps", "I speak Finnish", "my cat is Tom"])
    code, _, err = _cli(runner, env, "ltm", "save", source)
    assert code == 0, err
    code, out, err = _cli(runner, env, "ltm", "search", "stamps", "--user", "ivan", "--json")
    assert code == 0, err
    assert "I collect stamps" in json.loads(out)[0]["content"]["parts"][0]["text"]
    code, out, _ = _cli(runner, env, "ltm", "list", "--user", "ivan", "--json")
    first = json.loads(out)[0]["id"]
    code, out, err = _cli(runner, env, "ltm", "delete", "--user", "ivan", "--id", first, "--yes", "--json")
    assert code == 0, err  # select and delete on one event loop: the client's connections stay valid
    assert json.loads(out)["deleted"] == 1
    code, out, err = _cli(runner, env, "forget", "ivan", "--yes", "--json")
    assert code == 0, err
    assert json.loads(out)["deleted"]["memories"] == 2
    code, out, _ = _cli(runner, env, "ltm", "list", "--user", "ivan", "--app", index, "--json")
    assert json.loads(out) == []


def test_cli_wrong_password_and_server_down_are_one_line(
    redis_stack: str, raw: Any, tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(RedisBackend, "retry_delays", (0.01,))  # a refused connection is retried, briefly here
    from redis_stack import free_port

    raw.execute_command("ACL", "SETUSER", "vmemtest", "on", ">right-password", "~*", "&*", "+@all")
    runner = CliRunner()
    base = {"LONG_TERM_MEMORY_BACKEND": "redis", "MODEL_EMBEDDING_PROVIDER": "hash"}
    port = redis_stack.rsplit(":", 1)[1].split("/")[0]
    try:
        env = {**base, "DATABASE_REDIS_URL": f"redis://vmemtest:wrong-password@127.0.0.1:{port}/0"}
        code, _, err = _cli(runner, env, "ltm", "list", "--user", "x", "--app", "a")
        assert code == 1 and "refused the username or password" in err
        assert "wrong-password" not in err and "Traceback" not in err and len(err.strip().splitlines()) <= 2
    finally:
        raw.execute_command("ACL", "DELUSER", "vmemtest")
    env = {**base, "DATABASE_REDIS_HOST": "127.0.0.1", "DATABASE_REDIS_PORT": str(free_port())}
    source = _session_file(tmp_path, "kim", ["I like jazz"])
    code, _, err = _cli(runner, env, "ltm", "save", source)
    assert code == 1 and "cannot reach redis at redis://127.0.0.1:" in err and "Traceback" not in err


def test_invalid_index_name_is_bad_input(redis_stack: str) -> None:
    with pytest.raises(BadInput, match=r"invalid redis index name 'my app': ' ' is not allowed"):
        _backend(redis_stack, "my app")


# --- plain Redis 7 without the search module ---------------------------------------------


@pytest.fixture(params=[2, 3], ids=["resp2", "resp3"])
def plain_redis(redis_prefix: str, request: pytest.FixtureRequest) -> Iterator[str]:
    """The machine's Redis 7 (no RediSearch), db 13, in either reply protocol; cleaned afterwards."""
    import redis

    client = redis.Redis(host="127.0.0.1", port=6379, db=FALLBACK_DB)
    try:
        client.execute_command("FT._LIST")
        pytest.skip("the machine's Redis has the search module: no fallback to test")
    except redis.ResponseError:
        pass
    yield f"redis://127.0.0.1:6379/{FALLBACK_DB}?protocol={request.param}"
    for key in client.scan_iter(f"*{redis_prefix}*"):
        client.delete(key)
    client.close()


async def test_without_search_module_save_list_delete_and_scan_search(plain_redis: str, redis_prefix: str) -> None:
    warnings: list[str] = []
    backend = _backend(plain_redis, redis_prefix)
    backend.warn = warnings.append
    try:
        ids = await backend.save("lee", _records("lee", MEMORIES))
        assert len(await backend.list_memories("lee")) == 3
        hits = await backend.search("lee", "allergic to peanuts", 1)
        assert [h.text for h in hits] == [MEMORIES[0]]  # type: ignore[union-attr]
        await backend.search("lee", "Lisbon", 1)
        assert len(warnings) == 1 and "no search module" in warnings[0]
        assert await backend.known_indexes("lee") == [redis_prefix]
        assert await backend.delete_memories("lee", ids) == 3
        assert await backend.list_memories("lee") == []
        health = await backend.health("lee")
        assert "search module: absent" in " ".join(health.notes) and health.version.startswith("redis ")
    finally:
        await backend.close()


async def test_health_reports_version_dimension_and_a_clash(stack: str, index: str) -> None:
    backend = _backend(stack, index)
    other = _backend(stack, index, HashEmbedder(dim=32))
    try:
        await backend.save("mo", _records("mo", MEMORIES))
        ok = await backend.health(None)
        assert ok.version.startswith("redis 8.") and ok.dimension == DIM and ok.problems == []
        assert ok.exists and "search module: present" in ok.notes
        assert (await backend.health("mo")).memories == 3
        clash = await other.health(None)
        assert clash.problems and "64-d" in clash.problems[0] and "32-d" in clash.problems[0]
    finally:
        await backend.close()
        await other.close()


# --- rediss:// (the wheel's redis-server has no TLS: a TLS-terminating proxy in front) -----


def _tls_proxy(target_port: int, cert: Any, key: Any) -> tuple[int, Any]:
    """Accept TLS on a free port and forward the plain bytes to `target_port`."""
    import contextlib
    import socket
    import ssl
    import threading

    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(str(cert), str(key))
    listener = socket.create_server(("127.0.0.1", 0))
    stop = threading.Event()

    def pump(src: Any, dst: Any) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for sock in (src, dst):
                with contextlib.suppress(OSError):
                    sock.close()

    def serve() -> None:
        listener.settimeout(0.2)
        while not stop.is_set():
            try:
                raw, _ = listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            try:
                client = context.wrap_socket(raw, server_side=True)
            except (ssl.SSLError, OSError):
                raw.close()
                continue
            upstream = socket.create_connection(("127.0.0.1", target_port))
            threading.Thread(target=pump, args=(client, upstream), daemon=True).start()
            threading.Thread(target=pump, args=(upstream, client), daemon=True).start()

    threading.Thread(target=serve, daemon=True).start()

    def close() -> None:
        stop.set()
        listener.close()

    return int(listener.getsockname()[1]), close


async def test_rediss_url_with_a_verified_certificate(redis_stack: str, index: str, tmp_path: Any) -> None:
    import opensearch_server

    cert, key = opensearch_server.self_signed(tmp_path)
    port = int(redis_stack.rsplit(":", 1)[1].split("/")[0])
    proxy_port, close = _tls_proxy(port, cert, key)
    try:
        verified = _backend(f"rediss://127.0.0.1:{proxy_port}/0?ssl_ca_certs={cert}", index)
        unverified = _backend(f"rediss://127.0.0.1:{proxy_port}/0", index)
        try:
            await verified.save("tls", _records("tls", MEMORIES[:1]))
            assert [r.text for r in await verified.list_memories("tls")] == MEMORIES[:1]
            with pytest.raises(StoreError, match=r"cannot reach redis at rediss://127\.0\.0\.1:\d+/0 .*certificate"):
                await unverified.list_memories("tls")
        finally:
            await verified.close()
            await unverified.close()
    finally:
        close()


def test_config_show_masks_the_redis_url_password() -> None:
    from veadk_mem.cli.app import app

    env = {"DATABASE_REDIS_URL": "rediss://vmem:url-secret-pw@cache.example:6380/2"}
    result = CliRunner().invoke(app, ["config", "show", "--json"], env=env)
    assert result.exit_code == 0 and "url-secret-pw" not in result.stdout
    assert "rediss://vmem:****@cache.example:6380/2" in result.stdout


def test_the_pool_internals_are_those_redis_wire_was_written_for() -> None:
    """redis_wire reaches into redis-py's pool and connection: a redis-py outside the versions it
    was written for (or one that renamed what it calls) fails here, before it fails a save."""
    import inspect
    import re
    import tomllib
    from importlib.metadata import version
    from pathlib import Path

    from redis.asyncio.connection import Connection, ConnectionPool

    from veadk_mem.ltm.backends import redis_wire

    low, high = redis_wire.WRITTEN_FOR
    installed = tuple(int(n) for n in re.findall(r"\d+", version("redis"))[:3])
    assert low <= installed < high, f"redis-py {version('redis')}: redis_wire was written for {low} to {high}"
    pyproject = tomllib.loads((Path(__file__).resolve().parents[1] / "pyproject.toml").read_text())
    [spec] = [d for d in pyproject["project"]["dependencies"] if d.startswith("redis>")]
    assert spec == f"redis>={'.'.join(map(str, low))},<{high[0]}"  # the pin says what the module was written for
    for name in redis_wire.POOL_CALLS:
        assert callable(getattr(ConnectionPool, name))
    for name in redis_wire.CONNECTION_CALLS:
        assert callable(getattr(Connection, name))
    assert "check_health" in inspect.signature(Connection.send_packed_command).parameters


async def test_ltm_edit_replaces_a_memory_veadks_reader_then_finds(stack: str, index: str, llama: None) -> None:
    """`ltm edit` on Redis (#42 item 5): the corrected text is what VeADK's own llama-index
    retriever returns; the old text is gone from the index; the source is kept."""
    from veadk_mem.ltm.edit import edit_memory
    from veadk_mem.ltm.provenance import Provenance

    backend = _backend(stack, index)
    records = _records("frank", MEMORIES)
    records[0].source = Provenance(app_name="app", user_id="frank", session_id="s1", event_ids=["e1"], policy="default")
    ltm = LongTermMemory(backend=backend)
    try:
        ids = await ltm.save_records("frank", records, index)
        wrong = ids[0]
        corrected = "I am allergic to hazelnuts, not peanuts"
        dry = await edit_memory(ltm, memory_id=wrong, text=corrected, user_id="frank", dry_run=True)
        assert dry.new_id == "" and len(await backend.list_memories("frank")) == 3
        done = await edit_memory(ltm, memory_id=wrong, text=corrected, user_id="frank")
        listed = {r.id: r for r in await backend.list_memories("frank")}
        assert wrong not in listed and done.new_id in listed and len(listed) == 3
        new = listed[done.new_id]
        assert new.text == json.dumps({"role": "user", "parts": [{"text": corrected}]})
        assert new.source is not None and (new.source.session_id, new.source.event_ids) == ("s1", ["e1"])
        with pytest.raises(NotFound):
            await edit_memory(ltm, memory_id=wrong, text="again", user_id="frank")
    finally:
        await ltm.close()
    found = _veadk_search(stack, index, "frank", "hazelnuts allergy", 3)
    assert found[0] == new.text and MEMORIES[0] not in found
