"""A lone surrogate (`\\ud83d`, half an emoji: real ADK stores and reads it back) in a session or
a query: one record reported and skipped, never the whole run lost.

VeADK builds a memory as `json.dumps(content, ensure_ascii=False)`, which keeps the surrogate;
no store or embedder can take a string with no UTF-8 encoding. So `policy test` shows the
memory VeADK would make (escaped in what it prints, with a warning), and `ltm save` reports
that session by file, line, session and event and saves every other one.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from veadk_mem.cli.app import app

HALF = "\ud83d"  # the first half of 😀's UTF-16 pair, alone


@pytest.fixture(autouse=True)
def hash_embedder(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MODEL_EMBEDDING_PROVIDER", "hash")


def _session(sid: str, text: str, state: dict[str, Any] | None = None) -> dict[str, Any]:
    return {
        "id": sid,
        "appName": "app",
        "userId": "u1",
        "state": state or {},
        "lastUpdateTime": 1764489600.0,
        "events": [
            {
                "id": f"{sid}-e1",
                "invocationId": "i1",
                "author": "user",
                "timestamp": 1764489600.0,
                "content": {"role": "user", "parts": [{"text": text}]},
            }
        ],
    }


SESSIONS = [
    _session("good1", "I live in Hangzhou"),
    _session("bad", f"half an emoji {HALF} here"),
    _session("odd-state", "I take the train", {"k": "\ud800"}),  # state is no part of a memory
    _session("good2", "I like tea"),
]


def _jsonl(tmp_path: Path) -> Path:
    path = tmp_path / "mixed.jsonl"
    path.write_text("".join(json.dumps(s) + "\n" for s in SESSIONS))  # json writes \ud83d as an escape
    return path


def test_ltm_save_skips_the_one_session_and_saves_the_rest(runner: CliRunner, tmp_path: Path) -> None:
    source = _jsonl(tmp_path)
    result = runner.invoke(app, ["ltm", "save", str(source), "--json"])
    assert result.exit_code == 1, result.output  # a session failed: not 0
    totals = json.loads(result.stdout)["totals"]
    assert (totals["sessions"], totals["saved"], totals["failed"]) == (4, 3, 1)
    [line] = [line for line in result.stderr.splitlines() if "surrogate" in line]
    assert line.startswith(f"vmem: warning: {source}: line 2: session bad: event bad-e1: ")
    assert "\\ud83d" in line and "unexpected" not in result.stderr


def test_ltm_save_saves_every_other_session(runner: CliRunner, tmp_path: Path) -> None:
    runner.invoke(app, ["ltm", "save", str(_jsonl(tmp_path))])
    listed = runner.invoke(app, ["ltm", "list", "--user", "u1", "--app", "app", "--json"])
    sessions = sorted(e["custom_metadata"]["origin"]["session_id"] for e in json.loads(listed.stdout))
    assert sessions == ["good1", "good2", "odd-state"]
    again = runner.invoke(app, ["ltm", "save", str(_jsonl(tmp_path)), "--dry-run"])
    assert again.exit_code == 1 and "session bad: event bad-e1" in again.stderr


def test_policy_test_shows_what_veadk_would_save(runner: CliRunner, tmp_path: Path) -> None:
    source = _jsonl(tmp_path)
    result = runner.invoke(app, ["policy", "test", str(source), "--json"])
    assert result.exit_code == 0, result.output
    saved = json.loads(result.stdout)["saved"]
    want = json.dumps({"parts": [{"text": f"half an emoji {HALF} here"}], "role": "user"}, ensure_ascii=False)
    assert want in saved and len(saved) == 4  # VeADK's own string, surrogate and all
    assert "session bad: event bad-e1: the memory holds a lone surrogate (\\ud83d)" in result.stderr
    table = runner.invoke(app, ["policy", "test", str(source)])
    assert table.exit_code == 0, table.output
    assert "half an emoji \\ud83d here" in table.stdout  # shown escaped, as control characters are
    assert "4 saved / 4 events in 4 sessions" in table.stderr


def test_search_queries_reports_the_one_query(runner: CliRunner, tmp_path: Path) -> None:
    runner.invoke(app, ["ltm", "save", str(_jsonl(tmp_path))])
    queries = tmp_path / "q.jsonl"
    queries.write_text('Hangzhou\n{"query": "tea \\ud800"}\nwhere do I live\n')
    result = runner.invoke(app, ["ltm", "search", "--queries", str(queries), "--user", "u1", "--app", "app"])
    assert result.exit_code == 1, result.output
    lines = [json.loads(line) for line in result.stdout.splitlines()]
    assert [line["query"] for line in lines] == ["Hangzhou", "tea \ud800", "where do I live"]
    assert lines[0]["results"] and lines[2]["results"]
    assert lines[1]["error"].startswith(f"{queries}: line 2: the query holds a lone surrogate")
    [warning] = result.stderr.splitlines()
    assert "line 2" in warning and "unexpected" not in warning
