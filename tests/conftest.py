"""Shared fixtures: an isolated user environment for every test, a CLI runner, and
fresh databases on the local PostgreSQL / MariaDB / Redis servers.

A server fixture skips its test with a loud reason only when the server cannot be
reached; `.ci/run` starts the servers first, and under CI=true a skip that
tests/skip-allowlist.txt does not list fails the run (tests/skip_policy.py).

Markers by fixture use (so `bash .ci/test --fast` can leave them out): a test using
pg_url / mysql_url / redis_prefix / redis_stack / plain_redis is marked postgres / mysql / redis,
and so is one parametrised over a database by name ("postgres v1", "pg_url"); whole modules and
single tests of many seconds are marked slow (_SLOW_MODULES, _SLOW_TESTS).
Hypothesis profiles: `fast` (`--hypothesis-profile=fast`, the fast tier) caps every property test at
its few examples, also those whose own @settings ask for more.
"""

from __future__ import annotations

import asyncio
import os
import socket
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import settings
from skip_policy import pytest_configure  # noqa: F401  (the hook: no silent green under CI=true)
from typer.testing import CliRunner

PG_HOST, PG_PORT = "127.0.0.1", 5432
MY_HOST, MY_PORT = "127.0.0.1", 3306
REDIS_HOST, REDIS_PORT = "127.0.0.1", 6379

settings.register_profile("fast", max_examples=10, deadline=None)

_FIXTURE_MARKERS = {
    "pg_url": "postgres",
    "mysql_url": "mysql",
    "redis_prefix": "redis",
    "redis_stack": "redis",
    "plain_redis": "redis",  # a redis-server of the test's own (test_ltm_safety.py) or the machine's
}
# Parametrised over databases: a test whose parameter (or its first word: "postgres v0") names a server,
# or the server fixture it fetches with request.getfixturevalue ("pg_url"), needs that server.
_PARAM_MARKERS = {
    "postgres": "postgres",
    "postgresql": "postgres",
    "mysql": "mysql",
    "mariadb": "mysql",
    **_FIXTURE_MARKERS,
}
# Whole modules of many-second tests (old ADK releases in subprocesses, child processes, cross-database
# round trips): left out of `bash .ci/test --fast` by the `slow` marker.
_SLOW_MODULES = {
    "test_sessions_old_adk.py",
    "test_sessions_upgrade.py",
    "test_sessions_interop.py",
    "test_sessions_safety.py",
    "test_sessions_import_child.py",
    "test_ltm_openviking_e2e.py",
    "test_table_widths.py",
    "test_ltm_transfer.py",
    "test_output_cli.py",
    "test_sessions_watch.py",  # a `vmem session watch` child per test, seconds of polling
    "test_ltm_sync_live.py",  # `vmem ltm sync --follow` children beside an ADK agent process
}
# Single many-second tests elsewhere (the offline model end to end, 700-event streams, two processes).
_SLOW_TESTS = {
    "test_main_job_finds_the_dietary_memory_first",
    "test_save_then_search_as_two_processes",
    "test_a_long_session_streams_in_bounded_memory",
    "test_the_fast_walk_gives_what_the_models_give_or_declines",
    "test_databases_of_old_adk_releases",  # an old ADK release's venv writes the database
    "test_peak_memory_does_not_grow_with_the_largest_session",  # child processes, 100k-event sessions
    "test_a_streamed_session_reads_back_through_adk_as_a_decoded_one",  # 5,000 events imported 3 times
    "test_ltm_search_loads_numpy_with_one_blas_thread",  # child processes: the fast tier keeps the save's
    "test_a_users_own_setting_wins",
    "test_exporting_a_million_event_session_stays_under_200_mb",  # imports and exports 1,000,000 events
}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark each test by the servers it uses (fixtures, database parameters) and slow modules, so
    marker selection needs no per-test marks; under the `fast` hypothesis profile, cap examples."""
    fast_profile = getattr(settings, "get_current_profile_name", lambda: None)() == "fast"  # an old hypothesis: no cap
    for item in items:
        names = set(getattr(item, "fixturenames", ()))
        marks = {_FIXTURE_MARKERS[n] for n in names if n in _FIXTURE_MARKERS}
        callspec = getattr(item, "callspec", None)
        for value in callspec.params.values() if callspec is not None else ():
            if isinstance(value, str) and value.strip():
                for word in {value, value.split()[0]} & _PARAM_MARKERS.keys():
                    marks.add(_PARAM_MARKERS[word])
        if item.path.name in _SLOW_MODULES or getattr(item, "originalname", item.name) in _SLOW_TESTS:
            marks.add("slow")
        for mark in sorted(marks):
            item.add_marker(mark)
        if fast_profile:
            _cap_examples(item)


def _cap_examples(item: pytest.Item) -> None:
    """Under the `fast` profile, a property test whose own @settings ask for more examples runs the
    profile's few (the full run keeps each test's own count)."""
    test = getattr(item, "obj", None)
    own = getattr(test, "_hypothesis_internal_use_settings", None)  # where @settings/@given keep them
    cap = settings.default.max_examples
    if isinstance(own, settings) and own.max_examples > cap:
        test._hypothesis_internal_use_settings = settings(own, max_examples=cap)  # type: ignore[union-attr]


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """Under .ci/test: the runtime dependency versions this run had, next to its closing line."""
    freeze = os.environ.get("VMEM_RUNTIME_FREEZE")
    if not freeze or not Path(freeze).is_file():
        return
    from importlib.metadata import PackageNotFoundError, version

    names = [line.split("==")[0] for line in Path(freeze).read_text().splitlines() if "==" in line]
    found = []
    for name in sorted(names, key=str.lower):
        try:
            found.append(f"{name} {version(name)}")
        except PackageNotFoundError:
            found.append(f"{name} MISSING")
    terminalreporter.write_line("runtime dependencies tested: " + ", ".join(found))


# Variables that would make a test read the developer's own configuration.
_CONFIG_ENV_PREFIXES = (
    "DATABASE_",
    "MODEL_",
    "VOLCENGINE_",
    "SHORT_TERM_MEMORY_",
    "LONG_TERM_MEMORY_",
    "VMEM_",
    "MIN_MESSAGES_THRESHOLD",
    "MIN_TIME_THRESHOLD",
    "AUTO_SAVE_",
    "POLICY_",
)
# ... except the ones that say where the test-only venvs are (tests/llama_venv.py, tests/redis_stack.py).
_TEST_ENV_KEPT = ("VMEM_LLAMA_VENV", "VMEM_REDIS8_VENV", "VMEM_VEADK_VENV")


@pytest.fixture(autouse=True)
def isolated_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Point HOME, XDG dirs and the working directory at a temp dir; clear config variables."""
    home = tmp_path / "home"
    home.mkdir()
    for name in list(os.environ):
        if name.startswith(_CONFIG_ENV_PREFIXES) and name not in _TEST_ENV_KEPT:
            monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(home / ".config"))
    monkeypatch.setenv("XDG_DATA_HOME", str(home / ".local" / "share"))
    monkeypatch.setenv("NO_COLOR", "1")
    monkeypatch.setenv("COLUMNS", "200")
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    return work


@pytest.fixture
def runner() -> CliRunner:
    """A Typer CLI runner keeping stdout and stderr apart."""
    return CliRunner()


def _reachable(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=1):
            return True
    except OSError:
        return False


def _require(host: str, port: int, name: str) -> None:
    if not _reachable(host, port):
        pytest.skip(f"*** {name} at {host}:{port} is not reachable: start it (see .ci/run) ***")


@pytest.fixture
def pg_url() -> Iterator[str]:
    """A fresh, empty PostgreSQL database for this test; its async SQLAlchemy URL."""
    _require(PG_HOST, PG_PORT, "PostgreSQL")
    import asyncpg

    name = f"vmem_{uuid.uuid4().hex[:12]}"

    async def admin(sql: str) -> None:
        conn = await asyncpg.connect(host=PG_HOST, port=PG_PORT, user="postgres", database="postgres")
        try:
            await conn.execute(sql)
        finally:
            await conn.close()

    asyncio.run(admin(f'CREATE DATABASE "{name}"'))
    try:
        yield f"postgresql+asyncpg://postgres@{PG_HOST}:{PG_PORT}/{name}"
    finally:
        asyncio.run(admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))


@pytest.fixture
def mysql_url() -> Iterator[str]:
    """A fresh, empty MariaDB database for this test; its async SQLAlchemy URL."""
    _require(MY_HOST, MY_PORT, "MariaDB")
    import pymysql

    name = f"vmem_{uuid.uuid4().hex[:12]}"

    def admin(sql: str) -> None:
        conn = pymysql.connect(host=MY_HOST, port=MY_PORT, user="root", password="")
        try:
            with conn.cursor() as cur:
                cur.execute(sql)
            conn.commit()
        finally:
            conn.close()

    admin(f"CREATE DATABASE `{name}` CHARACTER SET utf8mb4")
    try:
        yield f"mysql+aiomysql://root@{MY_HOST}:{MY_PORT}/{name}?charset=utf8mb4"
    finally:
        admin(f"DROP DATABASE IF EXISTS `{name}`")


@pytest.fixture
def redis_prefix() -> Iterator[str]:
    """A key prefix unique to this test on the local Redis; its keys are removed afterwards."""
    _require(REDIS_HOST, REDIS_PORT, "Redis")
    import redis

    prefix = f"vmemtest-{uuid.uuid4().hex[:12]}"
    yield prefix
    client = redis.Redis(host=REDIS_HOST, port=REDIS_PORT)
    for key in client.scan_iter(f"*{prefix}*"):
        client.delete(key)
    client.close()


@pytest.fixture(scope="session")
def redis_stack() -> Iterator[str]:
    """A Redis 8 + RediSearch server of our own for the whole session (see tests/redis_stack.py); its URL."""
    import redis_stack as stack

    try:
        server = stack.start()
    except stack.Unavailable as exc:
        pytest.skip(f"*** Redis 8 with RediSearch is not available: {exc} ***")
    try:
        yield server.url
    finally:
        server.stop()
