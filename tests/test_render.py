"""The one output path: tables for people (Rich, or plain text when long), JSON for scripts."""

from __future__ import annotations

import json

import pytest

from veadk_mem.cli import render
from veadk_mem.cli.render import Column, Renderer, iso_utc, preview

COLUMNS = [Column("#", "n", justify="right"), Column("text", "text", max_width=10), Column("data", "data")]


def _rows(n: int) -> list[dict[str, object]]:
    return [{"n": i, "text": f"line {i}\nwith a break and more words", "data": {"k": i}} for i in range(n)]


def test_small_table_is_rich(capsys: pytest.CaptureFixture[str]) -> None:
    Renderer().table(_rows(3), COLUMNS, title="t")
    out = capsys.readouterr().out
    assert "┃" in out or "│" in out
    assert "text" in out


def test_long_table_is_plain_aligned_and_single_line(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(render, "RICH_TABLE_MAX_ROWS", 5)
    Renderer().table(_rows(12), COLUMNS, title="timeline")
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "timeline"
    assert lines[1].split() == ["#", "text", "data"]
    assert len(lines) == 3 + 12  # title, header, rule, one line per row
    assert lines[3].startswith(" 0  line 0 wi…  ")
    assert lines[14].startswith("11  line 11 w…  ")
    assert lines[14].endswith('{"k": 11}')


def test_empty_table_prints_a_note_on_stderr(capsys: pytest.CaptureFixture[str]) -> None:
    Renderer().table([], COLUMNS, empty="no sessions")
    captured = capsys.readouterr()
    assert captured.out == ""
    assert "no sessions" in captured.err


def test_records_json_mode(capsys: pytest.CaptureFixture[str]) -> None:
    Renderer(json_mode=True).records(_rows(2), COLUMNS)
    assert json.loads(capsys.readouterr().out)[1]["data"] == {"k": 1}


def test_quiet_silences_messages_not_warnings(capsys: pytest.CaptureFixture[str]) -> None:
    r = Renderer(quiet=True)
    r.message("progress note")
    r.warn("careful")
    err = capsys.readouterr().err
    assert "progress note" not in err
    assert "vmem: warning: careful" in err


def test_helpers() -> None:
    assert iso_utc(0.5) == "1970-01-01T00:00:00.500000Z"
    assert preview("a\n b   c", width=80) == "a b c"
    assert preview("x" * 100, width=10) == "x" * 9 + "…"


def test_counted() -> None:
    assert render.counted(1, "memory") == "1 memory"
    assert render.counted(3, "memory") == "3 memories"
    assert render.counted(0, "app state") == "0 app states"
    assert render.counted(12_000, "day") == "12,000 days"


def test_a_squeezed_time_column_wraps_between_date_and_time(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    columns = [
        Column("#", "n", justify="right"),
        Column.time("time", "time"),
        *[Column(f"column {i}", f"c{i}") for i in range(5)],
        Column("reason", "reason"),
    ]
    row: dict[str, object] = {"n": 1, "time": 1_764_403_207.0, "reason": "role assistant not in include_roles [user]"}
    row.update({f"c{i}": "assistant" for i in range(5)})
    Renderer().table([row], columns)
    out = capsys.readouterr().out
    assert max(len(line) for line in out.splitlines()) <= 80
    cells = [line.split("│")[1].strip() for line in out.splitlines() if "│" in line]
    assert cells[:2] == render.local_time(row["time"]).split(" ")  # ['2025-11-29', '08:00:07'] in UTC


def test_long_messages_and_warnings_stay_on_one_line(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "80")  # as in a log file or a pipe
    text = "imported 4 sessions, 16 events, 0 app states, 0 user states (created ADK v1 tables) " * 2
    renderer = Renderer()
    renderer.message(text)
    renderer.warn(text)
    assert capsys.readouterr().err.splitlines() == [text, f"vmem: warning: {text}"]
