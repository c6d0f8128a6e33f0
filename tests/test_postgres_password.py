"""A wrong PostgreSQL password is refused cleanly (#45 item 8), against a server that asks for one.

The machine's PostgreSQL trusts 127.0.0.1 (any password logs in), so this test starts a
throwaway cluster of its own: `initdb --auth=scram-sha-256` with a password file, on a free
port, in a temp dir, stopped after. `vmem session list` and `vmem doctor` (the installed
console script, whole processes) then log in with a wrong password: both exit 1 (store
unreachable or refused, DESIGN.md) with the one-line "authentication failed ... hint: check
the user and password", and neither prints the password.
"""

from __future__ import annotations

import glob
import os
import shutil
import socket
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

pytestmark = pytest.mark.postgres

RIGHT = "R1ght-Pw-4410"
WRONG = "Wr0ng-Pw-7731"


def _bin_dir() -> Path | None:
    """The newest PostgreSQL server binaries installed (Debian layout), or None."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda p: int(Path(p).parent.parent.name))
    return Path(found[-1]).parent if found else None


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _as_server_user(cmd: list[str]) -> list[str]:
    """initdb and postgres refuse to run as root: run them as `postgres` when the tests run as root."""
    return ["runuser", "-u", "postgres", "--", *cmd] if os.geteuid() == 0 else cmd


@pytest.fixture(scope="module")
def password_server() -> Iterator[int]:
    """A PostgreSQL cluster of the test's own that requires a password (scram-sha-256); its port."""
    bindir = _bin_dir()
    if bindir is None:
        pytest.skip("no PostgreSQL server binaries under /usr/lib/postgresql")
    root = Path(tempfile.mkdtemp(prefix="vmem-pgpw-"))
    data, pwfile = root / "data", root / "pw"
    pwfile.write_text(RIGHT + "\n", encoding="utf-8")
    if os.geteuid() == 0:
        shutil.chown(root, "postgres")
        shutil.chown(pwfile, "postgres")
    root.chmod(0o700)
    port = _free_port()
    initdb = [str(bindir / "initdb"), "-D", str(data), "-U", "postgres", "--auth=scram-sha-256", f"--pwfile={pwfile}"]
    subprocess.run(_as_server_user(initdb), check=True, capture_output=True)
    options = f"-p {port} -k {root} -c listen_addresses=127.0.0.1"
    start = [str(bindir / "pg_ctl"), "-D", str(data), "-o", options, "-l", str(root / "log"), "-w", "start"]
    subprocess.run(_as_server_user(start), check=True, capture_output=True)
    try:
        yield port
    finally:
        stop = [str(bindir / "pg_ctl"), "-D", str(data), "-m", "immediate", "-w", "stop"]
        subprocess.run(_as_server_user(stop), capture_output=True)
        shutil.rmtree(root, ignore_errors=True)


def _vmem(*args: str) -> subprocess.CompletedProcess[str]:
    """The installed `vmem` as a user runs it."""
    vmem = Path(sys.executable).parent / "vmem"
    return subprocess.run([str(vmem), *args], capture_output=True, text=True, timeout=120)


def test_the_server_asks_for_the_password(password_server: int) -> None:
    """The right password logs in (so a refusal below is the password's, not a dead server's)."""
    url = f"postgresql+asyncpg://postgres:{RIGHT}@127.0.0.1:{password_server}/postgres"
    done = _vmem("doctor", "--db-url", url, "--json")
    assert RIGHT not in done.stdout + done.stderr
    assert "authentication failed" not in done.stdout + done.stderr, done.stdout + done.stderr


@pytest.mark.parametrize("command", [["session", "list"], ["doctor"]], ids=["session list", "doctor"])
def test_a_wrong_password_is_refused_in_one_line(password_server: int, command: list[str]) -> None:
    url = f"postgresql+asyncpg://postgres:{WRONG}@127.0.0.1:{password_server}/postgres"
    done = _vmem(*command, "--db-url", url)
    said = done.stdout + done.stderr
    assert done.returncode == 1, said
    assert "authentication failed" in said and 'password authentication failed for user "postgres"' in said, said
    assert "check the user and password" in said, said
    assert WRONG not in said
    for raw in ("DBAPIError", "asyncpg.Error", "Traceback", "sqlalchemy"):
        assert raw not in said, said
