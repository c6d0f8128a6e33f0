"""[tuning]: vmem's own knobs as settings with their `VMEM_*` names, one accessor, shown with their source."""

from __future__ import annotations

import json
import re
import shutil
import sqlite3
from pathlib import Path

import pytest
from pydantic import ValidationError
from sessions_helpers import APP, build, sqlite_url
from typer.testing import CliRunner

from veadk_mem.cli.app import app
from veadk_mem.config import TUNING_KEYS, load_settings, starter_toml, tuning
from veadk_mem.errors import BadInput

ENV = {
    "sqlite_busy_timeout": "VMEM_SQLITE_BUSY_TIMEOUT",
    "delete_batch": "VMEM_DELETE_BATCH",
    "big_line_bytes": "VMEM_BIG_LINE",
    "reader_timeout": "VMEM_READER_TIMEOUT",
    "batch_bytes": "VMEM_BATCH_BYTES",
    "index_rows": "VMEM_INDEX_ROWS",
    "fast_paths": "VMEM_FAST_PATHS",
    "sync_cursor": "VMEM_SYNC_CURSOR",
    "sync_page": "VMEM_SYNC_PAGE",
    "sync_poll": "VMEM_SYNC_POLL",
    "sync_poll_max": "VMEM_SYNC_POLL_MAX",
    "sync_overlap": "VMEM_SYNC_OVERLAP",
}


@pytest.fixture(scope="module")
def adk_written(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("adk") / "veadk.db"
    build(sqlite_url(path), {("alice", "s1"): 3})
    return path


def _write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


def test_every_tuning_key_has_its_vmem_environment_name() -> None:
    assert {k.path[-1]: k.env for k in TUNING_KEYS} == ENV
    template = starter_toml()
    assert "\n[tuning]\n" in template
    for key in TUNING_KEYS:  # commented: a default stays a default
        assert f"\n# {key.path[-1]} = " in template and f"\n{key.path[-1]} = " not in template


def test_config_show_names_each_tuning_value_and_its_source(runner: CliRunner, isolated_env: Path) -> None:
    """The environment wins over the file, as for every other key; sizes are read as people write them."""
    cfg = _write(
        isolated_env / "vmem.toml",
        '[tuning]\ndelete_batch = 50\nbatch_bytes = "1MiB"\nbig_line_bytes = "64KB"\nreader_timeout = 9\n',
    )
    env = {"VMEM_READER_TIMEOUT": "2.5", "VMEM_FAST_PATHS": "0"}
    result = runner.invoke(app, ["config", "show", "--json"], env=env)
    assert result.exit_code == 0, result.output
    shown = {k.removeprefix("tuning."): v for k, v in json.loads(result.stdout).items() if k.startswith("tuning.")}
    assert shown == {
        "sqlite_busy_timeout": {"value": 10.0, "source": "default", "env": "VMEM_SQLITE_BUSY_TIMEOUT"},
        "delete_batch": {"value": 50, "source": f"file {cfg}", "env": "VMEM_DELETE_BATCH"},
        "big_line_bytes": {"value": 64_000, "source": f"file {cfg}", "env": "VMEM_BIG_LINE"},
        "reader_timeout": {"value": 2.5, "source": "env VMEM_READER_TIMEOUT", "env": "VMEM_READER_TIMEOUT"},
        "batch_bytes": {"value": 1024 * 1024, "source": f"file {cfg}", "env": "VMEM_BATCH_BYTES"},
        "index_rows": {"value": 10_000, "source": "default", "env": "VMEM_INDEX_ROWS"},
        "fast_paths": {"value": False, "source": "env VMEM_FAST_PATHS", "env": "VMEM_FAST_PATHS"},
        "sync_cursor": {  # the file named, in the data directory (ltm sync, #44)
            "value": str(isolated_env.parent / "home" / ".local" / "share" / "vmem" / "sync.db"),
            "source": "default",
            "env": "VMEM_SYNC_CURSOR",
        },
        "sync_page": {"value": 200, "source": "default", "env": "VMEM_SYNC_PAGE"},
        "sync_poll": {"value": 1.0, "source": "default", "env": "VMEM_SYNC_POLL"},
        "sync_poll_max": {"value": 30.0, "source": "default", "env": "VMEM_SYNC_POLL_MAX"},
        "sync_overlap": {"value": 10.0, "source": "default", "env": "VMEM_SYNC_OVERLAP"},
    }
    table = runner.invoke(app, ["config", "show"], env=env)
    rows = {line.split()[0]: line.split()[1:] for line in table.stdout.splitlines() if line.startswith("tuning.")}
    assert rows["tuning.delete_batch"] == ["50", "file", "VMEM_DELETE_BATCH"]
    assert rows["tuning.reader_timeout"] == ["2.5", "env", "VMEM_READER_TIMEOUT", "VMEM_READER_TIMEOUT"]


def test_each_reader_gets_its_value_from_the_one_accessor(isolated_env: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The file the process loaded answers every read site; a changed variable or directory is read again."""
    from veadk_mem.sessions import bigline, deletes, import_child
    from veadk_mem.sessions.engine import Database

    assert (deletes._batch_size(), import_child._timeout(), bigline.big_line_bytes(123_456)) == (200, 300.0, 123_456)
    cfg = _write(
        isolated_env.parent / "given.toml",
        "[tuning]\nsqlite_busy_timeout = 0.5\ndelete_batch = 7\nbig_line_bytes = 4096\nreader_timeout = 3\n",
    )
    load_settings(cfg)  # as the CLI does with --config
    assert Database(str(isolated_env / "x.db")).busy_timeout == 0.5
    assert (deletes._batch_size(), import_child._timeout(), bigline.big_line_bytes(123_456)) == (7, 3.0, 4096)
    assert tuning() is tuning()  # read once
    with pytest.raises(ValidationError):
        tuning().delete_batch = 1  # type: ignore[misc]
    monkeypatch.setenv("VMEM_DELETE_BATCH", "11")  # a variable changed: read again, from env and the found file
    assert (deletes._batch_size(), import_child._timeout()) == (11, 300.0)
    other = isolated_env.parent / "other"
    other.mkdir()
    _write(other / "vmem.toml", "[tuning]\nreader_timeout = 4\n")
    monkeypatch.chdir(other)  # ./vmem.toml is another one now
    assert (deletes._batch_size(), import_child._timeout()) == (11, 4.0)
    monkeypatch.setenv("VMEM_READER_TIMEOUT", "")  # empty: unset, as it always was
    assert import_child._timeout() == 4.0


def test_busy_timeout_from_the_config_file_reaches_the_database(
    runner: CliRunner, isolated_env: Path, adk_written: Path
) -> None:
    """`vmem --config FILE` with [tuning] sqlite_busy_timeout waits that long on a locked sqlite; the env wins."""
    db = isolated_env / "veadk.db"
    shutil.copyfile(adk_written, db)
    cfg = _write(isolated_env.parent / "c.toml", "[tuning]\nsqlite_busy_timeout = 0.3\n")
    holder = sqlite3.connect(db, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")  # an agent in the middle of a write
    try:
        args = ["--config", str(cfg), "session", "delete", APP, "alice", "s1", "--yes", "--db-url", str(db)]
        result = runner.invoke(app, args)
        assert result.exit_code == 1 and "locked by another writer (waited 0.3 s)" in result.stderr
        result = runner.invoke(app, args, env={"VMEM_SQLITE_BUSY_TIMEOUT": "0.2"})
        assert result.exit_code == 1 and "(waited 0.2 s)" in result.stderr
    finally:
        holder.execute("ROLLBACK")
        holder.close()


@pytest.mark.parametrize(
    ("toml", "env", "message"),
    [
        ("", {"VMEM_DELETE_BATCH": "many"}, "environment variable VMEM_DELETE_BATCH: expected a valid integer"),
        ("", {"VMEM_DELETE_BATCH": "0"}, "environment variable VMEM_DELETE_BATCH: expected greater than or equal to 1"),
        ("", {"VMEM_SQLITE_BUSY_TIMEOUT": "soon"}, "environment variable VMEM_SQLITE_BUSY_TIMEOUT: expected a valid"),
        ("", {"VMEM_BATCH_BYTES": "lots"}, "environment variable VMEM_BATCH_BYTES: expected a size such as 64MiB"),
        ("", {"VMEM_FAST_PATHS": "maybe"}, "environment variable VMEM_FAST_PATHS: expected a valid boolean"),
        ("big_line_bytes = 10", {}, "vmem.toml: tuning.big_line_bytes: expected 0 or at least 1024 bytes, got 10"),
        ("reader_timeout = 0", {}, "vmem.toml: tuning.reader_timeout: expected greater than 0, got 0"),
        ("fast_path = true", {}, r"vmem.toml: unknown key 'tuning.fast_path' \(did you mean 'fast_paths'\?\)"),
    ],
)
def test_bad_tuning_value_is_one_line_exit_2_naming_key_and_source(
    runner: CliRunner, isolated_env: Path, toml: str, env: dict[str, str], message: str
) -> None:
    _write(isolated_env / "vmem.toml", f"[tuning]\n{toml}\n")
    with pytest.raises(BadInput, match=message):
        load_settings(environ=env)
    result = runner.invoke(app, ["session", "list", "--db-url", str(isolated_env / "x.db")], env=env)
    assert result.exit_code == 2
    [line] = result.stderr.splitlines()
    assert line.startswith("vmem: error: ") and re.search(message, line), line


def test_readme_lists_every_tuning_key_with_its_variable() -> None:
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text(encoding="utf-8")
    for key in TUNING_KEYS:
        assert f"| `{key.path[-1]}` | `{key.env}` |" in readme, f"README's [tuning] table lacks {key.dotted}"
