"""A damaged replay ledger is one line naming its file, exit 1: never sqlite's bare DatabaseError."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from test_ltm_safety import _hosted_session, tos_server, vmem  # noqa: F401  (tos_server: a fixture)
from typer.testing import CliRunner

from veadk_mem.ltm.ledger import Ledger, LedgerError, Scope

SCOPE = Scope("tos_context", "bucket-1", "app", "u1")


def _damaged(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"not a database, say a file copied over it\n" * 200)
    return path


def test_every_use_of_a_damaged_ledger_names_the_file(tmp_path: Path) -> None:
    ledger = Ledger(_damaged(tmp_path / "ledger.db"))
    for use in (
        lambda: ledger.sent(SCOPE, ["h1"]),
        lambda: ledger.record(SCOPE, [("h1", "id1", "s1")]),
        lambda: ledger.forget(SCOPE, everything=True),
    ):
        with pytest.raises(LedgerError, match=rf"^{tmp_path}/ledger\.db: the replay ledger is damaged") as caught:
            use()
        assert caught.value.exit_code == 1 and "\n" not in caught.value.message


def test_a_locked_ledger_names_the_file(tmp_path: Path) -> None:
    path = tmp_path / "ledger.db"
    Ledger(path).record(SCOPE, [("h1", "id1", "s1")])
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    try:
        ledger = Ledger(path)
        ledger._open(create=False)
        assert ledger._conn is not None
        ledger._conn.execute("PRAGMA busy_timeout = 50")
        with pytest.raises(LedgerError, match=rf"^{path}: cannot use the replay ledger: database is locked"):
            ledger.record(SCOPE, [("h2", "id2", "s1")])
    finally:
        holder.close()


@pytest.mark.usefixtures("tos_server")
def test_ltm_save_with_a_damaged_ledger_names_it_exit_1(runner: CliRunner, tmp_path: Path) -> None:
    ledger = _damaged(Path.home() / ".local" / "share" / "vmem" / "ledger.db")
    result = vmem(runner, "ltm", "save", str(_hosted_session(tmp_path)))
    assert result.exit_code == 1, result.output
    # the session that met it is reported (a replay goes on past one session's failure)
    assert f"sess-1.json: line 1: {ledger}: the replay ledger is damaged or not vmem's" in result.stderr
    assert "DatabaseError" not in result.stderr and "unexpected" not in result.stderr
