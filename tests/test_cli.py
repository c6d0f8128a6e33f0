"""CLI conventions: help everywhere, exit codes, one-line errors, stdout for data only."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from veadk_mem.cli.app import app
from veadk_mem.cli.docs import command_tree, walk

COMMANDS = [node.path for node in walk(command_tree())]


@pytest.mark.parametrize("path", COMMANDS, ids=lambda p: " ".join(p) or "vmem")
def test_every_command_has_help(runner: CliRunner, path: tuple[str, ...]) -> None:
    result = runner.invoke(app, [*path, "--help"])
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith("Usage: vmem")
    node = next(n for n in walk(command_tree()) if n.path == path)
    assert node.help, f"vmem {' '.join(path)} has no help text"


def _registered(typer_app: object) -> list[object]:
    """Every command callback registered in a Typer app and its sub-apps."""
    found = [info.callback for info in typer_app.registered_commands]  # type: ignore[attr-defined]
    for group in typer_app.registered_groups:  # type: ignore[attr-defined]
        found += _registered(group.typer_instance)
    return found


def test_the_global_flags_are_options_of_each_commands_own_signature() -> None:
    """Typer builds them like any declared option (issue 24 item 7: no rewriting of the Click
    tree's callbacks); a table-shaped command's signature has the formats as well."""
    import inspect

    from veadk_mem.cli.wiring import TABLE_SHAPED

    callbacks = _registered(app)
    assert len(callbacks) >= 20
    for callback in callbacks:
        params = inspect.signature(callback).parameters  # type: ignore[arg-type]
        flags = {"-c": "g_config", "-q": "g_quiet", "-v": "g_verbose"}
        for name in flags.values():
            assert name in params, f"{callback.__name__}: no {name}"  # type: ignore[attr-defined]
        if getattr(callback, TABLE_SHAPED, False):
            assert {"g_jsonl", "g_csv", "g_tsv"} <= set(params), callback.__name__  # type: ignore[attr-defined]


def test_groups_exist(runner: CliRunner) -> None:
    out = runner.invoke(app, ["--help"]).stdout
    for group in ("session", "ltm", "policy", "config", "doctor", "forget"):
        assert f"  {group} " in out


def test_version(runner: CliRunner) -> None:
    from veadk_mem import __version__

    result = runner.invoke(app, ["--version"])
    assert result.exit_code == 0
    assert result.stdout == f"vmem {__version__}\n"


def test_usage_error_exits_2(runner: CliRunner) -> None:
    result = runner.invoke(app, ["no-such-command"])
    assert result.exit_code == 2
    assert result.stdout == ""
    assert "No such command" in result.stderr


def test_bad_input_is_one_line_on_stderr_with_exit_2(runner: CliRunner, tmp_path: Path) -> None:
    result = runner.invoke(app, ["--config", str(tmp_path / "missing.toml"), "config", "show"])
    assert result.exit_code == 2
    assert result.stdout == ""
    assert result.stderr.strip().splitlines() == [
        f"vmem: error: {tmp_path / 'missing.toml'}: config file not found (given with --config)"
    ]


def test_a_long_error_and_its_hint_are_one_line_each(
    runner: CliRunner, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "80")  # as in a log file or a pipe
    missing = tmp_path / ("a-directory-name-long-enough-to-pass-eighty-columns" * 2) / "sessions.db"
    result = runner.invoke(app, ["session", "list", "--db-url", str(missing)])
    assert result.exit_code == 1
    lines = result.stderr.splitlines()
    assert lines[0] == f"vmem: error: {missing}: no such sqlite file"
    assert lines[1].startswith("  hint: check short_term_memory.local_database_path")
    assert lines[1].endswith("VeADK creates it on first use")
    assert len(lines) == 2
    quiet = runner.invoke(app, ["--quiet", "session", "list", "--db-url", str(missing)])
    assert quiet.stderr.splitlines() == lines[:1]


def test_unexpected_error_is_one_line_and_verbose_shows_traceback(
    runner: CliRunner, monkeypatch: pytest.MonkeyPatch
) -> None:
    import veadk_mem.config

    def boom(*args: object, **kwargs: object) -> None:
        raise RuntimeError("disk on fire")

    monkeypatch.setattr(veadk_mem.config, "effective_rows", boom)
    quiet = runner.invoke(app, ["config", "show"])
    assert quiet.exit_code == 1
    assert "Traceback" not in quiet.stderr
    assert quiet.stderr.startswith("vmem: error: unexpected RuntimeError: disk on fire")
    loud = runner.invoke(app, ["--verbose", "config", "show"])
    assert loud.exit_code == 1
    assert "Traceback (most recent call last)" in loud.stderr


def test_verbose_shows_the_traceback_behind_a_store_error_without_its_secret(runner: CliRunner) -> None:
    """A store error is one line (exit 1); --verbose adds the driver's own traceback, password masked."""
    url = "postgresql://postgres:s3cret-pw@127.0.0.1:1/nowhere"  # a port nothing listens on
    quiet = runner.invoke(app, ["session", "list", "--db-url", url])
    assert quiet.exit_code == 1 and "Traceback" not in quiet.stderr
    assert quiet.stderr.startswith("vmem: error: postgresql://postgres:****@127.0.0.1:1/nowhere: cannot connect")
    loud = runner.invoke(app, ["--verbose", "session", "list", "--db-url", url])
    assert loud.exit_code == 1
    assert "Traceback (most recent call last)" in loud.stderr and "ConnectionRefusedError" in loud.stderr
    assert loud.stderr.rstrip().splitlines()[-2].startswith("vmem: error: ")
    assert "s3cret-pw" not in loud.stderr + loud.stdout


def test_doctor_reports_each_store(runner: CliRunner, tmp_path: Path) -> None:
    import sqlite3

    db = tmp_path / "s.db"
    sqlite3.connect(db).close()
    ok = runner.invoke(app, ["doctor", "--json"], env={"SHORT_TERM_MEMORY_LOCAL_DATABASE_PATH": str(db)})
    assert ok.exit_code == 0, ok.output
    assert '"status": "ok"' in ok.stdout


def test_doctor_fails_without_leaking_the_password(runner: CliRunner) -> None:
    env = {
        "SHORT_TERM_MEMORY_BACKEND": "postgresql",
        "DATABASE_POSTGRESQL_HOST": "127.0.0.1",
        "DATABASE_POSTGRESQL_PORT": "1",
        "DATABASE_POSTGRESQL_USER": "bob",
        "DATABASE_POSTGRESQL_PASSWORD": "Sup3rS3cret",
        "DATABASE_POSTGRESQL_DATABASE": "x",
    }
    result = runner.invoke(app, ["doctor"], env=env)
    assert result.exit_code == 1
    assert "fail" in result.stdout
    assert "Sup3rS3cret" not in result.stdout + result.stderr


def _installed_vmem() -> str:
    found = shutil.which("vmem", path=str(Path(sys.executable).parent))
    assert found, "the vmem console script is not installed next to this Python"
    return found


def test_installed_console_script_and_module() -> None:
    out = subprocess.run([_installed_vmem(), "--version"], capture_output=True, text=True, check=True)
    assert out.stdout.startswith("vmem ")
    mod = subprocess.run([sys.executable, "-m", "veadk_mem", "--version"], capture_output=True, text=True, check=True)
    assert mod.stdout == out.stdout


def test_no_color_is_honoured() -> None:
    base = {k: v for k, v in os.environ.items() if k != "NO_COLOR"}
    args = [_installed_vmem(), "--config", "/nonexistent.toml", "config", "show"]
    colored = subprocess.run(args, capture_output=True, text=True, env={**base, "FORCE_COLOR": "1", "TERM": "xterm"})
    plain = subprocess.run(
        args, capture_output=True, text=True, env={**base, "FORCE_COLOR": "1", "TERM": "xterm", "NO_COLOR": "1"}
    )
    assert colored.returncode == plain.returncode == 2
    assert "\x1b[" in colored.stderr
    assert "\x1b[" not in plain.stderr
    assert "config file not found" in plain.stderr


def test_startup_imports_nothing_heavy() -> None:
    heavy = ("sqlalchemy", "numpy", "pydantic", "openai", "redis", "opensearchpy", "google", "aiosqlite")
    code = f"import sys, veadk_mem.cli.app\nprint(','.join(m for m in {heavy!r} if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "", f"imported at startup: {out.stdout.strip()}"


def test_config_init_shows_defaults_as_comments_and_pins_none(runner: CliRunner, tmp_path: Path) -> None:
    """Every key is in the file, its default commented out: a later default change, or an
    environment variable, still applies; uncommenting a line sets that one key."""
    import tomllib

    from veadk_mem.config import KEYS

    target = tmp_path / "vmem.toml"
    assert runner.invoke(app, ["config", "init", str(target)]).exit_code == 0
    text = target.read_text(encoding="utf-8")
    assert _leaves(tomllib.loads(text)) == []  # tables only, no value set
    for key in KEYS:
        assert re.search(rf"^# {re.escape(key.path[-1])} = ", text, re.M), key.path
    rows = json.loads(runner.invoke(app, ["config", "show", "-c", str(target), "--json"]).stdout)
    assert {row["source"] for row in rows.values()} == {"default"}
    target.write_text(text.replace("# top_k = 5", "top_k = 9"), encoding="utf-8")
    rows = json.loads(runner.invoke(app, ["config", "show", "-c", str(target), "--json"]).stdout)
    assert rows["long_term_memory.top_k"] == {"value": 9, "source": f"file {target}", "env": "LONG_TERM_MEMORY_TOP_K"}


def _leaves(table: dict[str, object]) -> list[object]:
    """The non-table values of a parsed TOML document, at any depth."""
    found: list[object] = []
    for value in table.values():
        found.extend(_leaves(value) if isinstance(value, dict) else [value])
    return found


@pytest.mark.parametrize(
    ("args", "named"),
    [
        (["session", "list", "--db-url", "-n", "3"], "-n"),  # `--db-url $DB -n 3` with DB empty
        (["session", "list", "--db-url", "--json"], "--json"),
        (["ltm", "search", "q", "--user", "--app", "x"], "--app"),
    ],
)
def test_an_option_value_that_is_an_option_is_exit_2_needs_a_value(
    runner: CliRunner, args: list[str], named: str
) -> None:
    """Issue 45 item 10: the next option is not taken as the value ("no such sqlite file
    --json", "unexpected extra argument (3)"); the message names the option that lacks one."""
    result = runner.invoke(app, args)
    assert result.exit_code == 2, result.output
    assert f"{args[args.index(named) - 1]} needs a value (got the option {named}" in result.stderr


def test_a_value_like_an_option_but_not_one_is_taken(runner: CliRunner, tmp_path: Path) -> None:
    """Only the command's own option names are refused as values: `--since -5d`-like text is a value."""
    result = runner.invoke(app, ["session", "list", "--db-url", str(tmp_path / "-odd.db")])
    assert "needs a value" not in result.stderr
