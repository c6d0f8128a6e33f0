"""Output rules that hold for every command: global flags anywhere, one-line usage errors,
real metavars, data on stdout and the rest on stderr, completion from the installed vmem,
a wheel without development generators, compaction events, import's dry run."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from typer.testing import CliRunner

from veadk_mem.cli.app import app
from veadk_mem.cli.completion import walk
from veadk_mem.cli.docs import ROOT, _help_text, command_tree

EXAMPLES = ROOT / "docs" / "examples" / "sessions"


@pytest.fixture
def db(tmp_path: Path, runner: CliRunner) -> str:
    path = str(tmp_path / "s.db")
    result = runner.invoke(app, ["session", "import", str(EXAMPLES / "support_app-sessions.json"), "--db-url", path])
    assert result.exit_code == 0, result.output
    return path


def test_global_flags_work_after_the_subcommand(runner: CliRunner, db: str, tmp_path: Path) -> None:
    before = runner.invoke(app, ["--json", "-q", "session", "list", "--db-url", db])
    after = runner.invoke(app, ["session", "list", "--db-url", db, "--json", "-q"])
    assert after.exit_code == 0 and json.loads(after.stdout) == json.loads(before.stdout)
    config = tmp_path / "vmem.toml"
    config.write_text("[long_term_memory]\ntop_k = 9\n", encoding="utf-8")
    rows = json.loads(runner.invoke(app, ["config", "show", "--json", "-c", str(config)]).stdout)
    assert rows["long_term_memory.top_k"]["value"] == 9
    verbose = runner.invoke(app, ["session", "list", "--db-url", str(tmp_path / "no" / "such.db"), "-v"])
    assert verbose.exit_code != 0


def test_usage_errors_read_like_vmem_errors(runner: CliRunner) -> None:
    result = runner.invoke(app, ["session", "list", "--bogus"])
    assert result.exit_code == 2
    lines = result.stderr.splitlines()
    assert lines[0].startswith("vmem: error: session list: No such option: --bogus")
    assert lines[1] == "  hint: see 'vmem session list --help'"
    assert len(lines) == 2 and result.stdout == ""
    missing = runner.invoke(app, ["session", "get", "only-app"])
    assert missing.exit_code == 2 and missing.stderr.startswith("vmem: error: session get: Missing argument")
    unknown = runner.invoke(app, ["sesion", "list"])
    assert unknown.exit_code == 2 and unknown.stderr.startswith("vmem: error: No such command")
    both = runner.invoke(app, ["session", "list", "--json", "--csv"])
    assert both.exit_code == 2 and "choose one output format" in both.stderr


def test_help_shows_real_metavars() -> None:
    for node in walk(command_tree()):
        text = _help_text(node)
        usage = text.splitlines()[0]
        assert "{" not in usage and "[[" not in usage, usage
        assert not re.search(r"<(str|int|float|path|list\[str\])>", text), (node.key, text)
    assert _help_text(next(n for n in walk(command_tree()) if n.key == "session get")).startswith(
        "Usage: vmem session get [OPTIONS] APP USER SESSION_ID"
    )
    assert "[PATH]" in _help_text(next(n for n in walk(command_tree()) if n.key == "config init"))


def test_the_delete_plan_goes_to_stderr(runner: CliRunner, db: str) -> None:
    result = runner.invoke(app, ["session", "delete", "--app", "support_app", "--db-url", db])
    assert result.exit_code == 2 and result.stdout == ""  # refused off a terminal: nothing on stdout
    assert "ticket-100" in result.stderr and "--yes" in result.stderr


def test_db_url_on_config_show_and_doctor(runner: CliRunner, db: str) -> None:
    rows = json.loads(runner.invoke(app, ["config", "show", "--db-url", db, "--json"]).stdout)
    assert rows["short_term_memory.db_url"]["value"] == db
    result = runner.invoke(app, ["doctor", "--db-url", db, "--tsv"])
    header = result.stdout.splitlines()[0].split("\t")
    assert header == ["name", "status", "detail"]


def test_import_dry_run_writes_nothing_and_reports_in_snake_case(runner: CliRunner, tmp_path: Path) -> None:
    target = tmp_path / "new.db"
    source = str(EXAMPLES / "support_app-sessions.json")
    result = runner.invoke(app, ["session", "import", source, "--dry-run", "--json", "--db-url", str(target)])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert {k: report[k] for k in ("dry_run", "sessions", "events", "app_states", "user_states")} == {
        "dry_run": True,
        "sessions": 2,
        "events": 7,
        "app_states": 0,
        "user_states": 0,
    }
    assert report["created_tables"] is False  # nothing was created
    assert not target.exists()
    report = json.loads(runner.invoke(app, ["session", "import", source, "--json", "--db-url", str(target)]).stdout)
    assert report["sessions"] == 2 and report["created_tables"] is True and "createdTables" not in report


COMPACTED = {
    "id": "c1",
    "appName": "support_app",
    "userId": "cust-009",
    "events": [
        {"id": "e1", "author": "user", "timestamp": 100.0, "content": {"role": "user", "parts": [{"text": "hi"}]}},
        {"id": "e2", "author": "bot", "timestamp": 110.0, "content": {"role": "model", "parts": [{"text": "hello"}]}},
        {
            "id": "e3",
            "author": "user",
            "timestamp": 120.0,
            "actions": {
                "compaction": {
                    "startTimestamp": 100.0,
                    "endTimestamp": 110.0,
                    "compactedContent": {"role": "model", "parts": [{"text": "They greeted each other."}]},
                }
            },
        },
    ],
}


def test_a_compaction_event_shows_as_one(runner: CliRunner, tmp_path: Path) -> None:
    source = tmp_path / "c.json"
    source.write_text(json.dumps(COMPACTED), encoding="utf-8")
    db = str(tmp_path / "c.db")
    assert runner.invoke(app, ["session", "import", str(source), "--db-url", db]).exit_code == 0
    result = runner.invoke(app, ["session", "get", "support_app", "cust-009", "c1", "--db-url", db, "--tsv"])
    rows = [line.split("\t") for line in result.stdout.splitlines()]
    header = rows[0]
    last = dict(zip(header, rows[-1], strict=True))
    assert last["types"] == "compaction"
    assert last["text"].startswith("compaction of events #1-#2 (")
    assert last["text"].endswith("): They greeted each other.")
    plain = runner.invoke(app, ["session", "get", "support_app", "cust-009", "c1", "--db-url", db]).stdout
    assert "empty" not in plain and "They greeted each other." in plain
    key = ["session", "get", "support_app", "cust-009", "c1", "--db-url", db]
    lines = runner.invoke(app, [*key, "--jsonl"]).stdout.splitlines()
    assert [json.loads(line) for line in lines] == json.loads(runner.invoke(app, [*key, "--json"]).stdout)["events"]
    assert "compactedContent" in lines[-1]  # ADK's own objects stay camelCase


def _bash(script: str) -> list[str]:
    out = subprocess.run(["bash", "-c", script], capture_output=True, text=True, check=True)
    return [w for w in out.stdout.splitlines() if w]


def test_completion_command_completes_option_values(runner: CliRunner, tmp_path: Path) -> None:
    config = tmp_path / "vmem.toml"
    config.write_text('[policy.strict]\npreset = "custom"\ninclude_roles = ["user"]\n', encoding="utf-8")
    result = runner.invoke(app, ["-c", str(config), "completion", "bash"])
    assert result.exit_code == 0 and "install:" in result.stderr
    script = tmp_path / "vmem.bash"
    script.write_text(result.stdout, encoding="utf-8")

    def complete(line: str) -> list[str]:
        words = line.split(" ")
        return _bash(
            f"source {script}\nCOMP_WORDS=({' '.join(repr(w) for w in words)}); COMP_CWORD={len(words) - 1}\n"
            '_vmem; printf "%s\\n" "${COMPREPLY[@]}"\n'
        )

    assert complete("vmem policy test --policy ") == ["default", "all", "custom", "strict"]
    assert complete("vmem ltm save -p s") == ["strict"]
    assert complete("vmem completion ") == ["bash", "zsh", "fish"]
    assert complete("vmem session list --j") == ["--json", "--jsonl"]
    bad = runner.invoke(app, ["completion", "tcsh"])
    assert bad.exit_code == 2 and "bash, zsh or fish" in bad.stderr


def test_completion_install_writes_where_each_shell_looks(
    runner: CliRunner, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("XDG_DATA_HOME", raising=False)
    monkeypatch.delenv("XDG_CONFIG_HOME", raising=False)
    where = {
        "bash": tmp_path / ".local/share/bash-completion/completions/vmem",
        "zsh": tmp_path / ".zfunc/_vmem",
        "fish": tmp_path / ".config/fish/completions/vmem.fish",
    }
    for shell, path in where.items():
        printed = runner.invoke(app, ["completion", shell]).stdout
        result = runner.invoke(app, ["completion", shell, "--install"])
        assert result.exit_code == 0 and str(path) in result.stderr and result.stdout == "", result.output
        assert path.read_text(encoding="utf-8") == printed
        assert not path.with_name(path.name + ".part").exists()
    assert "fpath" in runner.invoke(app, ["completion", "zsh", "--install"]).stderr
    # Typer's own flag, which vmem replaces, points at the command that does it
    result = runner.invoke(app, ["--install-completion"])
    assert result.exit_code == 2 and "vmem completion bash|zsh|fish" in result.stderr


def test_the_wheel_has_no_dev_generators_and_completion_works_from_it(tmp_path: Path) -> None:
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(tmp_path), str(ROOT)],
        check=True,
        capture_output=True,
    )
    (wheel,) = tmp_path.glob("veadk_mem-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert "veadk_mem/cli/completion.py" in names and "veadk_mem/cli/app.py" in names
    assert "veadk_mem/cli/docs.py" not in names
    unpacked = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(unpacked)
    code = (
        f"import sys; sys.path.insert(0, {str(unpacked)!r}); import veadk_mem; "
        f"assert veadk_mem.__file__.startswith({str(unpacked)!r}); "
        "sys.argv = ['vmem', 'completion', 'fish']; from veadk_mem.cli.app import main; main()"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert "complete -c vmem" in out.stdout


def test_a_closed_pipe_stops_quietly(db: str) -> None:
    vmem = Path(sys.executable).with_name("vmem")
    proc = subprocess.Popen(
        [str(vmem), "session", "list", "--db-url", db, "--jsonl"], stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()  # as `vmem ... | head -0` would
    assert proc.wait() in (0, 141)  # 0 when everything was written before the close
    assert proc.stderr.read() == b""


@pytest.mark.parametrize("target", ["sqlite_service", "sqlite", "postgresql", "mysql"])
def test_session_list_counts_the_compactions_adk_wrote(
    runner: CliRunner, tmp_path: Path, request: pytest.FixtureRequest, target: str
) -> None:
    """ADK itself appends a compaction event; a text merely naming one is not counted."""
    import asyncio

    from google.adk.events import Event, EventActions
    from google.adk.events.event_actions import EventCompaction
    from google.genai import types

    from tests.sessions_helpers import adk_service

    url = {
        "sqlite_service": str(tmp_path / "adk.db"),
        "sqlite": f"sqlite+aiosqlite:///{tmp_path / 'adk.db'}",
    }.get(target) or str(request.getfixturevalue("pg_url" if target == "postgresql" else "mysql_url"))

    def text(author: str, words: str, t: float) -> Event:
        role = "user" if author == "user" else "model"
        return Event(author=author, timestamp=t, content=types.Content(role=role, parts=[types.Part(text=words)]))

    async def write() -> None:
        service = adk_service(url)
        try:
            s = await service.create_session(app_name="app", user_id="u", session_id="compacted")
            await service.append_event(s, text("user", "hi", 100.0))
            await service.append_event(s, text("bot", 'a "compaction" is only a word here', 110.0))
            summary = types.Content(role="model", parts=[types.Part(text="They greeted each other.")])
            compaction = EventCompaction(start_timestamp=100.0, end_timestamp=110.0, compacted_content=summary)
            await service.append_event(
                s, Event(author="user", timestamp=120.0, actions=EventActions(compaction=compaction))
            )
            plain = await service.create_session(app_name="app", user_id="u", session_id="plain")
            await service.append_event(plain, text("user", 'say "compaction"', 130.0))
        finally:
            await service.close()

    asyncio.run(write())
    result = runner.invoke(app, ["session", "list", "--db-url", url, "--json", "--compactions"])
    assert result.exit_code == 0, result.output
    counts = {s["id"]: (s["eventCount"], s["compactionCount"]) for s in json.loads(result.stdout)}
    assert counts == {"compacted": (3, 1), "plain": (1, 0)}
    rows = runner.invoke(app, ["session", "list", "--db-url", url, "--tsv", "--compactions"]).stdout.splitlines()
    header = rows[0].split("\t")
    by_id = {r["id"]: r for r in (dict(zip(header, line.split("\t"), strict=True)) for line in rows[1:])}
    assert by_id["compacted"]["compaction_count"] == "1" and by_id["plain"]["compaction_count"] == "0"
    table = runner.invoke(app, ["session", "list", "--db-url", url, "-a", "app", "-u", "u", "--compactions"]).stdout
    header = table.splitlines()[0].split()
    assert header[2:5] == ["id", "event_count", "compaction_count"]  # --tsv's names: awk's $3 is the id
    plain = {line.split()[2]: line.split()[4] for line in table.splitlines()[1:]}
    assert plain == {"compacted": "1", "plain": "0"}  # numbers, so awk's fields stay put
    # a list with none draws no column of zeros for people; TSV keeps its field
    none = runner.invoke(app, ["session", "list", "--db-url", url, "-a", "app", "-u", "u", "-n", "1", "--compactions"])
    assert "compactions" not in none.stdout.splitlines()[0]
    # without --compactions no count is made: no column, in TSV either
    tsv = runner.invoke(app, ["session", "list", "--db-url", url, "--tsv"]).stdout.splitlines()
    assert "compaction_count" not in tsv[0].split("\t") and len(tsv) == 3


# --- one contract for scripts (#23 item 3) ------------------------------------------------

SUPPORT = str(EXAMPLES / "support_app-sessions.json")


def _camel_keys(data: object) -> set[str]:
    """Every camelCase key anywhere in a JSON document."""
    if isinstance(data, dict):
        return {k for k in data if re.search("[a-z][A-Z]", k)} | {k for v in data.values() for k in _camel_keys(v)}
    if isinstance(data, list):
        return {k for v in data for k in _camel_keys(v)}
    return set()


def test_vmem_reports_are_snake_case_everywhere(
    runner: CliRunner, db: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """vmem's own reports (not ADK's objects) in snake_case, in every command that writes one."""
    monkeypatch.setenv("MODEL_EMBEDDING_PROVIDER", "hash")
    export = str(tmp_path / "ltm.jsonl")
    commands = [
        ["session", "import", SUPPORT, "--dry-run", "--db-url", db],
        ["session", "delete", "--app", "support_app", "--dry-run", "--db-url", db],
        ["session", "export", "-o", str(tmp_path / "s.jsonl"), "--db-url", db],
        ["session", "stats", "--db-url", db],
        ["session", "upgrade", "--dry-run", "--db-url", db],
        ["ltm", "save", SUPPORT],
        ["ltm", "export", "--all-users", "-o", export],
        ["ltm", "import", export, "--dry-run"],
        ["ltm", "delete", "-u", "cust-001", "--all", "--dry-run"],
        ["forget", "cust-001", "--dry-run", "--db-url", db],
        ["policy", "test", SUPPORT],
        ["doctor", "--db-url", db],
        ["config", "path"],
    ]
    for args in commands:
        result = runner.invoke(app, [*args, "--json"])
        assert result.exit_code == 0, (args, result.output)
        assert _camel_keys(json.loads(result.stdout)) == set(), args


def test_summaries_go_to_stderr_in_every_command(
    runner: CliRunner, db: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What a command did is a summary on stderr; --json prints it on stdout as the report."""
    monkeypatch.setenv("MODEL_EMBEDDING_PROVIDER", "hash")
    export = str(tmp_path / "ltm.jsonl")
    commands = [
        ["session", "import", SUPPORT, "--db-url", str(tmp_path / "other.db")],
        ["session", "export", "-o", str(tmp_path / "s.jsonl"), "--db-url", db],
        ["ltm", "save", SUPPORT],
        ["ltm", "export", "--all-users", "-o", export],
        ["ltm", "import", export, "--index", "copy"],
        ["ltm", "delete", "-u", "cust-002", "-a", "support_app", "--all", "--yes"],
        ["ltm", "delete", "-u", "cust-001", "-a", "copy", "--all", "--yes"],
        ["forget", "cust-001", "--yes", "--db-url", db],
    ]
    for args in commands:
        result = runner.invoke(app, args)
        assert result.exit_code == 0, (args, result.output)
        assert result.stdout == "" and result.stderr.strip(), (args, result.stdout)
        if args[:2] == ["ltm", "delete"]:  # the table of what went, then the count
            assert result.stderr.startswith("deleted\nindex") and "\ndeleted " in result.stderr


def test_a_command_writing_a_file_prints_its_report_under_json(
    runner: CliRunner, db: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MODEL_EMBEDDING_PROVIDER", "hash")
    assert runner.invoke(app, ["ltm", "save", SUPPORT]).exit_code == 0
    out = tmp_path / "s.jsonl"
    report = json.loads(runner.invoke(app, ["session", "export", "-o", str(out), "--db-url", db, "--json"]).stdout)
    assert report == {"output": str(out), "sessions": 2, "not_exported": []}
    out = tmp_path / "m.jsonl"
    report = json.loads(runner.invoke(app, ["ltm", "export", "--all-users", "-o", str(out), "--json"]).stdout)
    assert report == {"output": str(out), "memories": 3}


@pytest.mark.slow  # vmem subprocesses over 600 sessions: out of the fast tier
def test_json_into_a_closed_pipe_ends_with_141(tmp_path: Path) -> None:
    """`vmem ... --json | head` stops with 141 as the other formats do, also unbuffered (one large
    write to a pipe whose reader left could end in a partial write reported as success)."""
    source = tmp_path / "many.jsonl"
    with source.open("w", encoding="utf-8") as f:
        for i in range(600):  # about 100 kB in every format: more than a pipe holds
            session = {
                "id": f"s-{i:04d}-" + "x" * 120,
                "appName": "a",
                "userId": f"u{i % 9}",
                "state": {},
                "events": [],
            }
            f.write(json.dumps({**session, "lastUpdateTime": 1_700_000_000 + i}) + "\n")
    db = str(tmp_path / "many.db")
    vmem = Path(sys.executable).with_name("vmem")
    subprocess.run([str(vmem), "session", "import", str(source), "--db-url", db, "-q"], check=True)
    for fmt in ("--json", "--jsonl", "--tsv", None):
        proc = subprocess.Popen(
            [str(vmem), "session", "list", "--db-url", db, "-n", "0", *([fmt] if fmt else [])],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        assert proc.stdout is not None and proc.stderr is not None
        proc.stdout.read(10)  # as `head -c 10` does, then goes away
        proc.stdout.close()
        assert proc.wait() == 141, fmt
        assert proc.stderr.read() == b""


def test_a_piped_table_works_with_cut_and_awk(runner: CliRunner, db: str) -> None:
    """Tab-separated fields, one-word headers, a time as one word: cut -f and awk take any column."""
    vmem = Path(sys.executable).with_name("vmem")
    base = f"{vmem} session list --db-url {db}"
    assert _bash(f"{base} | cut -f3") == ["id", "ticket-101", "ticket-100"]
    assert _bash(f"{base} | awk '{{print $7}}'") == ["update_time", "2025-12-06T08:00:15Z", "2025-12-05T08:00:37Z"]
    assert _bash(f"{base} | awk '{{print $3, $4}}'")[1] == "ticket-101 2"
    get = f"{vmem} session get support_app cust-001 ticket-100 --db-url {db}"
    timeline = _bash(f"{get} 2>/dev/null | awk -F'\\t' '$1 == \"1\" {{print $2, $6}}'")
    assert timeline == ["2025-12-05T08:00:07Z My order 5531 arrived with a cracked screen."]
    assert _bash(f"{get} 2>/dev/null | awk '$1 == \"updated\" {{print $2, NF}}'") == ["2025-12-05T08:00:37Z 2"]


def test_ltm_import_dry_run_leaves_an_existing_store_as_it_was(
    runner: CliRunner, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MODEL_EMBEDDING_PROVIDER", "hash")
    assert runner.invoke(app, ["ltm", "save", SUPPORT]).exit_code == 0
    export = tmp_path / "m.jsonl"
    assert runner.invoke(app, ["ltm", "export", "--all-users", "-o", str(export)]).exit_code == 0
    data = Path(os.environ["XDG_DATA_HOME"])

    def snapshot() -> dict[str, bytes]:
        return {str(p): p.read_bytes() for p in sorted(data.rglob("*")) if p.is_file()}

    before = snapshot()
    for extra in ([], ["--index", "fresh"]):
        result = runner.invoke(app, ["ltm", "import", str(export), "--dry-run", *extra])
        assert result.exit_code == 0 and "nothing was saved" in result.stderr, result.output
    assert snapshot() == before  # no file, no directory, no index row, no vector cache
    empty = tmp_path / "new" / "ltm.db"
    result = runner.invoke(
        app, ["ltm", "import", str(export), "--dry-run"], env={"LONG_TERM_MEMORY_LOCAL_PATH": str(empty)}
    )
    assert result.exit_code == 0 and not empty.parent.exists()


def test_errors_name_the_url_the_user_gave(runner: CliRunner, tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/no/such.db"
    for args in (["session", "list"], ["session", "get", "a", "u", "s"], ["session", "stats"]):
        result = runner.invoke(app, [*args, "--db-url", url])
        assert result.exit_code == 1 and result.stderr.startswith(f"vmem: error: {url}: no such sqlite file"), args
    doctor = json.loads(runner.invoke(app, ["doctor", "--db-url", url, "--json"]).stdout)
    assert doctor[0]["detail"].startswith(f"{url}: no such sqlite file")
    plan = json.loads(runner.invoke(app, ["forget", "u", "--db-url", url, "--dry-run", "--json"]).stdout)
    assert plan["sessions"]["database"] == f"none: {url} does not exist"
    for args in (["session", "list"], ["doctor"]):
        result = runner.invoke(app, [*args, "--db-url", "postgresql://nobody@127.0.0.1:1/x"])
        assert "+asyncpg" not in result.output and "postgresql://nobody@127.0.0.1:1/x" in result.output


def test_a_wait_over_a_second_shows_a_spinner_on_a_terminal_only(db: str) -> None:
    """While the database keeps vmem waiting (a writer holds its lock), a terminal shows a
    spinner saying what vmem waits for; a pipe gets none of it."""
    import pty
    import select
    import sqlite3
    import time

    vmem = str(Path(sys.executable).with_name("vmem"))
    env = {**os.environ, "COLUMNS": "100", "VMEM_SQLITE_BUSY_TIMEOUT": "120"}
    lock = sqlite3.connect(db, isolation_level=None)
    lock.execute("BEGIN EXCLUSIVE")
    master, slave = pty.openpty()
    proc = subprocess.Popen([vmem, "session", "list", "--db-url", db], stdin=slave, stdout=slave, stderr=slave, env=env)
    os.close(slave)
    seen = b""
    try:
        deadline = time.monotonic() + 60
        while b"listing sessions" not in seen:  # the spinner, while vmem waits for the lock
            assert proc.poll() is None and time.monotonic() < deadline, seen
            if select.select([master], [], [], 0.2)[0]:
                seen += os.read(master, 4096)
        lock.execute("ROLLBACK")
        while True:
            try:
                chunk = os.read(master, 4096)
            except OSError:  # the terminal closed: vmem is done
                break
            if not chunk:
                break
            seen += chunk
        assert proc.wait(timeout=60) == 0, seen
    finally:
        os.close(master)
        if proc.poll() is None:
            proc.kill()
    assert b"ticket-101" in seen  # then the table
    lock.execute("BEGIN EXCLUSIVE")
    piped = subprocess.Popen(
        [vmem, "session", "list", "--db-url", db], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env
    )
    time.sleep(1.5)  # longer than a terminal waits before its spinner
    lock.execute("ROLLBACK")
    out, err = piped.communicate(timeout=60)
    assert piped.returncode == 0 and b"ticket-101" in out
    assert err == b"", err  # no spinner, no escape sequence


def test_completion_install_for_bash_says_when_bash_completion_is_missing(
    runner: CliRunner, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from veadk_mem.cli import completion

    target = Path(os.environ["XDG_DATA_HOME"]) / "bash-completion" / "completions" / "vmem"
    monkeypatch.setattr(completion, "BASH_COMPLETION_SCRIPTS", (str(tmp_path / "none" / "bash_completion"),))
    result = runner.invoke(app, ["completion", "bash", "--install"])
    assert result.exit_code == 0 and target.exists()  # written all the same: the package may come later
    assert "vmem: warning: bash-completion is not installed" in result.stderr
    assert "apt install bash-completion" in result.stderr and f"source {target}" in result.stderr
    present = tmp_path / "bash_completion"
    present.write_text("# the package's loader\n", encoding="utf-8")
    monkeypatch.setattr(completion, "BASH_COMPLETION_SCRIPTS", (str(present),))
    result = runner.invoke(app, ["completion", "bash", "--install"])
    assert "warning" not in result.stderr and "start a new shell" in result.stderr


def test_doctor_names_the_store_it_checked_and_gives_structured_fields(
    runner: CliRunner, db: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MODEL_EMBEDDING_PROVIDER", "hash")
    assert runner.invoke(app, ["ltm", "save", SUPPORT]).exit_code == 0
    sessions, memories, indexes = json.loads(runner.invoke(app, ["doctor", "--db-url", db, "--json"]).stdout)
    assert sessions["name"] == "short_term_memory (sqlite)" and sessions["store"] == db
    assert sessions["layout"] == "v1" and sessions["counts"] == {"sessions": 2, "events": 7}
    assert isinstance(sessions["latency_ms"], float)
    assert memories["name"] == "long_term_memory (local)" and memories["store"].endswith("/vmem/ltm.db")
    assert memories["index"] == "default_app" and memories["counts"] == {"memories": 3}
    assert isinstance(memories["latency_ms"], float) and memories["problems"] == []
    assert indexes["name"] == "session indexes (sqlite)" and indexes["status"] == "ok"  # a new row, last
    # --db-url naming another kind of database than the configured backend: labelled as what was checked
    url = "postgresql://nobody@127.0.0.1:1/x"
    other = json.loads(runner.invoke(app, ["doctor", "--db-url", url, "--json"]).stdout)[0]
    assert other["name"] == "short_term_memory (postgresql)" and other["store"] == url and other["status"] == "fail"
    table = runner.invoke(app, ["doctor", "--db-url", db]).stdout
    assert f"{db}: ADK schema v1 (DatabaseSessionService, JSON events), 2 sessions, 7 events" in table


@pytest.mark.slow  # two vmem subprocesses through the viking client's retries: out of the fast tier
def test_third_party_warnings_stay_out_of_the_terminal_unless_verbose(tmp_path: Path) -> None:
    """vikingdb's models make pydantic warn ('Field name "schema" in "SearchResult" shadows an
    attribute') when imported: a library's business, shown only under --verbose."""
    vmem = str(Path(sys.executable).with_name("vmem"))
    env = {k: v for k, v in os.environ.items() if k != "PYTHONWARNINGS"}
    env |= {
        "LONG_TERM_MEMORY_BACKEND": "viking",
        "DATABASE_VIKINGMEM_API_KEY": "not-a-key",
        "DATABASE_VIKINGMEM_BASE_URL": "http://127.0.0.1:1",
    }
    quiet = subprocess.run([vmem, "ltm", "list", "-u", "u"], capture_output=True, text=True, env=env)
    assert quiet.returncode == 1 and quiet.stderr.startswith("vmem: error: cannot reach VikingDB"), quiet.stderr
    assert "Warning" not in quiet.stderr
    verbose = subprocess.run([vmem, "ltm", "list", "-u", "u", "-v"], capture_output=True, text=True, env=env)
    assert 'UserWarning: Field name "schema" in "SearchResult" shadows an attribute' in verbose.stderr


def test_table_layout_flags_are_checked(runner: CliRunner, db: str) -> None:
    """--time-format takes compact, local or iso; --wide and --records are one choice (#45 item 1)."""
    bad = runner.invoke(app, ["session", "list", "--db-url", db, "--time-format", "epoch"])
    assert bad.exit_code == 2 and "--time-format" in bad.stderr
    both = runner.invoke(app, ["session", "list", "--db-url", db, "--wide", "--records"])
    assert both.exit_code == 2 and "choose one" in bad.stderr + both.stderr
    env = {"TTY_COMPATIBLE": "1", "COLUMNS": "200", "NO_COLOR": "1"}
    iso = runner.invoke(app, ["session", "list", "--db-url", db, "--time-format", "iso"], env=env)
    assert iso.exit_code == 0 and "2025-12-06T08:00:15Z" in iso.stdout
