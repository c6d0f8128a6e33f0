"""The history (issue #42 item 4): one entry per change vmem makes to a store, secrets masked,
private, never through a link, never in the way of the change; `vmem history` reads it back."""

from __future__ import annotations

import csv
import io
import json
import multiprocessing
import os
import re
import sqlite3
import stat
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from veadk_mem.cli.app import app
from veadk_mem.config import HistorySettings
from veadk_mem.errors import Interrupted
from veadk_mem.ops.history import Change, HistoryLog, mask_argv, record, recording

PEANUTS = "I am allergic to peanuts"


@pytest.fixture(autouse=True)
def hash_embedder(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MODEL_EMBEDDING_PROVIDER", "hash")


def history_file() -> Path:
    return Path(os.environ["XDG_DATA_HOME"]) / "vmem" / "history.db"


def entries() -> list[dict[str, Any]]:
    return HistoryLog(history_file()).entries()


def vmem(*args: str, input: str | None = None) -> Any:
    return CliRunner().invoke(app, list(args), input=input)


def session(sid: str, user: str = "alice", texts: tuple[str, ...] = (PEANUTS,), app_name: str = "app") -> Any:
    events = [
        {
            "id": f"{sid}-e{i}",
            "author": "user",
            "invocationId": f"{sid}-i{i}",
            "timestamp": 1_700_000_000.0 + i,
            "content": {"role": "user", "parts": [{"text": text}]},
        }
        for i, text in enumerate(texts)
    ]
    return {"appName": app_name, "userId": user, "id": sid, "state": {}, "events": events, "lastUpdateTime": 1.7e9}


def write_sessions(path: Path, sessions: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(s) + "\n" for s in sessions))
    return path


def imported(tmp_path: Path, db_url: str | None = None, n: int = 3) -> str:
    """A session database holding n sessions of alice (two events each), through `session import`."""
    url = db_url or str(tmp_path / "sessions.db")
    file = write_sessions(tmp_path / "s.jsonl", [session(f"s{i}", texts=(PEANUTS, f"fact {i}")) for i in range(n)])
    result = vmem("session", "import", str(file), "--db-url", url)
    assert result.exit_code == 0, result.stderr
    return url


# --- every recorded command: one entry, the right counts ------------------------------------------


def test_session_import_and_delete_each_write_one_entry(tmp_path: Path) -> None:
    url = imported(tmp_path)
    [entry] = entries()
    assert entry["command"] == "session import" and entry["outcome"] == "ok" and entry["exit_code"] == 0
    assert entry["counts"] == {"sessions": 3, "events": 6}
    assert entry["store"] == url and entry["os_user"] and entry["host"]
    assert entry["argv"][:3] == ["vmem", "session", "import"]

    assert vmem("session", "delete", "app", "alice", "s0", "s1", "--db-url", url, "--dry-run").exit_code == 0
    assert len(entries()) == 1  # a dry run records nothing
    result = vmem("session", "delete", "app", "alice", "s0", "s1", "--db-url", url, "-y")
    assert result.exit_code == 0, result.stderr
    latest = entries()[0]
    assert (latest["command"], latest["counts"]) == ("session delete", {"sessions": 2, "events": 4})
    assert sorted(latest["ids"]) == ["app/alice/s0", "app/alice/s1"] and latest["ids_total"] == 2


def test_ids_are_bounded_and_counted(tmp_path: Path) -> None:
    url = imported(tmp_path, n=120)
    assert vmem("session", "delete", "--app", "app", "--db-url", url, "-y").exit_code == 0
    latest = entries()[0]
    assert latest["counts"]["sessions"] == 120 and latest["ids_total"] == 120 and len(latest["ids"]) == 100


def test_prune_and_vacuum_are_recorded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    url = imported(tmp_path)
    monkeypatch.setenv("VMEM_RETENTION_MAX_SESSIONS_PER_USER", "1")
    assert vmem("session", "prune", "--db-url", url, "--dry-run").exit_code == 0
    result = vmem("session", "prune", "--db-url", url, "-y")
    assert result.exit_code == 0, result.stderr
    prune = entries()[0]
    assert (prune["command"], prune["counts"]) == ("session prune", {"sessions": 2, "events": 4})
    assert vmem("session", "vacuum", "--db-url", url, "--dry-run").exit_code == 0
    assert entries()[0]["command"] == "session prune"
    assert vmem("session", "vacuum", "--db-url", url).exit_code == 0
    vacuum = entries()[0]
    assert vacuum["command"] == "session vacuum" and vacuum["counts"]["tables"] >= 1
    assert vacuum["details"]["action"].startswith("VACUUM")


def test_session_upgrade_is_recorded(tmp_path: Path) -> None:
    from test_sessions_old_adk import run_old

    db = tmp_path / "old.db"
    run_old("1.15.1", "write", f"sqlite:///{db}", str(tmp_path / "adk.json"))
    assert vmem("session", "upgrade", "--db-url", str(db), "--dry-run").exit_code == 0
    assert entries() == []
    result = vmem("session", "upgrade", "--db-url", str(db), "--backup", str(tmp_path / "b.jsonl"))
    assert result.exit_code == 0, result.stderr
    [entry] = entries()
    assert entry["command"] == "session upgrade" and entry["counts"] == {"sessions": 4, "events": 34}


def test_ltm_save_delete_import_copy_and_forget_are_recorded(tmp_path: Path) -> None:
    file = write_sessions(tmp_path / "s.jsonl", [session("s1", texts=(PEANUTS, "I live in Lisbon"))])
    assert vmem("ltm", "save", str(file), "--dry-run").exit_code == 0
    assert entries() == []
    assert vmem("ltm", "save", str(file)).exit_code == 0
    save = entries()[0]
    assert (save["command"], save["counts"], save["store"]) == (
        "ltm save",
        {"sessions": 1, "memories": 2},
        "local index app",
    )
    assert vmem("ltm", "save", str(file)).exit_code == 0  # all held already: nothing changed, nothing recorded
    assert len(entries()) == 1

    listed = json.loads(vmem("ltm", "list", "-u", "alice", "--json").stdout)
    victim = listed[0]["id"]
    assert vmem("ltm", "delete", "-u", "alice", "--id", victim, "-y").exit_code == 0
    delete = entries()[0]
    assert (delete["command"], delete["counts"], delete["ids"]) == ("ltm delete", {"memories": 1}, [victim])

    export = tmp_path / "export.jsonl"
    assert vmem("ltm", "export", "-u", "alice", "-o", str(export)).exit_code == 0
    assert vmem("ltm", "import", str(export), "--index", "other").exit_code == 0
    imp = entries()[0]
    assert (imp["command"], imp["counts"], imp["store"]) == ("ltm import", {"memories": 1}, "local index other")
    assert vmem("ltm", "copy", "--from-backend", "local", "--to-backend", "local", "--to-index", "third").exit_code == 0
    copy = entries()[0]
    assert (copy["command"], copy["counts"]) == ("ltm copy", {"memories": 1})  # the same text in both

    assert vmem("forget", "alice", "--dry-run").exit_code == 0
    assert entries()[0]["command"] == "ltm copy"
    result = vmem("forget", "alice", "-y")
    assert result.exit_code == 0, result.stderr
    forget = entries()[0]
    assert forget["command"] == "forget" and forget["counts"] == {"memories": 3}
    assert [e["command"] for e in entries()] == ["forget", "ltm copy", "ltm import", "ltm delete", "ltm save"]


def test_a_failed_save_records_what_it_committed_with_its_exit_code(tmp_path: Path) -> None:
    bad = session("s2", texts=("half an emoji \ud83d",))
    file = tmp_path / "s.jsonl"
    file.write_text(json.dumps(session("s1")) + "\n" + json.dumps(bad, ensure_ascii=True) + "\n")
    result = vmem("ltm", "save", str(file))
    assert result.exit_code == 1
    [entry] = entries()
    assert (entry["outcome"], entry["exit_code"], entry["counts"]) == ("failed", 1, {"sessions": 1, "memories": 1})


def test_an_interrupted_change_records_what_it_committed(tmp_path: Path) -> None:
    settings = HistorySettings()
    stopped = Interrupted("interrupted: 2 of 5 sessions were deleted")
    stopped.committed = {"sessions": 2, "events": 9, "ids": ["a/u/1", "a/u/2"]}
    with pytest.raises(Interrupted), recording(settings, "session delete", "db", argv=["vmem"]):
        raise stopped
    [entry] = entries()
    assert (entry["outcome"], entry["exit_code"], entry["counts"]) == ("interrupted", 130, {"sessions": 2, "events": 9})
    assert entry["ids"] == ["a/u/1", "a/u/2"]
    with pytest.raises(RuntimeError), recording(settings, "session delete", "db", argv=["vmem"]):
        raise RuntimeError("nothing committed")
    assert len(entries()) == 1  # a failure that changed nothing is not a change


def test_postgresql_delete_is_recorded_and_its_password_never_stored(tmp_path: Path, pg_url: str) -> None:
    secret = "Pg-s3cret-pw-1234"
    url = pg_url.replace("postgres@", f"postgres:{secret}@")  # trust auth: any password connects
    imported(tmp_path, url, n=2)
    result = vmem("session", "delete", "app", "alice", "s0", "--db-url", url, "-y")
    assert result.exit_code == 0, result.stderr
    latest = entries()[0]
    assert (latest["command"], latest["counts"]) == ("session delete", {"sessions": 1, "events": 2})
    assert latest["store"].startswith("postgresql://postgres:****@")
    assert "--db-url" in latest["argv"] and any(":****@" in a for a in latest["argv"])
    assert_nowhere(secret)


# --- secrets, mode, links ---------------------------------------------------------------------------


def assert_nowhere(secret: str) -> None:
    folder = history_file().parent
    for name in folder.iterdir():
        if name.name.startswith("history.db"):
            assert secret.encode() not in name.read_bytes(), name


def test_a_configured_api_key_and_url_secrets_in_argv_are_never_stored(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    key = "sk-test-9f8e7d6c5b4a"
    monkeypatch.setenv("MODEL_EMBEDDING_API_KEY", key)
    file = write_sessions(tmp_path / f"{key}.jsonl", [session("s1")])
    assert vmem("session", "import", str(file), "--db-url", str(tmp_path / "db.sqlite")).exit_code == 0
    [entry] = entries()
    assert any("****.jsonl" in a for a in entry["argv"])
    assert_nowhere(key)


def test_mask_argv_masks_secret_options_urls_and_query_keys() -> None:
    argv = [
        "vmem",
        "--api-key",
        "plainkey-1",
        "--token=tok-2",
        "--db-url",
        "postgresql://u:pw-3@h/db",
        "--db-url=mysql://u:pw-4@h/db",
        "https://host/x?api_key=qk-5&x=1",
        "keep-me",
    ]
    shown = " ".join(mask_argv(argv))
    for secret in ("plainkey-1", "tok-2", "pw-3", "pw-4", "qk-5"):
        assert secret not in shown
    assert "keep-me" in shown and "--db-url" in shown
    assert len(mask_argv(["x" * 5000])[0]) == 500
    many = mask_argv(["vmem", *(f"s{i}" for i in range(5000))])
    assert len(many) == 201 and many[-1] == "… 4,801 more arguments"


def test_history_file_is_private_append_only_and_in_the_data_directory(tmp_path: Path) -> None:
    imported(tmp_path)
    path = history_file()
    assert path.parent == Path(os.environ["XDG_DATA_HOME"]) / "vmem"  # beside the replay ledger
    for name in path.parent.iterdir():
        if name.name.startswith("history.db"):
            assert stat.S_IMODE(name.stat().st_mode) == 0o600, name
    with sqlite3.connect(path) as conn, pytest.raises(sqlite3.DatabaseError, match="append-only"):
        conn.execute("UPDATE changes SET outcome = 'ok'")
    with sqlite3.connect(path) as conn, pytest.raises(sqlite3.DatabaseError, match="append-only"):
        conn.execute("DELETE FROM changes")


def warnings_of(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if "history" in line and "warning" in line]


def test_a_link_at_the_history_path_is_refused_and_the_change_still_made(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = tmp_path / "elsewhere.db"
    target.write_bytes(b"")
    link = tmp_path / "history.db"
    link.symlink_to(target)
    monkeypatch.setenv("VMEM_HISTORY_PATH", str(link))
    file = write_sessions(tmp_path / "s.jsonl", [session("s1")])
    result = vmem("session", "import", str(file), "--db-url", str(tmp_path / "db.sqlite"))
    assert result.exit_code == 0
    assert len(warnings_of(result.stderr)) == 1 and "symbolic link" in result.stderr
    assert target.read_bytes() == b"" and link.is_symlink()
    assert "imported 1 session" in result.stderr


@pytest.mark.parametrize("damage", ["corrupt", "locked", "unwritable"])
def test_a_damaged_history_never_loses_the_change_nor_changes_the_exit_code(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, damage: str
) -> None:
    url = imported(tmp_path)
    path = history_file()
    holder = None
    if damage == "corrupt":
        path.unlink()
        for suffix in ("-wal", "-shm"):
            path.with_name(path.name + suffix).unlink(missing_ok=True)
        path.write_bytes(b"this is not a database" * 100)
    elif damage == "locked":
        holder = sqlite3.connect(path, isolation_level=None)
        holder.execute("BEGIN EXCLUSIVE")
    else:
        monkeypatch.setenv("VMEM_HISTORY_PATH", "/proc/vmem-history/history.db")
    result = vmem("session", "delete", "app", "alice", "s0", "--db-url", url, "-y")
    if holder is not None:
        holder.execute("ROLLBACK")
        holder.close()
    assert result.exit_code == 0
    assert "deleted 1 session" in result.stderr
    assert len(warnings_of(result.stderr)) == 1, result.stderr
    assert "not recorded" in result.stderr
    missing = vmem("session", "delete", "app", "alice", "s0", "--db-url", url, "-y")
    assert missing.exit_code == 3  # its own exit code, whatever the history


def test_history_enabled_false_records_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VMEM_HISTORY_ENABLED", "false")
    imported(tmp_path)
    assert not history_file().exists()


def _append_many(path: str, worker: int) -> None:
    settings = HistorySettings(path=path)
    for i in range(15):
        change = Change("session delete", "db")
        change.count(sessions=1)
        change.add_ids([f"{worker}-{i}"])
        assert record(settings, change, argv=["vmem"]) is not None


def test_concurrent_processes_append_safely(tmp_path: Path) -> None:
    path = str(tmp_path / "h.db")
    context = multiprocessing.get_context("spawn")
    workers = [context.Process(target=_append_many, args=(path, w)) for w in range(4)]
    for p in workers:
        p.start()
    for p in workers:
        p.join(120)
    assert [p.exitcode for p in workers] == [0, 0, 0, 0]
    found = HistoryLog(Path(path)).entries()
    assert sorted(e["ids"][0] for e in found) == sorted(f"{w}-{i}" for w in range(4) for i in range(15))


# --- vmem history -------------------------------------------------------------------------------


def seeded(monkeypatch: pytest.MonkeyPatch) -> None:
    settings = HistorySettings()
    for command, n in (("session delete", 2), ("ltm save", 5), ("ltm delete", 1)):
        change = Change(command, "store")
        change.count(memories=n)
        record(settings, change, argv=["vmem", *command.split()])
    erasure = Change("forget", "redis index app; sessions db")
    erasure.count(memories=3, sessions=1)
    erasure.receipt = {"deleted": ["m1", "m2", "m3"], "verified": {"left": 0}}
    record(settings, erasure, argv=["vmem", "forget", "alice"])


def test_history_lists_filters_and_formats(monkeypatch: pytest.MonkeyPatch) -> None:
    seeded(monkeypatch)
    listed = json.loads(vmem("history", "--json").stdout)
    assert [e["command"] for e in listed] == ["forget", "ltm delete", "ltm save", "session delete"]
    assert [e["n"] for e in listed] == [4, 3, 2, 1]
    ltm = json.loads(vmem("history", "--command", "ltm", "--json").stdout)
    assert [e["command"] for e in ltm] == ["ltm delete", "ltm save"]
    assert json.loads(vmem("history", "--command", "ltm save", "--json").stdout)[0]["n"] == 2
    assert json.loads(vmem("history", "--limit", "1", "--json").stdout)[0]["n"] == 4
    me = listed[0]["os_user"]
    assert len(json.loads(vmem("history", "-u", me, "--json").stdout)) == 4
    assert json.loads(vmem("history", "-u", "nobody-else", "--json").stdout) == []
    assert json.loads(vmem("history", "--since", "2099-01-01", "--json").stdout) == []
    assert len(json.loads(vmem("history", "--since", "1d", "--json").stdout)) == 4

    lines = vmem("history", "--jsonl").stdout.splitlines()
    assert [json.loads(x)["n"] for x in lines] == [4, 3, 2, 1]
    rows = list(csv.DictReader(io.StringIO(vmem("history", "--csv").stdout)))
    assert rows[0]["command"] == "forget" and rows[0]["changed"] == "3 memories, 1 session"
    tsv = vmem("history", "--tsv").stdout.splitlines()
    assert tsv[0].split("\t")[:4] == ["n", "when", "os_user", "command"] and len(tsv) == 5
    assert vmem("history", "--since", "yesterday").exit_code == 2


def test_history_table_is_one_line_per_entry_at_80_columns(monkeypatch: pytest.MonkeyPatch) -> None:
    seeded(monkeypatch)
    env = {"COLUMNS": "80", "TTY_COMPATIBLE": "1", "NO_COLOR": "1"}
    result = CliRunner().invoke(app, ["history"], env=env)
    assert result.exit_code == 0, result.stderr
    out = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", result.stdout)
    lines = [line for line in out.splitlines() if "│" in line]
    assert max(len(line) for line in out.splitlines()) <= 80
    assert len(lines) == 4  # one line per entry
    for n, command in ((4, "forget"), (3, "ltm delete"), (2, "ltm save"), (1, "session delete")):
        assert sum(line.split("│")[0].strip() == str(n) and command in line for line in lines) == 1, result.stdout


def test_history_show_prints_one_entry_whole_with_its_receipt(monkeypatch: pytest.MonkeyPatch) -> None:
    seeded(monkeypatch)
    shown = json.loads(vmem("history", "show", "4", "--json").stdout)
    assert shown["receipt"] == {"deleted": ["m1", "m2", "m3"], "verified": {"left": 0}}
    assert shown["argv"] == ["vmem", "forget", "alice"] and shown["store"] == "redis index app; sessions db"
    people = vmem("history", "show", "4")
    assert people.exit_code == 0 and "receipt" in people.stdout and "m2" in people.stdout
    assert vmem("history", "show", "99").exit_code == 3
    assert vmem("history", "show", "x").exit_code == 2


@pytest.mark.parametrize(
    ("args", "code", "said"),
    [
        (["show", "99999999999999999999"], 3, "no such entry"),  # well formed, more than sqlite holds
        (["show", "²"], 2, "show N"),  # str.isdigit() takes it, int() does not
        (["show", "0"], 3, "no such entry"),
        (["-n", "99999999999999999999"], 2, "--limit"),
    ],
)
def test_history_bad_numbers_are_one_line(
    monkeypatch: pytest.MonkeyPatch, args: list[str], code: int, said: str
) -> None:
    seeded(monkeypatch)
    result = vmem("history", *args)
    assert result.exit_code == code and said in result.stderr, result.stderr
    assert "unexpected" not in result.stderr and len(result.stderr.strip().splitlines()) == 1


def test_history_of_nothing_is_empty_and_config_show_names_the_settings() -> None:
    assert json.loads(vmem("history", "--json").stdout) == []
    shown = vmem("config", "show", "--json")
    keys = json.loads(shown.stdout)
    assert keys["history.path"]["env"] == "VMEM_HISTORY_PATH"
    assert keys["history.enabled"]["env"] == "VMEM_HISTORY_ENABLED" and keys["history.enabled"]["value"] is True


def test_a_forget_stopped_by_a_locked_session_database_records_the_memories_it_deleted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = tmp_path / "sessions.db"
    url = imported(tmp_path, str(db), n=1)
    file = write_sessions(tmp_path / "m.jsonl", [session("s0", texts=(PEANUTS, "fact 0"))])
    assert vmem("ltm", "save", str(file)).exit_code == 0
    monkeypatch.setenv("VMEM_SQLITE_BUSY_TIMEOUT", "0.2")
    with sqlite3.connect(db, isolation_level=None) as holder:
        holder.execute("PRAGMA journal_mode=WAL")  # readers go on; the delete waits for the writer
        holder.execute("BEGIN IMMEDIATE")
        result = vmem("forget", "alice", "--db-url", url, "-y")
        holder.execute("ROLLBACK")
    assert result.exit_code == 1, result.stderr
    entry = entries()[0]
    assert (entry["command"], entry["outcome"], entry["exit_code"]) == ("forget", "failed", 1)
    assert entry["counts"] == {"memories": 2}  # gone before the session database refused
