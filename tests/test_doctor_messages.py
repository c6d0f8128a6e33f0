"""`vmem doctor` says a failure as every session command says it (#45 item 8): the one-line
message and hint of `session list`, never a driver's `DBAPIError: (...)` wrapper; on a
terminal the status is coloured (NO_COLOR honoured) and a URL is never cut."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from veadk_mem.cli.app import app

ANSI = re.compile(r"\x1b\[[0-9;]*m")
COLOUR = re.compile(r"\x1b\[(?:[0-9]+;)*3[0-7]m")
RAW = ("DBAPIError", "sqlalchemy", "asyncpg.Error", "OperationalError", "Traceback")


def _both(runner: CliRunner, url: str) -> tuple[str, str, str]:
    """doctor's detail for the session database, and `session list`'s error and hint for the same URL."""
    doctor = runner.invoke(app, ["doctor", "--db-url", url, "--json"])
    assert doctor.exit_code == 1, doctor.output
    check = json.loads(doctor.stdout)[0]
    assert check["status"] == "fail"
    listed = runner.invoke(app, ["session", "list", "--db-url", url])
    assert listed.exit_code == 1
    lines = listed.stderr.strip().splitlines()
    message = lines[0].removeprefix("vmem: error: ")
    hint = lines[1].strip().removeprefix("hint: ") if len(lines) > 1 else ""
    return check["detail"], message, hint


def _same_as_session_list(runner: CliRunner, url: str, kind: str, secret: str = "") -> str:
    detail, message, hint = _both(runner, url)
    assert kind in message
    assert detail == (f"{message}; hint: {hint}" if hint else message)
    for raw in RAW:
        assert raw not in detail, detail
    if secret:
        assert secret not in detail
    return detail


@pytest.mark.postgres
def test_postgres_wrong_user_and_refused_port(runner: CliRunner, pg_url: str) -> None:
    # the local server trusts every password (pg_hba.conf: trust), so the login it refuses is an unknown role
    url = pg_url.replace("postgres@", "no_such_role:Pw0rdX@").replace("+asyncpg", "")
    detail = _same_as_session_list(runner, url, "authentication failed", "Pw0rdX")
    assert 'role "no_such_role" does not exist; hint: check the user and password' in detail
    refused = pg_url.replace(":5432/", ":1/").replace("+asyncpg", "")
    assert "is the database server running" in _same_as_session_list(runner, refused, "cannot connect")


@pytest.mark.mysql
def test_mariadb_wrong_password_and_refused_port(runner: CliRunner, mysql_url: str) -> None:
    url = mysql_url.replace("root@", "root:Wr0ngPass@").replace("+aiomysql", "")
    detail = _same_as_session_list(runner, url, "authentication failed", "Wr0ngPass")
    assert "Access denied" in detail and detail.endswith("hint: check the user and password")
    refused = mysql_url.replace(":3306/", ":1/").replace("+aiomysql", "")
    assert "is the database server running" in _same_as_session_list(runner, refused, "cannot connect")


def test_sqlite_missing_file_and_unknown_host(runner: CliRunner, tmp_path: Path) -> None:
    missing = str(tmp_path / "none.db")
    detail, message, _ = _both(runner, missing)
    assert message == f"{missing}: no such sqlite file" and detail.startswith(message)
    url = "postgresql://u:S3cretPw@no-such-host.invalid:5432/x"
    detail = _same_as_session_list(runner, url, "cannot connect", "S3cretPw")
    assert "u:****@no-such-host.invalid" in detail


def test_sqlite_not_a_database(runner: CliRunner, tmp_path: Path) -> None:
    junk = tmp_path / "junk.db"
    junk.write_bytes(b"this is not a database file, not at all" * 100)
    detail, message, _ = _both(runner, str(junk))
    assert detail.startswith(message) and "file is not a database" in detail
    for raw in RAW:
        assert raw not in detail


def _terminal(runner: CliRunner, url: str, **env: str) -> str:
    result = runner.invoke(app, ["doctor", "--db-url", url], env={"COLUMNS": "80", "TTY_COMPATIBLE": "1", **env})
    assert result.exit_code == 1, result.output
    return result.stdout


def test_terminal_keeps_urls_whole_and_colours_fail(
    runner: CliRunner, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    long_path = tmp_path / ("a-directory-with-a-rather-long-name-" * 2) / "sessions.db"
    long_path.parent.mkdir()
    url = f"postgresql://someone:Pw@no-such-host-with-a-long-name.invalid:5432/{'d' * 30}"
    for target in (str(long_path), url):
        monkeypatch.setenv("NO_COLOR", "1")
        plain = _terminal(runner, target)
        assert not COLOUR.search(plain)  # NO_COLOR: no colour (bold stays, as NO_COLOR allows)
        plain = ANSI.sub("", plain)
        shown = target.replace(":Pw@", ":****@")
        assert shown in plain.splitlines()[1]  # the whole URL or path on one line, never cut or elided
        assert "…" not in plain
        for line in plain.splitlines():
            assert len(line) <= 80 or len(line.split()) == 1  # longer only as one word alone on its line
        monkeypatch.delenv("NO_COLOR")
        coloured = _terminal(runner, target, FORCE_COLOR="1", TERM="xterm")
        fail_line = coloured.splitlines()[0]
        assert "\x1b[" in fail_line and ANSI.sub("", fail_line).startswith("fail  short_term_memory")
        assert "\x1b[1;31mfail" in fail_line  # red, bold: fail no longer looks like ok
        ok_line = next(line for line in coloured.splitlines() if "long_term_memory" in line)
        assert "\x1b[32mok" in ok_line


@pytest.mark.parametrize("kind", ["fifo", "directory"])
def test_a_fifo_or_a_directory_is_no_sqlite_file(tmp_path: Path, kind: str) -> None:
    """Opening a FIFO blocks until a writer comes: doctor hung on one (found by review); the
    session commands said "disk I/O error". Both now name it at once."""
    import os
    import subprocess
    import sys

    path = tmp_path / "s.db"
    os.mkfifo(path) if kind == "fifo" else path.mkdir()
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}

    def vmem(*args: str) -> subprocess.CompletedProcess[str]:
        command = [sys.executable, "-m", "veadk_mem", *args, "--db-url", str(path)]
        return subprocess.run(command, capture_output=True, text=True, env=env, timeout=60)

    doctor = vmem("--json", "doctor")
    assert doctor.returncode == 1, doctor.stderr
    check = json.loads(doctor.stdout)[0]
    assert check["status"] == "fail" and check["detail"] == f"{path}: not a regular file, expected a sqlite file"
    listed = vmem("session", "list")
    what = "is a directory" if kind == "directory" else "is not a regular file"
    assert listed.returncode == 2, listed.stderr
    assert listed.stderr.splitlines()[0] == f"vmem: error: {path}: {what}, expected a sqlite file"
