"""The store goes away in the middle of `vmem ltm import` and of `vmem ltm save`, for every backend.

One contract for all seven stores (DESIGN.md "Failure, files, settings"): the command stops
at the first failure with one error line on stderr, exits 1, and the `saved` it reports is
what the store holds afterwards (asked of the store itself). The stores are the real ones
where they run here (Redis 7 on 127.0.0.1:6379, sqlite) and the local servers of the
others speaking their documented protocol; "goes away" is tests/store_proxy.py switching
off between two requests once the store holds K records (connections reset, then
refused), or, for the local store, sqlite's own "database or disk is full".
"""

from __future__ import annotations

import json
import sqlite3
import uuid
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from store_proxy import StoreProxy
from typer.testing import CliRunner

from veadk_mem.cli.app import app
from veadk_mem.ltm.base import LongTermMemoryBackend

pytestmark = pytest.mark.contract
USER = "lost-user"


@dataclass
class Store:
    """A backend's environment for the CLI, how many memories it holds, and its switch."""

    env: dict[str, str]
    held: Callable[[], int]
    go_away_after: Callable[[int], None]  # the store holds K records: from the next request on, it is gone
    index: str
    big: int = 1200  # memories an import sends (several batches of 500)


def _local(stack: ExitStack, tmp_path: Path, request: pytest.FixtureRequest) -> Store:
    from veadk_mem.ltm.backends import local

    path = tmp_path / f"ltm-{uuid.uuid4().hex[:6]}.db"
    conn = local.connect(str(path))  # the connection the in-process CLI will use

    def held() -> int:
        with sqlite3.connect(path) as fresh:
            return int(fresh.execute("SELECT count(*) FROM memories").fetchone()[0])

    def go_away_after(k: int) -> None:
        # room for about 1.5 k memories (a 384-d vector, the text, its keyword row), then sqlite
        # answers "database or disk is full": a save is one transaction, so k of them fit
        pages = int(conn.execute("PRAGMA page_count").fetchone()[0])
        conn.execute(f"PRAGMA max_page_count = {pages + int(1.5 * k * (384 * 4 + 500) / 4096) + 2}")

    return Store({"LONG_TERM_MEMORY_LOCAL_PATH": str(path)}, held, go_away_after, "vmemlost")


def _redis(stack: ExitStack, tmp_path: Path, request: pytest.FixtureRequest) -> Store:
    import redis

    prefix = request.getfixturevalue("redis_prefix")
    direct = redis.Redis(host="127.0.0.1", port=6379)
    stack.callback(direct.close)
    proxy = StoreProxy(6379).start()
    stack.callback(proxy.stop)

    def held() -> int:
        return sum(1 for _ in direct.scan_iter(match=f"veadk-ltm/{prefix}/{USER}_*", count=1000))

    env = {"LONG_TERM_MEMORY_BACKEND": "redis", "DATABASE_REDIS_URL": f"redis://127.0.0.1:{proxy.port}/0"}
    return Store(env, held, lambda k: proxy.cut_when(lambda: held() >= k), prefix)


def _opensearch(stack: ExitStack, tmp_path: Path, request: pytest.FixtureRequest) -> Store:
    import opensearch_server

    server = opensearch_server.start()
    stack.callback(server.stop)
    proxy = StoreProxy(server.port).start()
    stack.callback(proxy.stop)

    def held() -> int:
        with server.cluster.lock:
            return sum(len(i["docs"]) for i in server.cluster.indices.values())

    env = {
        "LONG_TERM_MEMORY_BACKEND": "opensearch",
        "DATABASE_OPENSEARCH_HOST": "127.0.0.1",
        "DATABASE_OPENSEARCH_PORT": str(proxy.port),
        "DATABASE_OPENSEARCH_USE_SSL": "false",
    }
    return Store(env, held, lambda k: proxy.cut_when(lambda: held() >= k), "vmemlost")


def _viking(stack: ExitStack, tmp_path: Path, request: pytest.FixtureRequest) -> Store:
    from hosted_servers import AK, SK, VikingMemoryServer

    server = VikingMemoryServer().start()
    stack.callback(server.stop)
    proxy = StoreProxy(server.port).start()
    stack.callback(proxy.stop)

    def held() -> int:
        return sum(1 for m in list(server.memories.values()) if m["memory_type"] == "sys_event_v1")

    env = {
        "LONG_TERM_MEMORY_BACKEND": "viking",
        "DATABASE_VIKINGMEM_BASE_URL": f"http://127.0.0.1:{proxy.port}",
        "VOLCENGINE_ACCESS_KEY": AK,
        "VOLCENGINE_SECRET_KEY": SK,
    }
    return Store(env, held, lambda k: proxy.cut_when(lambda: held() >= k), "vmemlost", big=120)


def _tos_context(stack: ExitStack, tmp_path: Path, request: pytest.FixtureRequest) -> Store:
    from hosted_servers import ACCOUNT, AK, SK, TosContextServer

    server = TosContextServer().start()
    stack.callback(server.stop)
    proxy = StoreProxy(server.port).start()
    stack.callback(proxy.stop)
    mp = request.getfixturevalue("monkeypatch")
    for name in ("NO_PROXY", "no_proxy"):
        mp.delenv(name, raising=False)

    def held() -> int:
        return len(server.memories)

    env = {
        "LONG_TERM_MEMORY_BACKEND": "tos_context",
        "HTTP_PROXY": f"http://127.0.0.1:{proxy.port}",
        "http_proxy": f"http://127.0.0.1:{proxy.port}",
        "DATABASE_TOS_CONTEXT_ACCOUNT_ID": ACCOUNT,
        "DATABASE_TOS_CONTEXT_CONTROL_ENDPOINT": "http://tos-control.test",
        "VOLCENGINE_ACCESS_KEY": AK,
        "VOLCENGINE_SECRET_KEY": SK,
    }
    return Store(env, held, lambda k: proxy.cut_when(lambda: held() >= k), "vmem-lost")


def _mem0(stack: ExitStack, tmp_path: Path, request: pytest.FixtureRequest) -> Store:
    from mem0_server import Mem0Server

    server = stack.enter_context(Mem0Server("m0-lost-key"))
    port = int(server.url.rsplit(":", 1)[1])
    proxy = StoreProxy(port).start()
    stack.callback(proxy.stop)

    def held() -> int:
        with server.state.lock:
            return len(server.state.memories)

    env = {
        "LONG_TERM_MEMORY_BACKEND": "mem0",
        "DATABASE_MEM0_API_KEY": "m0-lost-key",
        "DATABASE_MEM0_BASE_URL": f"http://127.0.0.1:{proxy.port}",
        "DATABASE_MEM0_INFER": "false",
    }
    return Store(env, held, lambda k: proxy.cut_when(lambda: held() >= k), "default_app", big=120)


def _openviking(stack: ExitStack, tmp_path: Path, request: pytest.FixtureRequest) -> Store:
    from openviking_server import OpenvikingServer

    server = stack.enter_context(OpenvikingServer({"ov-lost-key": "alice"}))
    port = int(server.url.rsplit(":", 1)[1])
    proxy = StoreProxy(port).start()
    stack.callback(proxy.stop)

    def held() -> int:  # what the server extracted memories from: the committed messages
        with server.state.lock:
            return sum(s["total_message_count"] - len(s["messages"]) for s in server.state.sessions.values())

    env = {
        "LONG_TERM_MEMORY_BACKEND": "openviking",
        "DATABASE_OPENVIKING_URL": f"http://127.0.0.1:{proxy.port}",
        "DATABASE_OPENVIKING_API_KEY": "ov-lost-key",
        "DATABASE_OPENVIKING_USER_ID": "alice",
    }
    return Store(env, held, lambda k: proxy.cut_when(lambda: held() >= k), "vmemlost", big=120)


SEVEN = (_local, _redis, _opensearch, _viking, _tos_context, _mem0, _openviking)
STORES = {f.__name__.removeprefix("_"): f for f in SEVEN}


@pytest.fixture(params=list(STORES), ids=list(STORES))
def store(request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Store]:
    monkeypatch.setattr(LongTermMemoryBackend, "retry_delays", (0.01, 0.01, 0.01))  # the policy, briefly
    if request.param == "openviking":
        from veadk_mem.ltm.backends.openviking import OpenvikingBackend

        monkeypatch.setattr(OpenvikingBackend, "poll_interval", 0.01)
    with ExitStack() as stack:
        yield STORES[request.param](stack, tmp_path, request)


def _cli(store: Store, *args: str) -> tuple[int, Any, str]:
    env = {"MODEL_EMBEDDING_PROVIDER": "hash", "LONG_TERM_MEMORY_INDEX": store.index, **store.env}
    result = CliRunner().invoke(app, ["--json", *args], env=env)
    report = json.loads(result.stdout) if result.stdout.strip() else None
    return result.exit_code, report, result.stderr


def _memory(n: int, session: str) -> str:
    return json.dumps({"role": "user", "parts": [{"text": f"memory number {n}: I like city {n * 7919 % 10007}"}]})


def _export(path: Path, count: int) -> Path:
    lines = [{"kind": "header", "format": "vmem-ltm", "version": 1, "backend": "local"}]
    for n in range(count):
        session = f"s{n // 10}"
        lines.append({"kind": "memory", "text": _memory(n, session), "user_id": USER, "session_id": session})
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


def _sessions(path: Path, sessions: int, events: int) -> Path:
    with path.open("w") as out:
        for s in range(sessions):
            evs = [
                {
                    "id": f"e{s}-{e}",
                    "author": "user",
                    "invocationId": f"i{s}-{e}",
                    "timestamp": 1_700_000_000 + s * 100 + e,
                    "content": {"role": "user", "parts": [{"text": f"session {s} fact {e}: I like city {s * 31 + e}"}]},
                }
                for e in range(events)
            ]
            out.write(json.dumps({"id": f"sess-{s}", "appName": "shop", "userId": USER, "events": evs}) + "\n")
    return path


def _one_error_line(err: str) -> str:
    errors = [line for line in err.splitlines() if line.startswith("vmem: error:")]
    assert len(errors) == 1, err
    assert "Traceback" not in err
    return errors[0]


def test_the_store_going_away_mid_import_stops_it_and_saved_is_what_the_store_holds(
    store: Store, tmp_path: Path
) -> None:
    source = _export(tmp_path / "export.jsonl", store.big)
    k = 500 if store.big > 500 else 50
    store.go_away_after(k)
    code, report, err = _cli(store, "ltm", "import", str(source))
    line = _one_error_line(err)
    assert code == 1, err
    assert report is not None and report["stopped"] is True, report
    held = store.held()
    assert report["saved"] == held, (report, held, line)
    assert 0 < held < store.big, (held, line)


def test_the_store_going_away_mid_save_stops_it_and_saved_is_what_the_store_holds(store: Store, tmp_path: Path) -> None:
    source = _sessions(tmp_path / "sessions.jsonl", sessions=12, events=10)
    store.go_away_after(30)
    code, report, err = _cli(store, "ltm", "save", str(source))
    line = _one_error_line(err)
    assert code == 1, err
    assert report is not None and str(report["aborted"]).startswith("stopped after"), report
    held = store.held()
    assert report["totals"]["saved"] == held, (report["totals"], held, line)
    assert 0 < held < 120, (held, line)
