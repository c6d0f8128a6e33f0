"""Names complete from the session database (issue 45 item 5): apps, users and session ids at
`vmem session get <TAB>`, option choices at `--by` / `--mode`, in the committed bash script,
through Click's completion protocol. A name is data (never run, inserted quoted), and a
database that cannot be reached completes nothing, quickly and silently."""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from sessions_helpers import adk_service, sqlite_url

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "completions" / "vmem.bash"


@pytest.fixture
def shell_env(tmp_path: Path) -> dict[str, str]:
    """PATH with a `vmem` that runs this checkout, as an installed one would."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    exe = bin_dir / "vmem"
    exe.write_text(f'#!/bin/sh\nexec {sys.executable} -m veadk_mem "$@"\n', encoding="utf-8")
    exe.chmod(0o755)
    return {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "PYTHONPATH": str(ROOT), "HOME": str(tmp_path)}


def _bash(words: list[str], env: dict[str, str], cwd: Path) -> list[str]:
    quoted = " ".join("'" + w.replace("'", "'\\''") + "'" for w in words)
    body = f"source {SCRIPT}\nCOMP_WORDS=({quoted}); COMP_CWORD={len(words) - 1}\n"
    body += '_vmem; printf "%s\\n" "${COMPREPLY[@]}"\n'
    out = subprocess.run(["bash", "--norc", "-c", body], capture_output=True, text=True, env=env, cwd=cwd, timeout=60)
    assert out.returncode == 0 and "Traceback" not in out.stderr, out.stderr
    return [w for w in out.stdout.splitlines() if w]


async def _sessions(url: str, keys: list[tuple[str, str, str]]) -> None:
    service = adk_service(url)
    try:
        for app, user, sid in keys:
            await service.create_session(app_name=app, user_id=user, session_id=sid)
    finally:
        await service.close()


def test_apps_users_and_session_ids_complete_and_a_hostile_id_runs_nothing(
    tmp_path: Path, shell_env: dict[str, str]
) -> None:
    url = sqlite_url(tmp_path / "adk.db")
    hostile = f"s$(touch {tmp_path}/pwned)"
    keys = [("shop", "alice", "s1"), ("shop", "alice", "s2"), ("shop", "bob", "t1"), ("support", "carol", "u1")]
    asyncio.run(_sessions(url, [*keys, ("shop", "alice", hostile)]))
    base = ["vmem", "session", "get", "--db-url", url]
    assert _bash([*base, ""], shell_env, tmp_path) == ["shop", "support"]
    assert _bash([*base, "su"], shell_env, tmp_path) == ["support"]
    assert _bash([*base, "shop", ""], shell_env, tmp_path) == ["alice", "bob"]  # users of that app only
    ids = _bash([*base, "shop", "alice", ""], shell_env, tmp_path)
    assert "s1" in ids and "s2" in ids and len(ids) == 3, ids
    assert not (tmp_path / "pwned").exists()
    word = next(i for i in ids if i not in ("s1", "s2"))
    back = subprocess.run(
        ["bash", "--norc", "-c", f'set -- {word}; printf "%s" "$#:$1"'], capture_output=True, text=True
    )
    assert back.stdout == f"1:{hostile}"  # inserted as one quoted word: Enter gives the id itself
    assert not (tmp_path / "pwned").exists()
    watch = ["vmem", "session", "list", "--db-url", url, "--app", ""]
    assert _bash(watch, shell_env, tmp_path) == ["shop", "support"]


def test_option_choices_complete(tmp_path: Path, shell_env: dict[str, str]) -> None:
    assert _bash(["vmem", "session", "stats", "--by", ""], shell_env, tmp_path) == ["app", "user", "day", "week", "age"]
    assert _bash(["vmem", "ltm", "search", "--mode", "h"], shell_env, tmp_path) == ["hybrid"]


@pytest.mark.parametrize(
    "url", ["postgresql://nobody@127.0.0.1:9/none", "sqlite:///{tmp}/missing.db", "mysql://x@10.255.255.1:3306/d"]
)
def test_an_unreachable_database_completes_nothing_quickly(tmp_path: Path, shell_env: dict[str, str], url: str) -> None:
    url = url.format(tmp=tmp_path)
    start = time.monotonic()
    assert _bash(["vmem", "session", "get", "--db-url", url, ""], shell_env, tmp_path) == []
    assert time.monotonic() - start < 15  # the query gives up after 1 s; the rest is Python starting, under load
    assert not (tmp_path / "missing.db").exists()  # a sqlite file is never created by a TAB


@pytest.mark.parametrize("plain", [True, False], ids=["path", "url"])
def test_a_fifo_or_a_directory_as_the_sqlite_file_completes_nothing(
    tmp_path: Path, shell_env: dict[str, str], plain: bool
) -> None:
    """Opening a FIFO blocks until a writer comes: the shell would hang on TAB (found by review)."""
    fifo = tmp_path / "fifo.db"
    os.mkfifo(fifo)
    for target in (fifo, tmp_path):
        given = str(target) if plain else f"sqlite:///{target}"
        assert _bash(["vmem", "session", "get", "--db-url", given, ""], shell_env, tmp_path) == []


def test_indexes_of_the_local_store_complete_and_other_backends_give_nothing(
    tmp_path: Path, shell_env: dict[str, str]
) -> None:
    """`--index <TAB>` (#45 item 5): the local store's indexes, read from its index table; a
    backend that cannot list its indexes cheaply (a server round trip) completes nothing."""
    sessions = ROOT / "docs" / "examples" / "sessions"
    env = {**shell_env, "LONG_TERM_MEMORY_LOCAL_PATH": str(tmp_path / "ltm.db"), "MODEL_EMBEDDING_PROVIDER": "hash"}
    for name in ("support_app-sessions.json", "ltm_demo-session-1.json"):
        save = [sys.executable, "-m", "veadk_mem", "ltm", "save", str(sessions / name)]
        subprocess.run(save, check=True, capture_output=True, env=env)
    assert _bash(["vmem", "ltm", "export", "--index", ""], env, tmp_path) == ["ltm_demo", "support_app"]
    assert _bash(["vmem", "ltm", "export", "-i", "sup"], env, tmp_path) == ["support_app"]
    assert _bash(["vmem", "ltm", "export", "-i", "SUP"], env, tmp_path) == []  # an index name is exact
    assert _bash(["vmem", "ltm", "export", "-b", "redis", "-i", ""], env, tmp_path) == []
    missing = {**env, "LONG_TERM_MEMORY_LOCAL_PATH": str(tmp_path / "none.db")}
    assert _bash(["vmem", "ltm", "export", "-i", ""], missing, tmp_path) == []
    assert not (tmp_path / "none.db").exists()  # a TAB never creates the store
    if shutil.which("fish") is None:
        pytest.skip("fish is not installed here; .ci/test installs it (the bash completions above passed)")
    fish = f"source {ROOT / 'completions' / 'vmem.fish'}; complete -C 'vmem ltm export --index s'"
    out = subprocess.run(["fish", "--no-config", "-c", fish], capture_output=True, text=True, env=env, timeout=60)
    assert [line.split("\t")[0] for line in out.stdout.splitlines()] == ["support_app"], out.stderr
