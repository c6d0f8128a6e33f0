"""What a command imports before it works (#45 item 13: felt speed).

A run builds only the top-level command its command line invokes (cli/app.py `build_app`), so
`vmem session list` and `session get` load neither the other command groups nor the long-term
side (the erasure job, the ltm base, sync, history); `vmem --help`, a typo and `completion`
still see the whole tree. Whole processes, as a user runs them.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import typer.main
from typer.testing import CliRunner

from veadk_mem.cli.app import _wanted, _wanted_sub, app, build_app

# Loaded by `vmem --help` (every command's module), never by `session list` / `session get`.
NOT_FOR_SESSION_READS = (
    "veadk_mem.cli.ltm",
    "veadk_mem.cli.ltm_reembed",
    "veadk_mem.cli.ltm_sync",
    "veadk_mem.cli.ltm_transfer",
    "veadk_mem.cli.policy",
    "veadk_mem.cli.config",
    "veadk_mem.cli.doctor",
    "veadk_mem.cli.history",
    "veadk_mem.cli.completion",
    "veadk_mem.cli.browse",
    "veadk_mem.ops.erasure",
    "veadk_mem.ops.memory_show",
    "veadk_mem.ops.sync",
    "veadk_mem.ops.history",
    "veadk_mem.ltm.base",
    "veadk_mem.ltm.keywords",
    "veadk_mem.sessions.importer",
    "veadk_mem.sessions.bigline",
    "veadk_mem.sessions.delete_flow",
)

# Third-party packages a session read does without: config.py merges the settings' sources
# itself and validates them with a plain pydantic model.
LIBRARIES_NOT_FOR_SESSION_READS = ("pydantic_settings",)

PROBE = """
import atexit, json, sys
out = sys.argv[1]
sys.argv = ["vmem", *sys.argv[2:]]
atexit.register(lambda: open(out, "w").write(json.dumps(sorted(sys.modules))))
from veadk_mem.cli.app import main
main()
"""


def _loaded(tmp_path: Path, *args: str) -> set[str]:
    """The modules loaded by the whole process `vmem ARGS` (it must succeed)."""
    out = tmp_path / "modules.json"
    done = subprocess.run([sys.executable, "-c", PROBE, str(out), *args], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return set(json.loads(out.read_text()))


@pytest.fixture
def one_session(runner: CliRunner, tmp_path: Path) -> str:
    """A sqlite session database holding one session, as `vmem session import` writes it."""
    db = tmp_path / "s.db"
    source = tmp_path / "s.json"
    event = {"id": "e1", "author": "user", "invocationId": "i1", "timestamp": 1.7e9, "content": {"role": "user"}}
    session = {"id": "s1", "appName": "a", "userId": "u", "state": {}, "events": [event], "lastUpdateTime": 1.7e9}
    source.write_text(json.dumps(session), encoding="utf-8")
    done = runner.invoke(app, ["session", "import", str(source), "--db-url", str(db)])
    assert done.exit_code == 0, done.output
    return str(db)


@pytest.mark.parametrize(
    "args", [["session", "list"], ["session", "get", "a", "u", "s1"], ["session", "get", "s1"]], ids=" ".join
)
def test_a_session_read_loads_no_other_command(tmp_path: Path, one_session: str, args: list[str]) -> None:
    loaded = _loaded(tmp_path, *args, "--db-url", one_session)
    assert "veadk_mem.sessions.read_queries" in loaded  # the probe saw the command run
    assert sorted(loaded.intersection(NOT_FOR_SESSION_READS)) == []
    assert sorted(m for m in loaded if m.split(".")[0] in LIBRARIES_NOT_FOR_SESSION_READS) == []


COLLECTIONS = """
import gc, sys
sys.argv = ["vmem", *sys.argv[1:]]
from veadk_mem.cli.app import main
seen = []
gc.callbacks.append(lambda phase, info: seen.append(info["generation"]) if phase == "stop" else None)
try:
    main()
finally:
    sys.stderr.write(f"collections {len(seen)}\\n")
"""


@pytest.mark.parametrize("args", [["session", "list"], ["session", "get", "a", "u", "s1"]], ids=" ".join)
def test_a_session_read_runs_no_cyclic_collection(one_session: str, args: list[str]) -> None:
    """What a read imports after startup (SQLAlchemy, the store, the settings) lives as long as the
    process: the youngest generation's threshold (cli/app.py YOUNG_OBJECTS) is above it, so no
    collection walks it (at 50,000 a read paid two, each a pass over some 50,000 objects)."""
    cmd = [sys.executable, "-c", COLLECTIONS, *args, "--db-url", one_session]
    done = subprocess.run(cmd, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stderr.splitlines()[-1] == "collections 0"


BUILT = """
import sys
sys.argv = ["vmem", *sys.argv[1:]]
from veadk_mem.cli.app import main
try:
    main()
finally:
    from pydantic import BaseModel
    from veadk_mem import events
    models = [m for m in vars(events).values() if isinstance(m, type) and issubclass(m, BaseModel)]
    built = [m.__name__ for m in models if m.__pydantic_complete__]
    sys.stderr.write(f"built {built}\\n")
"""


def test_a_timeline_of_adk_events_builds_no_event_model(one_session: str) -> None:
    """`session get` reads plain stored events without the models (sessions/timeline.py); their
    validators are built on first use (events.AdkModel), so building them is not startup work."""
    cmd = [sys.executable, "-c", BUILT, "session", "get", "a", "u", "s1", "--db-url", one_session]
    done = subprocess.run(cmd, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-1].split("\t")[2:5] == ["user", "user", "empty"]  # the event's row
    assert done.stderr.splitlines()[-1] == "built []"


def test_a_piped_session_list_loads_no_rich(tmp_path: Path, one_session: str) -> None:
    """Off a terminal a table is tab-separated text written as it is: no Console, so no Rich."""
    loaded = _loaded(tmp_path, "session", "list", "--db-url", one_session)
    assert "veadk_mem.sessions.read_queries" in loaded  # the probe saw the command run
    assert sorted(m for m in loaded if m.split(".")[0] == "rich") == []


@pytest.mark.parametrize("given", ["--db-url", "config"])
def test_completing_a_sqlite_session_id_needs_no_sqlalchemy(tmp_path: Path, one_session: str, given: str) -> None:
    """`vmem session get APP USER <TAB>` as completions/vmem.bash asks: the file named by --db-url or
    by the sqlite backend's local_database_path is read with sqlite3, nothing parses a URL (#45 item 5)."""
    words = f"vmem session get --db-url {one_session} a u s" if given == "--db-url" else "vmem session get a u s"
    env = {"_VMEM_COMPLETE": "complete_bash", "COMP_WORDS": words, "COMP_CWORD": str(len(words.split()) - 1)}
    if given == "config":
        env |= {"SHORT_TERM_MEMORY_BACKEND": "sqlite", "SHORT_TERM_MEMORY_LOCAL_DATABASE_PATH": one_session}
    out = tmp_path / "modules.json"
    cmd = [sys.executable, "-c", PROBE, str(out)]
    done = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, **env})
    assert done.stdout.split() == ["s1"], done.stderr
    loaded = set(json.loads(out.read_text()))
    assert not {m for m in loaded if m.split(".")[0] in ("sqlalchemy", "aiosqlite")}
    assert sorted(loaded.intersection(NOT_FOR_SESSION_READS)) == []


def test_help_still_loads_every_command(tmp_path: Path) -> None:
    commands = {m for m in NOT_FOR_SESSION_READS if m.startswith("veadk_mem.cli.")}
    assert commands <= _loaded(tmp_path, "--help")


@pytest.mark.parametrize(
    ("words", "wanted"),
    [
        (["session", "list"], "session"),
        (["--json", "-q", "ltm", "search", "x"], "ltm"),
        (["-c", "session", "policy", "show"], "policy"),  # `session` is --config's value
        (["--config", "f.toml", "doctor"], "doctor"),
        (["-qc", "f.toml", "history"], "history"),
        (["--config=f.toml", "forget", "u"], "forget"),
        (["completion", "bash"], None),  # prints the whole tree's script
        (["sesion", "list"], None),  # a typo: Click's "did you mean" needs every name
        (["--help"], None),
        ([], None),
        (["--", "session"], None),
    ],
)
def test_the_command_a_line_invokes(words: list[str], wanted: str | None) -> None:
    assert _wanted(words) == wanted


def test_a_typo_is_still_answered_from_the_whole_tree(tmp_path: Path) -> None:
    vmem = Path(sys.executable).parent / "vmem"
    done = subprocess.run([str(vmem), "sesion", "list"], capture_output=True, text=True)
    assert done.returncode == 2
    assert "Did you mean 'session'?" in done.stderr


@pytest.mark.parametrize(
    ("words", "sub"),
    [
        (["session", "list"], "list"),
        (["-c", "f.toml", "ltm", "search", "x"], "search"),
        (["session", "--help"], None),
        (["session"], None),
        (["-c", "session"], None),  # `session` is --config's value: no command at all
    ],
)
def test_the_subcommand_a_line_invokes(words: list[str], sub: str | None) -> None:
    assert _wanted_sub(words) == sub


@pytest.mark.parametrize(
    ("sub", "built"),
    [
        ("list", ["list"]),
        ("lst", None),  # a typo: Click's "did you mean" needs every name
        (None, None),  # `vmem session --help` lists them all
    ],
)
def test_a_run_builds_only_the_subcommand_it_names(sub: str | None, built: list[str] | None) -> None:
    """Typer reads the signature of every command it builds: `session list` builds `list` alone."""
    group = typer.main.get_command(build_app("session", sub)).commands["session"]  # type: ignore[attr-defined]
    every = typer.main.get_command(app).commands["session"].commands  # type: ignore[attr-defined]
    assert list(group.commands) == (built or list(every))
    assert len(every) > 5  # the shared group kept all its commands


def test_a_subcommand_typo_is_still_answered_from_the_whole_group() -> None:
    vmem = Path(sys.executable).parent / "vmem"
    done = subprocess.run([str(vmem), "session", "lst"], capture_output=True, text=True)
    assert done.returncode == 2
    assert "Did you mean 'list'?" in done.stderr
