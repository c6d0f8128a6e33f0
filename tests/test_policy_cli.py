"""`vmem policy test` and `vmem policy show`: every output format, input form and error exit."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from typer.testing import CliRunner

from veadk_mem.cli.app import app

CORPUS = json.loads((Path(__file__).parent / "data" / "policy_veadk_1.1.19.json").read_text(encoding="utf-8"))

SESSION: dict[str, Any] = {
    "id": "s1",
    "appName": "demo",
    "userId": "u1",
    "events": [
        {"id": "e1", "author": "user", "timestamp": 1.0, "content": {"role": "user", "parts": [{"text": "peanuts"}]}},
        {"id": "e2", "author": "chef", "timestamp": 2.0, "content": {"role": "model", "parts": [{"text": "Noted"}]}},
        {
            "id": "e3",
            "author": "user",
            "timestamp": 3.0,
            "content": {"role": "user", "parts": [{"text": "x", "thought": True}]},
        },
    ],
}
USER_MEMORY = '{"parts": [{"text": "peanuts"}], "role": "user"}'


def write(path: Path, data: Any) -> str:
    path.write_text(json.dumps(data), encoding="utf-8")
    return str(path)


def test_json_object_is_the_design_contract(runner: CliRunner, tmp_path: Path) -> None:
    result = runner.invoke(app, ["policy", "test", write(tmp_path / "s.json", SESSION), "--json"])
    assert result.exit_code == 0, result.stderr
    out = json.loads(result.stdout)
    assert list(out) == ["policy", "saved", "events"]
    assert out["policy"]["preset"] == "default" and out["policy"]["include_roles"] == ["user"]
    assert out["saved"] == [USER_MEMORY]
    assert out["events"][0] == {
        "id": "e1",
        "author": "user",
        "role": "user",
        "types": ["text"],
        "decision": "saved",
        "reason": "role user, types [text] allowed",
        "memory": USER_MEMORY,
    }
    assert out["events"][1]["decision"] == "dropped"
    assert out["events"][1]["reason"] == "role assistant not in include_roles [user]"
    assert out["events"][1]["memory"] is None


def test_saved_equals_veadk_for_a_corpus_session(runner: CliRunner, tmp_path: Path) -> None:
    case = next(c for c in CORPUS["cases"] if c["policy"] == 2 and not c["include_assistant"] and c.get("saved"))
    path = write(tmp_path / "s.json", CORPUS["sessions"][case["session"]])
    result = runner.invoke(app, ["--json", "policy", "test", path, "--policy", "all"])
    assert json.loads(result.stdout)["saved"] == case["saved"]


def test_table_and_summary(runner: CliRunner, tmp_path: Path) -> None:
    result = runner.invoke(app, ["policy", "test", write(tmp_path / "s.json", SESSION)])
    assert result.exit_code == 0
    header = result.stdout.splitlines()[0]  # off a terminal: a header line of --tsv's names, one event a line
    for column in ("n", "time", "author", "role", "types", "decision", "reason", "memory"):
        assert column in header
    assert len(result.stdout.splitlines()) == 1 + 3
    assert "saved" in result.stdout and "dropped" in result.stdout
    assert result.stderr.splitlines() == ["policy: preset default", "1 saved / 3 events, 48 bytes"]
    everything = runner.invoke(app, ["policy", "test", write(tmp_path / "s.json", SESSION), "-p", "all"]).stdout
    assert "[thought] x" in everything and "peanuts" in everything
    quiet = runner.invoke(app, ["--quiet", "policy", "test", write(tmp_path / "s.json", SESSION)])
    assert quiet.stderr == ""


def test_stdin_jsonl_snake_case_and_several_sessions(runner: CliRunner) -> None:
    snake = {"id": "s2", "app_name": "demo", "user_id": "u1", "events": SESSION["events"][:1]}
    stdin = json.dumps(SESSION) + "\n" + json.dumps(snake) + "\n"
    result = runner.invoke(app, ["policy", "test", "-", "--json"], input=stdin)
    out = json.loads(result.stdout)
    assert out["saved"] == [USER_MEMORY, USER_MEMORY]
    assert [e["id"] for e in out["events"]] == ["e1", "e2", "e3", "e1"]
    table = runner.invoke(app, ["policy", "test", "-"], input=stdin)
    assert "session" in table.stdout.splitlines()[0]
    assert "2 saved / 4 events in 2 sessions" in table.stderr


def test_policy_forms_and_include_assistant(runner: CliRunner, tmp_path: Path) -> None:
    path = write(tmp_path / "s.json", SESSION)

    def saved(*args: str) -> list[str]:
        result = runner.invoke(app, ["policy", "test", path, "--json", *args])
        assert result.exit_code == 0, result.stderr
        return list(json.loads(result.stdout)["saved"])

    assert len(saved("--include-assistant")) == 2
    assert len(saved("--policy", "all")) == 3
    assert len(saved("--policy", '{"preset": "custom", "include_roles": ["assistant"]}')) == 1
    policy_file = write(tmp_path / "p.json", {"preset": "custom", "include_thought": True})
    assert len(saved("--policy", policy_file)) == 3
    toml_file = tmp_path / "p.toml"
    toml_file.write_text('preset = "all"\nexclude_authors = ["chef"]\n')
    assert len(saved("-p", str(toml_file))) == 2


def test_config_default_named_policies_and_openviking(runner: CliRunner, tmp_path: Path) -> None:
    path = write(tmp_path / "s.json", SESSION)
    Path("vmem.toml").write_text(
        '[policy]\ndefault = "mine"\n[policy.mine]\npreset = "all"\ninclude_roles = ["assistant"]\n', encoding="utf-8"
    )
    result = runner.invoke(app, ["policy", "test", path, "--json"])
    assert [e["decision"] for e in json.loads(result.stdout)["events"]] == ["dropped", "saved", "dropped"]
    Path("vmem.toml").write_text('[long_term_memory]\nbackend = "openviking"\n', encoding="utf-8")
    shown = json.loads(runner.invoke(app, ["policy", "show", "--json"]).stdout)
    assert shown["policy"]["include_roles"] == ["user", "assistant"]


def test_warnings_go_to_stderr_and_keep_the_result(runner: CliRunner, tmp_path: Path) -> None:
    path = write(tmp_path / "s.json", SESSION)
    result = runner.invoke(app, ["policy", "test", path, "--json", "--policy", "defualt"])
    assert result.exit_code == 0
    assert json.loads(result.stdout)["saved"] == [USER_MEMORY]
    assert "unknown policy preset 'defualt'" in result.stderr and "did you mean 'default'?" in result.stderr
    result = runner.invoke(app, ["policy", "show", '{"incude_thought": true}'])
    assert "unknown policy field 'incude_thought'" in result.stderr
    assert "did you mean 'include_thought'?" in result.stderr


def test_bad_input_exits_2_with_one_line(runner: CliRunner, tmp_path: Path) -> None:
    path = write(tmp_path / "s.json", SESSION)
    cases = [
        (["policy", "test", str(tmp_path / "none.json")], "none.json: no such file"),
        (
            ["policy", "test", path, "-p", '{"preset": "al"}'],
            "inline JSON: preset: input should be 'default', 'all' or 'custom', got 'al' (did you mean 'all'?)",
        ),
        (["policy", "test", path, "-p", '{"include_roles": 1'], "line 1, column 20: invalid JSON"),
        (["policy", "show", "missing/p.toml"], "missing/p.toml: policy file not found"),
    ]
    bad_json = tmp_path / "bad.json"
    bad_json.write_text('{"id": "s", "appName": "a", "userId": "u", "events": [}\n')
    cases.append((["policy", "test", str(bad_json)], "bad.json: line 1, column 55: invalid JSON"))
    b64 = {**SESSION, "events": [{"id": "e9", "author": "user", "content": {"parts": [{"inlineData": {"data": "!"}}]}}]}
    cases.append((["policy", "test", write(tmp_path / "b.json", b64)], "event e9: content.parts[0].inline_data.data"))
    for args, message in cases:
        result = runner.invoke(app, args)
        assert result.exit_code == 2, (args, result.stderr)
        assert result.stdout == ""
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("vmem: error: ") and message in lines[0], lines


def test_show_table_and_json(runner: CliRunner) -> None:
    result = runner.invoke(
        app, ["policy", "show", '{"preset": "custom", "text_only": false}'], env={"TTY_COMPATIBLE": "1"}
    )
    assert result.exit_code == 0
    cells = [[c.strip() for c in line.split("│")] for line in result.stdout.splitlines()[3:]]
    rows = {row[0]: row[1:] for row in cells}
    assert rows["text_only"] == ["false", "override"]
    assert rows["include_roles"] == ["null (no filter)", "preset custom"]
    assert rows["preset"] == ["custom", "inline JSON"]
    shown = json.loads(runner.invoke(app, ["policy", "show", "all", "--json"]).stdout)
    assert shown == {
        "origin": "preset all",
        "include_assistant": False,
        "policy": {
            "preset": "all",
            "include_roles": ["user", "assistant", "system"],
            "exclude_roles": [],
            "include_authors": None,
            "exclude_authors": [],
            "include_event_types": None,
            "exclude_event_types": [],
            "text_only": False,
            "include_thought": True,
            "include_empty_text": True,
        },
        "sources": {"preset": "preset all", **{k: "preset all" for k in shown["policy"] if k != "preset"}},
    }


def test_installed_vmem_policy_test(tmp_path: Path) -> None:
    vmem = Path(sys.executable).parent / "vmem"
    env = {**os.environ, "NO_COLOR": "1"}
    out = subprocess.run(
        [str(vmem), "policy", "test", "-", "--json"],
        input=json.dumps(SESSION),
        capture_output=True,
        text=True,
        env=env,
        check=True,
    )
    assert json.loads(out.stdout)["saved"] == [USER_MEMORY]


def _adk_sqlite_with(session: dict[str, Any], path: Path) -> str:
    """A sqlite session database written by the real google-adk, holding `session`."""
    import asyncio

    from google.adk.events import Event
    from google.adk.sessions import DatabaseSessionService

    async def write_it() -> None:
        service = DatabaseSessionService(f"sqlite+aiosqlite:///{path}")
        created = await service.create_session(
            app_name=session["appName"], user_id=session["userId"], session_id=session["id"]
        )
        for raw in session["events"]:
            await service.append_event(created, Event.model_validate(raw))
        await service.close()

    asyncio.run(write_it())
    return str(path)


def test_from_store_reads_the_session_adk_wrote(runner: CliRunner, tmp_path: Path) -> None:
    db = _adk_sqlite_with(SESSION, tmp_path / "sessions.db")
    stored = runner.invoke(app, ["policy", "test", "--from-store", "demo", "u1", "s1", "--db-url", db, "--json"])
    assert stored.exit_code == 0, stored.stderr
    from_file = runner.invoke(app, ["policy", "test", write(tmp_path / "s.json", SESSION), "--json"])
    assert json.loads(stored.stdout)["saved"] == json.loads(from_file.stdout)["saved"] == [USER_MEMORY]
    assert [e["id"] for e in json.loads(stored.stdout)["events"]] == ["e1", "e2", "e3"]


def test_from_store_errors(runner: CliRunner, tmp_path: Path) -> None:
    db = _adk_sqlite_with(SESSION, tmp_path / "sessions.db")
    missing = runner.invoke(app, ["policy", "test", "--from-store", "demo", "u1", "nope", "--db-url", db])
    assert missing.exit_code == 3
    assert "demo/u1/nope: not found" in missing.stderr
    two = runner.invoke(app, ["policy", "test", "--from-store", "demo", "u1", "--db-url", db])
    assert two.exit_code == 2 and "exactly three" in two.stderr
    stray = runner.invoke(app, ["policy", "test", write(tmp_path / "s.json", SESSION), "--db-url", db])
    assert stray.exit_code == 2 and "use it with --from-store" in stray.stderr
    none = runner.invoke(app, ["policy", "test"])
    assert none.exit_code == 2 and "give one session JSON file" in none.stderr
