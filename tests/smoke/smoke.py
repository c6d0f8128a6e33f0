"""Smoke test of the installed wheel: the `vmem` a user gets, against real local servers.

`.ci/smoke` builds the wheel and installs it into one fresh venv per backend extra (build/smoke/
<extra>, no dev package); this driver then runs that venv's `vmem` as a subprocess, the way a user
does, for every long-term memory backend - `ltm save`, `ltm search` (the saved memory must come
back first), `ltm list`, `ltm export`, `ltm delete`, `doctor` - and for the session databases -
`session import/list/get/export`, `doctor`. Servers: Redis 8 with RediSearch (tests/redis_stack.py,
on a free port), the machine's plain Redis 7 at 6379, PostgreSQL, MariaDB, sqlite, and the
protocol stand-ins of the hosted backends (tests/*_server.py). Unit tests cannot see what this
sees: which versions a fresh install resolves, and whether an extra declares what its backend imports.

    python tests/smoke/smoke.py [--only NAME[,NAME]]   exit 1 when any check fails, naming each
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))
os.environ.setdefault("VMEM_REDIS8_VENV", str(ROOT / ".venv-redis8"))  # tests/redis_stack.py's Redis 8
VENVS = ROOT / "build" / "smoke"
EXAMPLES = ROOT / "docs" / "examples" / "sessions"
SESSION_FILE = EXAMPLES / "ltm_demo-session-1.json"
HISTORY = EXAMPLES / "ltm_demo-history.jsonl"
APP, USER = "ltm_demo", "user-42"
QUERY, EXPECTED = "peanuts allergic vegetarian", "peanuts"
CONFIG_PREFIXES = (
    "DATABASE_",
    "MODEL_",
    "VOLCENGINE_",
    "SHORT_TERM_MEMORY_",
    "LONG_TERM_MEMORY_",
    "VMEM_",
    "OPENVIKING_",
    "HTTP_PROXY",
    "http_proxy",
    "HTTPS_PROXY",
    "https_proxy",
    "NO_PROXY",
    "no_proxy",
)


class Failed(Exception):
    """One check failed; the message says which command and why."""


@dataclass
class Result:
    name: str
    failures: list[str] = field(default_factory=list)
    passed: int = 0


def vmem(extra: str, args: list[str], env: dict[str, str], home: Path, *, expect: int = 0) -> str:
    """Run the installed `vmem` of a smoke venv in a clean user environment; its stdout."""
    base = {k: v for k, v in os.environ.items() if not k.startswith(CONFIG_PREFIXES)}
    base.update(
        HOME=str(home),
        XDG_CONFIG_HOME=str(home / ".config"),
        XDG_DATA_HOME=str(home / ".data"),
        NO_COLOR="1",
        COLUMNS="200",
        PYTHONPATH="",
    )
    base.update(env)
    exe = VENVS / extra / "bin" / "vmem"
    done = subprocess.run([str(exe), *args], env=base, cwd=home, capture_output=True, text=True, timeout=300)
    if done.returncode != expect:
        tail = (done.stderr.strip() or done.stdout.strip())[-600:]
        raise Failed(f"`vmem {' '.join(args)}` exited {done.returncode}, not {expect}: {tail}")
    if "Traceback" in done.stderr:
        raise Failed(f"`vmem {' '.join(args)}` printed a traceback: {done.stderr[-600:]}")
    return done.stdout


def _text(item: dict[str, object]) -> str:
    return json.dumps(item.get("content"))


def ltm_checks(
    extra: str, env: dict[str, str], home: Path, *, delete_exit: int = 0
) -> Iterator[tuple[str, Callable[[], None]]]:
    """The long-term memory round trip, one named check at a time (each needs the ones before).

    delete_exit: 4 for a backend whose service has no delete call (DESIGN.md: not supported)."""
    state: dict[str, object] = {}
    env = {"SHORT_TERM_MEMORY_BACKEND": "local", **env}

    def save() -> None:
        out = json.loads(vmem(extra, ["ltm", "save", str(SESSION_FILE), "--json"], env, home))
        if out["totals"]["saved"] < 1 or out["totals"]["failed"]:
            raise Failed(f"ltm save stored {out['totals']}")

    def search() -> None:
        hits = json.loads(
            vmem(extra, ["ltm", "search", QUERY, "--user", USER, "--app", APP, "--top-k", "3", "--json"], env, home)
        )
        if not hits:
            raise Failed(f"ltm search {QUERY!r} found nothing after ltm save (exit 0)")
        if EXPECTED not in _text(hits[0]).lower():
            raise Failed(f"ltm search {QUERY!r}: the saved memory is not first: {_text(hits[0])[:200]}")
        state["id"] = hits[0]["id"]

    def listing() -> None:
        listed = json.loads(vmem(extra, ["ltm", "list", "--user", USER, "--app", APP, "--json"], env, home))
        if not any(EXPECTED in _text(m).lower() for m in listed):
            raise Failed(f"ltm list does not show the saved memory: {len(listed)} listed")
        state["count"] = len(listed)

    def export() -> None:
        target = home / f"export-{extra}.jsonl"
        vmem(extra, ["ltm", "export", "--user", USER, "--app", APP, "-o", str(target)], env, home)
        lines = [json.loads(line) for line in target.read_text().splitlines()]
        if (
            not lines
            or lines[0].get("kind") != "header"
            or not any(EXPECTED in str(m.get("text", "")).lower() for m in lines[1:])
        ):
            raise Failed(f"ltm export wrote {len(lines)} lines without the saved memory")

    def remove() -> None:
        args = ["ltm", "delete", "--user", USER, "--app", APP, "--id", str(state["id"]), "--yes", "--json"]
        vmem(extra, args, env, home, expect=delete_exit)
        listed = json.loads(vmem(extra, ["ltm", "list", "--user", USER, "--app", APP, "--json"], env, home))
        if delete_exit == 0 and any(m["id"] == state["id"] for m in listed):
            raise Failed("ltm delete: the deleted memory is still listed")
        if delete_exit != 0 and len(listed) != state["count"]:
            raise Failed(f"ltm delete exited {delete_exit} but changed the memories: {len(listed)} listed")

    def doctor() -> None:
        vmem(extra, ["doctor", "--json"], env, home)

    yield "save", save
    yield "search", search
    yield "list", listing
    yield "export", export
    yield "delete", remove
    yield "doctor", doctor


def session_checks(extra: str, url: str, home: Path) -> Iterator[tuple[str, Callable[[], None]]]:
    """The session database round trip: import the example history, list, get, export, doctor."""
    env: dict[str, str] = {}
    db = ["--db-url", url]
    state: dict[str, str] = {}

    def imported() -> None:
        out = json.loads(vmem(extra, ["session", "import", str(HISTORY), *db, "--json"], env, home))
        if out["sessions"] < 1:
            raise Failed(f"session import stored {out}")

    def listing() -> None:
        listed = json.loads(vmem(extra, ["session", "list", "--app", APP, *db, "--json"], env, home))
        mine = [s for s in listed if s["userId"] == USER]
        if not mine:
            raise Failed(f"session list shows no session of {USER}")
        state["id"] = mine[0]["id"]

    def get() -> None:
        sid = state["id"]
        got = json.loads(vmem(extra, ["session", "get", APP, USER, sid, *db, "--json"], env, home))
        if got["id"] != sid or not got["events"]:
            raise Failed(f"session get {sid}: {str(got)[:200]}")

    def export() -> None:
        target = home / "sessions.jsonl"
        vmem(extra, ["session", "export", "--app", APP, "-o", str(target), *db], env, home)
        if USER not in target.read_text():
            raise Failed("session export wrote no session of the user")

    def doctor() -> None:
        vmem(extra, ["doctor", *db, "--json"], env, home)

    yield "session import", imported
    yield "session list", listing
    yield "session get", get
    yield "session export", export
    yield "doctor", doctor


def run(result: Result, checks: Iterator[tuple[str, Callable[[], None]]]) -> None:
    """Run checks in order; the first failure stops the rest of this scenario (they build on it)."""
    for what, check in checks:
        try:
            check()
        except Failed as exc:
            result.failures.append(f"{what}: {exc}")
            return
        except Exception as exc:  # a broken answer (bad JSON, a missing key) is a failed check too
            result.failures.append(f"{what}: {type(exc).__name__}: {exc}")
            return
        result.passed += 1


# --- servers -------------------------------------------------------------------------------------


@contextlib.contextmanager
def postgres() -> Iterator[str]:
    import asyncpg

    name = f"vmem_smoke_{uuid.uuid4().hex[:10]}"

    async def admin(sql: str) -> None:
        conn = await asyncpg.connect(host="127.0.0.1", port=5432, user="postgres", database="postgres")
        try:
            await conn.execute(sql)
        finally:
            await conn.close()

    asyncio.run(admin(f'CREATE DATABASE "{name}"'))
    try:
        yield f"postgresql+asyncpg://postgres@127.0.0.1:5432/{name}"
    finally:
        asyncio.run(admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))


@contextlib.contextmanager
def mariadb() -> Iterator[str]:
    import pymysql

    name = f"vmem_smoke_{uuid.uuid4().hex[:10]}"

    def admin(sql: str) -> None:
        conn = pymysql.connect(host="127.0.0.1", port=3306, user="root", password="")
        try:
            with conn.cursor() as cur:
                cur.execute(sql)
            conn.commit()
        finally:
            conn.close()

    admin(f"CREATE DATABASE `{name}` CHARACTER SET utf8mb4")
    try:
        yield f"mysql+aiomysql://root@127.0.0.1:3306/{name}?charset=utf8mb4"
    finally:
        admin(f"DROP DATABASE IF EXISTS `{name}`")


@contextlib.contextmanager
def redis8() -> Iterator[str]:
    import redis_stack

    server = redis_stack.start()
    try:
        yield server.url
    finally:
        server.stop()


@contextlib.contextmanager
def plain_redis(index: str) -> Iterator[str]:
    """The machine's Redis 7 at 6379, db 12; this run's keys are removed afterwards."""
    yield "redis://127.0.0.1:6379/12"
    import redis

    client = redis.Redis(host="127.0.0.1", port=6379, db=12)
    for key in client.scan_iter(f"*{index}*"):
        client.delete(key)
    client.close()


def scenarios(home: Callable[[str], Path]) -> Iterator[tuple[str, Callable[[Result], None]]]:
    """(name, run it) for every backend and session database the wheel serves."""

    def local(result: Result) -> None:
        run(result, ltm_checks("local", {}, home("local")))

    def local_hash(result: Result) -> None:  # the core install: no model, the auto embedder falls back
        run(result, ltm_checks("core", {}, home("core-local")))

    def redis_search(result: Result) -> None:
        with redis8() as url:
            run(
                result,
                ltm_checks("core", {"LONG_TERM_MEMORY_BACKEND": "redis", "DATABASE_REDIS_URL": url}, home("redis8")),
            )

    def redis_plain(result: Result) -> None:
        index = f"smoke{uuid.uuid4().hex[:8]}"
        with plain_redis(index) as url:
            env = {"LONG_TERM_MEMORY_BACKEND": "redis", "DATABASE_REDIS_URL": url, "LONG_TERM_MEMORY_INDEX": index}
            run(result, ltm_checks("core", env, home("redis7")))

    def opensearch(result: Result) -> None:
        import opensearch_server

        server = opensearch_server.start(auth=("admin", "os-secret-pw"))
        try:
            env = {
                "LONG_TERM_MEMORY_BACKEND": "opensearch",
                "DATABASE_OPENSEARCH_HOST": "127.0.0.1",
                "DATABASE_OPENSEARCH_PORT": str(server.port),
                "DATABASE_OPENSEARCH_USERNAME": "admin",
                "DATABASE_OPENSEARCH_PASSWORD": "os-secret-pw",
                "DATABASE_OPENSEARCH_USE_SSL": "false",
            }
            run(result, ltm_checks("core", env, home("opensearch")))
        finally:
            server.stop()

    def mem0(result: Result) -> None:
        from mem0_server import Mem0Server

        with Mem0Server("m0-smoke-key") as server:
            env = {
                "LONG_TERM_MEMORY_BACKEND": "mem0",
                "DATABASE_MEM0_API_KEY": "m0-smoke-key",
                "DATABASE_MEM0_BASE_URL": server.url,
            }
            run(result, ltm_checks("mem0", env, home("mem0")))

    def openviking(result: Result) -> None:
        from openviking_server import OpenvikingServer

        with OpenvikingServer({"ov-smoke-key": USER}) as server:
            env = {
                "LONG_TERM_MEMORY_BACKEND": "openviking",
                "DATABASE_OPENVIKING_API_KEY": "ov-smoke-key",
                "DATABASE_OPENVIKING_USER_ID": USER,
                "OPENVIKING_CONFIG_FILE": "/nonexistent",
                "DATABASE_OPENVIKING_URL": server.url,
            }
            run(result, ltm_checks("openviking", env, home("openviking")))

    def viking(result: Result) -> None:
        from hosted_servers import AK, SK, VikingMemoryServer

        server = VikingMemoryServer().start()
        try:
            env = {
                "LONG_TERM_MEMORY_BACKEND": "viking",
                "DATABASE_VIKINGMEM_BASE_URL": server.url,
                "VOLCENGINE_ACCESS_KEY": AK,
                "VOLCENGINE_SECRET_KEY": SK,
            }
            run(result, ltm_checks("viking", env, home("viking")))
        finally:
            server.stop()

    def tos(result: Result) -> None:
        from hosted_servers import ACCOUNT, AK, SK, TosContextServer

        server = TosContextServer().start()
        try:
            env = {
                "LONG_TERM_MEMORY_BACKEND": "tos_context",
                "HTTP_PROXY": server.url,
                "http_proxy": server.url,
                "DATABASE_TOS_CONTEXT_ACCOUNT_ID": ACCOUNT,
                "DATABASE_TOS_CONTEXT_CONTROL_ENDPOINT": "http://tos-control.test",
                "DATABASE_TOS_CONTEXT_BUCKET_NAME": "vmem-memory",
                "VOLCENGINE_ACCESS_KEY": AK,
                "VOLCENGINE_SECRET_KEY": SK,
            }
            run(result, ltm_checks("tos", env, home("tos"), delete_exit=4))
        finally:
            server.stop()

    def sqlite(result: Result) -> None:
        where = home("sqlite")
        run(result, session_checks("core", str(where / "sessions.db"), where))

    def pg(result: Result) -> None:
        with postgres() as url:
            run(result, session_checks("core", url, home("postgresql")))

    def browse(result: Result) -> None:
        where = home("browse")
        db = str(where / "sessions.db")

        def core_says_install() -> None:  # without the extra: exit 4 naming it
            vmem("core", ["browse", "--db-url", db], {}, where, expect=4)

        def tui_has_textual() -> None:  # with it, Textual is found; a pipe is no terminal: exit 2
            vmem("tui", ["browse", "--db-url", db], {}, where, expect=2)

        run(result, iter([("browse without [tui]", core_says_install), ("browse with [tui]", tui_has_textual)]))

    def my(result: Result) -> None:
        with mariadb() as url:
            run(result, session_checks("core", url, home("mariadb")))

    yield "ltm local (offline model)", local
    yield "ltm local (core, no model)", local_hash
    yield "ltm redis 8 + RediSearch", redis_search
    yield "ltm redis 7 (no search module)", redis_plain
    yield "ltm opensearch", opensearch
    yield "ltm mem0", mem0
    yield "ltm openviking", openviking
    yield "ltm viking", viking
    yield "ltm tos_context", tos
    yield "sessions sqlite", sqlite
    yield "sessions postgresql", pg
    yield "sessions mariadb", my
    yield "browse (tui extra)", browse


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default="", help="comma-separated words; run the scenarios naming one")
    args = parser.parse_args()
    words = [w.strip() for w in args.only.split(",") if w.strip()]
    results: list[Result] = []
    with tempfile.TemporaryDirectory(prefix="vmem-smoke-") as tmp:

        def home(name: str) -> Path:
            path = Path(tmp) / name
            path.mkdir(exist_ok=True)
            return path

        for name, scenario in scenarios(home):
            if words and not any(w in name for w in words):
                continue
            result = Result(name)
            try:
                scenario(result)
            except Exception as exc:  # a server that cannot start fails its scenario, loudly
                result.failures.append(f"setup: {type(exc).__name__}: {exc}")
            results.append(result)
            status = "ok" if not result.failures else "FAILED"
            print(f"smoke: {name}: {status} ({result.passed} checks passed)", flush=True)
            for failure in result.failures:
                print(f"smoke:   {failure}", flush=True)
    failed = [r for r in results if r.failures]
    checks = sum(r.passed for r in results)
    print(f"smoke: {len(results) - len(failed)} of {len(results)} scenarios passed, {checks} checks passed")
    return 1 if failed or not results else 0


if __name__ == "__main__":
    sys.exit(main())
