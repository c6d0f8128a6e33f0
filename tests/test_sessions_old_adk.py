"""Session databases written by real old google-adk releases, each in its own venv.

`.ci/test` makes `.venv-adk/<version>` with that release installed; `tests/old_adk_writer.py`
runs there and writes sessions the way an agent does (text, tool calls and responses, state
deltas at all three scopes, artifact deltas, transfers), then dumps what that ADK's own
`get_session` returns. A version whose venv is missing is skipped with a loud reason.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from veadk_mem.cli.app import app

ROOT = Path(__file__).resolve().parents[1]
WRITER = Path(__file__).resolve().parent / "old_adk_writer.py"
# version -> the v0 column set it writes (None: the JSON layout)
RELEASES = {"1.10.0": "1.0-1.14", "1.15.1": "1.15-1.17", "1.18.0": "1.18", "1.21.0": "1.19-1.21", "1.22.1": None}


def old_python(version: str) -> Path:
    python = ROOT / ".venv-adk" / version / "bin" / "python"
    if not python.exists():
        pytest.skip(f"*** google-adk {version} is not installed in .venv-adk/{version} (bash .ci/test makes it) ***")
    return python


def run_old(version: str, *args: str) -> None:
    done = subprocess.run([str(old_python(version)), str(WRITER), *args], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]


def vmem(*args: str, input: str | None = None, env: dict[str, str] | None = None) -> Any:
    return CliRunner().invoke(app, list(args), input=input, env=env)


def write_with(version: str, tmp_path: Path) -> tuple[str, Path, dict[str, Any]]:
    """(version, sqlite database that release wrote, what its get_session returned for each session)."""
    db = tmp_path / f"adk-{version}.db"
    out = tmp_path / "adk.json"
    run_old(version, "write", f"sqlite:///{db}", str(out))
    return version, db, json.loads(out.read_text())


@pytest.fixture(params=list(RELEASES), ids=lambda v: f"adk-{v}")
def written(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[str, Path, dict[str, Any]]:
    """(version, database, what that ADK's get_session returned for each session)."""
    return write_with(request.param, tmp_path)


def same_session(got: dict[str, Any], expected: dict[str, Any]) -> bool:
    """Equal, but for event times within a microsecond: ADK 1.22 rebuilds an event's time from the
    DATETIME column (microseconds), where current ADK, and vmem, read the exact epoch in event_data."""
    got, expected = json.loads(json.dumps(got)), json.loads(json.dumps(expected))
    if len(got.get("events", [])) != len(expected.get("events", [])):
        return False
    for a, b in zip(got.get("events", []), expected.get("events", []), strict=True):
        if abs(a.pop("timestamp", 0) - b.pop("timestamp", 0)) > 2e-6:
            return False
    return got == expected


def get_json(db: Path, user: str, sid: str) -> dict[str, Any]:
    result = vmem("session", "get", "old_app", user, sid, "--db-url", str(db), "--json")
    assert result.exit_code == 0, result.stderr
    return dict(json.loads(result.stdout))


def test_vmem_reads_exactly_what_each_release_reads(written: tuple[str, Path, dict[str, Any]]) -> None:
    version, db, adk = written
    assert len(adk) == 4
    for sid, expected in adk.items():
        assert same_session(get_json(db, sid.split("-")[0], sid), expected), f"google-adk {version}: {sid}"
    listed = vmem("--json", "session", "list", "--db-url", str(db))
    assert listed.exit_code == 0, listed.stderr
    assert sorted(s["id"] for s in json.loads(listed.stdout)) == sorted(adk)
    # compactions are counted from the stored JSON; a pickle layout cannot say (null), 1.22 can (0)
    pickled = RELEASES[version] is not None
    counted = vmem("--json", "session", "list", "--db-url", str(db), "--compactions")
    assert {s["compactionCount"] for s in json.loads(counted.stdout)} == ({None} if pickled else {0})
    export = vmem("session", "export", "--db-url", str(db))
    assert export.exit_code == 0, export.stderr
    sessions = [json.loads(x) for x in export.stdout.splitlines() if '"events"' in x]
    assert {s["id"]: len(s["events"]) for s in sessions} == {k: len(v["events"]) for k, v in adk.items()}
    policy = vmem("--json", "policy", "test", "--from-store", "old_app", "alice", "alice-s0", "--db-url", str(db))
    assert policy.exit_code == 0, policy.stderr
    assert any("alice says hello" in m for m in json.loads(policy.stdout)["saved"])
    save = vmem("ltm", "save", "--from-store", "old_app", "alice", "alice-s1", "--db-url", str(db), "--dry-run")
    assert save.exit_code == 0, save.stderr


def test_doctor_names_the_releases_of_the_layout(written: tuple[str, Path, dict[str, Any]]) -> None:
    version, db, _ = written
    result = vmem("--json", "doctor", env={"SHORT_TERM_MEMORY_DB_URL": str(db)})
    assert result.exit_code in (0, 1), result.stderr
    checks = {c["name"].split(" ")[0]: c for c in json.loads(result.stdout)}
    detail = checks["short_term_memory"]["detail"]
    releases = RELEASES[version]
    if releases is None:
        assert "schema v1" in detail
    else:
        assert f"the column set of ADK {releases}" in detail, detail


def test_export_import_into_a_new_database_reads_equal(
    written: tuple[str, Path, dict[str, Any]], tmp_path: Path
) -> None:
    """Export from the old release's database, import into a new one (the JSON layout)."""
    import asyncio

    from google.adk.sessions import DatabaseSessionService

    version, db, adk = written
    backup = tmp_path / "backup.jsonl"
    assert vmem("session", "export", "--db-url", str(db), "-o", str(backup)).exit_code == 0
    new = tmp_path / "new.db"
    result = vmem("session", "import", str(backup), "--db-url", str(new))
    assert result.exit_code == 0, result.stderr
    for sid, expected in adk.items():
        assert same_session(get_json(new, sid.split("-")[0], sid), expected), f"google-adk {version}: {sid}"

    async def current() -> dict[str, Any]:
        service = DatabaseSessionService(db_url=f"sqlite+aiosqlite:///{new}")
        got = {}
        for sid in adk:
            session = await service.get_session(app_name="old_app", user_id=sid.split("-")[0], session_id=sid)
            assert session is not None
            got[sid] = session
        return got

    for sid, session in asyncio.run(current()).items():
        expected = adk[sid]
        assert session.state == expected["state"]
        assert [e.id for e in session.events] == [e["id"] for e in expected["events"]]
        texts = [p.text for e in session.events if e.content for p in e.content.parts or [] if p.text]
        assert texts == [
            p["text"] for e in expected["events"] if e.get("content") for p in e["content"]["parts"] if "text" in p
        ]
        deltas = [e.actions.state_delta for e in session.events]
        assert deltas == [e.get("actions", {}).get("stateDelta", {}) for e in expected["events"]]


def test_delete_and_import_back_in_place_keeps_the_old_release_working(
    written: tuple[str, Path, dict[str, Any]], tmp_path: Path
) -> None:
    version, db, adk = written
    backup = tmp_path / "backup.jsonl"
    assert vmem("session", "export", "--db-url", str(db), "-o", str(backup)).exit_code == 0
    result = vmem("session", "delete", "old_app", "bob", "bob-s1", "--db-url", str(db), "--yes")
    assert result.exit_code == 0, result.stderr
    result = vmem("session", "import", str(backup), "--db-url", str(db))
    assert result.exit_code == 0, result.stderr
    again = tmp_path / "again.json"
    run_old(version, "read", f"sqlite:///{db}", str(again))
    restored = json.loads(again.read_text())
    assert sorted(restored) == sorted(adk)
    for sid in adk:
        assert same_session(restored[sid], adk[sid]), f"google-adk {version} reads {sid} differently after the restore"
    run_old(version, "append", f"sqlite:///{db}", "old_app", "bob", "bob-s1")
    events = get_json(db, "bob", "bob-s1")["events"]
    assert events[-1]["content"]["parts"][0]["text"] == "one more thing"
    assert len(events) == len(adk["bob-s1"]["events"]) + 1


def test_a_field_an_old_layout_cannot_hold_is_dropped_with_one_warning(tmp_path: Path) -> None:
    run_old("1.15.1", "write", f"sqlite:///{tmp_path / 'old.db'}", str(tmp_path / "adk.json"))
    session = {
        "id": "with-usage",
        "appName": "old_app",
        "userId": "carol",
        "state": {},
        "lastUpdateTime": 1_790_000_100.0,
        "events": [
            {
                "id": f"e{i}",
                "invocationId": "inv",
                "author": "agent",
                "timestamp": 1_790_000_000.0 + i,
                "content": {"role": "model", "parts": [{"text": f"answer {i}"}]},
                "usageMetadata": {"totalTokenCount": 10 + i},
                "customMetadata": {"k": i},
            }
            for i in range(3)
        ],
    }
    file = tmp_path / "in.jsonl"
    file.write_text(json.dumps(session) + "\n")
    result = vmem("session", "import", str(file), "--db-url", str(tmp_path / "old.db"))
    assert result.exit_code == 0, result.stderr
    warnings = [line for line in result.stderr.splitlines() if "dropped" in line]
    assert warnings == [
        "vmem: warning: usageMetadata dropped from 3 event(s): "
        "the tables of ADK 1.15-1.17 have no usage_metadata column"
    ]
    events = get_json(tmp_path / "old.db", "carol", "with-usage")["events"]
    assert [e.get("customMetadata") for e in events] == [{"k": 0}, {"k": 1}, {"k": 2}]  # 1.15 has that column
    assert all("usageMetadata" not in e for e in events)


# --- a pickle-era database on PostgreSQL and MariaDB -------------------------------------------

SERVER_RELEASE = "1.15.1"


@pytest.fixture(params=["postgresql", "mysql"])
def on_server(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[str, str, dict[str, Any]]:
    """(vmem's async URL, the old ADK's sync URL, what its get_session returned) of a fresh database."""
    python = old_python(SERVER_RELEASE)
    if subprocess.run([str(python), "-c", "import psycopg2, pymysql"], capture_output=True).returncode:
        pytest.skip(f"*** psycopg2 / pymysql are not in .venv-adk/{SERVER_RELEASE} (bash .ci/test adds them) ***")
    url = str(request.getfixturevalue("pg_url" if request.param == "postgresql" else "mysql_url"))
    old = url.replace("+asyncpg", "+psycopg2").replace("+aiomysql", "+pymysql")
    out = tmp_path / "adk.json"
    run_old(SERVER_RELEASE, "write", old, str(out))
    return url, old, json.loads(out.read_text())


def test_a_pickle_era_database_on_a_server(on_server: tuple[str, str, dict[str, Any]], tmp_path: Path) -> None:
    """ADK 1.15's tables on PostgreSQL / MariaDB: get equals its get_session; export -> import into
    a new database reads equal; delete one session and import it back, and the old ADK reads
    everything equal and can still append."""
    url, old, adk = on_server

    def get(db: str, sid: str) -> dict[str, Any]:
        result = vmem("session", "get", "old_app", sid.split("-")[0], sid, "--db-url", db, "--json")
        assert result.exit_code == 0, result.stderr
        return dict(json.loads(result.stdout))

    for sid, expected in adk.items():
        assert same_session(get(url, sid), expected), sid
    detail = vmem("doctor", "--db-url", url).stdout
    assert "the column set of ADK 1.15-1.17" in detail, detail
    backup = tmp_path / "backup.jsonl"
    assert vmem("session", "export", "--db-url", url, "-o", str(backup)).exit_code == 0
    new = str(tmp_path / "new.db")
    assert vmem("session", "import", str(backup), "--db-url", new).exit_code == 0
    for sid, expected in adk.items():
        assert same_session(get(new, sid), expected), sid
    result = vmem("session", "delete", "old_app", "bob", "bob-s1", "--db-url", url, "--yes")
    assert result.exit_code == 0, result.stderr
    result = vmem("session", "import", str(backup), "--db-url", url)
    assert result.exit_code == 0, result.stderr
    again = tmp_path / "again.json"
    run_old(SERVER_RELEASE, "read", old, str(again))
    restored = json.loads(again.read_text())
    assert sorted(restored) == sorted(adk)
    for sid in adk:
        assert same_session(restored[sid], adk[sid]), f"google-adk {SERVER_RELEASE} reads {sid} differently"
    run_old(SERVER_RELEASE, "append", old, "old_app", "bob", "bob-s1")
    events = get(url, "bob-s1")["events"]
    assert events[-1]["content"]["parts"][0]["text"] == "one more thing"
    assert len(events) == len(adk["bob-s1"]["events"]) + 1
