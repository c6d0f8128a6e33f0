"""The one output path: tables for people (Rich, or plain text when long), JSON for scripts."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from veadk_mem.cli import render
from veadk_mem.cli.columns import GAP, TEXT_WIDTH, Column, fit_columns
from veadk_mem.cli.render import Renderer, preview
from veadk_mem.jsonio import iso_utc
from veadk_mem.timefmt import format_time

COLUMNS = [Column("#", "n", justify="right"), Column("text", "text", max_width=10), Column("data", "data")]


def _rows(n: int) -> list[dict[str, object]]:
    return [{"n": i, "text": f"line {i}\nwith a break and more words", "data": {"k": i}} for i in range(n)]


@pytest.fixture
def terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    """stdout and stderr count as a terminal (Rich's TTY_COMPATIBLE), 80 columns wide."""
    monkeypatch.setenv("TTY_COMPATIBLE", "1")
    monkeypatch.setenv("COLUMNS", "80")


def test_small_table_is_rich(capsys: pytest.CaptureFixture[str], terminal: None) -> None:
    Renderer().table(_rows(3), COLUMNS, title="t")
    out = capsys.readouterr().out
    assert "┃" in out or "│" in out
    assert "text" in out


def test_long_table_is_plain_aligned_and_single_line(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, terminal: None
) -> None:
    monkeypatch.setattr(render, "RICH_TABLE_MAX_ROWS", 5)
    Renderer().table(_rows(12), COLUMNS, title="timeline")
    captured = capsys.readouterr()
    lines = captured.out.splitlines()
    assert captured.err == "timeline\n"  # a caption, not a record
    assert lines[0].split() == ["#", "text", "data"]
    assert len(lines) == 1 + 12  # header, one line per row
    assert lines[1] == ' 0  line 0 with a break and more words   {"k": 0}'  # never cut, never wrapped
    assert lines[12] == '11  line 11 with a break and more words  {"k": 11}'


def test_off_a_terminal_a_table_is_plain_text_one_record_a_line(capsys: pytest.CaptureFixture[str]) -> None:
    long_id = "session-" + "x" * 150
    Renderer().table([{"n": 1, "text": long_id, "data": None}], COLUMNS)
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert lines[0] == "n\ttext\tdata" and lines[1] == f"1\t{long_id}\t"  # no box, no wrapping, a tab apart


def test_a_piped_table_is_tab_separated_with_times_as_one_word(capsys: pytest.CaptureFixture[str]) -> None:
    """cut -f and awk take any column: tabs between fields, a time is ISO 8601 UTC without a space."""
    columns = [Column.id("session id", "id"), Column.time("updated", "t"), Column("types", "types", ", ".join)]
    rows = [{"id": "s1", "t": 1764921637.25, "types": ["text", "function_call"]}]
    Renderer().table(rows, columns)
    lines = capsys.readouterr().out.splitlines()
    assert lines == ["id\tt\ttypes", "s1\t2025-12-05T08:00:37Z\ttext, function_call"]
    assert lines[1].split()[1] == "2025-12-05T08:00:37Z"  # awk '{print $2}'


@pytest.mark.parametrize(
    ("fmt", "expected"),
    [
        ("csv", ["n,text,data", '0,"line 0\nwith a break and more words","{""k"": 0}"']),
        ("tsv", ["n\ttext\tdata", '0\tline 0\\nwith a break and more words\t{"k": 0}']),
        ("jsonl", ['{"n": 0, "text": "line 0\\nwith a break and more words", "data": {"k": 0}}']),
    ],
)
def test_machine_formats(capsys: pytest.CaptureFixture[str], fmt: str, expected: list[str]) -> None:
    Renderer(fmt=fmt).table(_rows(1), COLUMNS, title="ignored")
    assert capsys.readouterr().out == "\n".join(expected) + "\n"


def test_csv_times_are_iso_utc(capsys: pytest.CaptureFixture[str]) -> None:
    Renderer(fmt="csv").table([{"t": 0.5}], [Column.time("time", "t")])
    assert capsys.readouterr().out == "t\n1970-01-01T00:00:00.500000Z\n"


def test_fit_keeps_ids_whole_and_turns_into_records_rather_than_leave_out() -> None:
    columns = [
        Column.id("id", "id"),
        Column.text("text", "text"),
        Column.time("time", "time"),
        Column("empty", "empty"),
    ]
    cells = [["memory-0123456789abcdef", "a long text " * 10, "2026-01-01 10:00:00", ""]]
    layout = fit_columns(columns, cells, 70)
    assert layout.shown == [0, 1, 2] and not layout.records  # the empty column is not drawn
    assert layout.widths[0] == len("memory-0123456789abcdef")
    assert layout.widths[1] >= TEXT_WIDTH  # the main text keeps a readable width
    assert sum(layout.widths) + GAP * 2 <= 70
    narrow = fit_columns(columns, cells, 50)
    assert narrow.records and narrow.shown == [0, 1, 2]  # nothing is left out


def test_identifier_cells_never_fold_and_text_grows_first() -> None:
    columns = [Column("types", "types"), Column.text("memory", "memory")]
    cells = [["function_call, function_response", "arrived yesterday and was broken " * 4]]
    layout = fit_columns(columns, cells, 80)
    assert layout.widths[0] >= len("function_response")
    assert layout.widths[1] > layout.widths[0]


def test_a_table_too_wide_becomes_records_said_once_on_stderr(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TTY_COMPATIBLE", "1")
    monkeypatch.setenv("COLUMNS", "30")
    monkeypatch.setenv("NO_COLOR", "1")
    columns = [Column.id("id", "id"), Column.text("text", "text"), Column.time("time", "t")]
    r = Renderer()
    r.table([{"id": "x" * 20, "text": "hello world", "t": 0.0}, {"id": "y" * 20, "text": "bye", "t": 0.0}], columns)
    r.table([{"id": "z" * 20, "text": "again", "t": 0.0}], columns)
    captured = capsys.readouterr()
    assert " ".join(captured.err.split()).count("one block per row") == 1
    out = re.sub(r"\x1b\[[0-9;]*m", "", captured.out)
    lines = out.splitlines()
    assert lines[0].startswith("─[ 1 ]") and lines[1].split() == ["id:", "x" * 20]
    assert "text: hello world" in out and "time:" in out and "z" * 20 in out


def test_notes_wrap_at_the_terminal_between_words(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TTY_COMPATIBLE", "1")
    monkeypatch.setenv("COLUMNS", "40")
    text = "use --include-assistant-messages or --policy=all to keep what the agent said"
    Renderer().message(text)
    Renderer().hint("try 'vmem session list --db-url sqlite:///a/very/long/path/to/sessions.db'")
    err = capsys.readouterr().err.splitlines()
    assert all(len(line) <= 40 for line in err if "sessions.db" not in line)
    assert any("--include-assistant-messages" in line for line in err)  # a flag is never split
    assert " ".join(" ".join(err[:3]).split()) == text


def test_notes_off_a_terminal_are_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    Renderer().message("word " * 40)
    assert len(capsys.readouterr().err.splitlines()) == 1


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
    assert render.counted(2, "search") == "2 searches"
    assert render.counted(12_000, "day") == "12,000 days"


def test_a_squeezed_time_column_wraps_between_date_and_time(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, terminal: None
) -> None:
    columns = [
        Column("#", "n", justify="right"),
        Column.time("time", "time"),
        *[Column(f"column {i}", f"c{i}") for i in range(4)],
        Column.free("reason", "reason"),
    ]
    row: dict[str, object] = {"n": 1, "time": 1_764_403_207.0, "reason": "role assistant not in include_roles [user]"}
    row.update({f"c{i}": "assistant" for i in range(4)})
    Renderer(wide=True).table([row], columns)  # every character: the --wide layout
    out = re.sub(r"\x1b\[[0-9;]*m", "", capsys.readouterr().out)
    assert max(len(line) for line in out.splitlines()) <= 80
    cells = [line.split("│")[1].strip() for line in out.splitlines() if "│" in line]
    assert cells[:2] == format_time(row["time"]).split(" ")  # ['2025-11-29', '08:00:07'] in UTC


def test_long_messages_and_warnings_stay_on_one_line(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "80")  # as in a log file or a pipe
    text = "imported 4 sessions, 16 events, 0 app states, 0 user states (created ADK v1 tables) " * 2
    renderer = Renderer()
    renderer.message(text)
    renderer.warn(text)
    assert capsys.readouterr().err.splitlines() == [text, f"vmem: warning: {text}"]


def test_piped_headers_are_the_tsv_names_so_awk_fields_line_up(capsys: pytest.CaptureFixture[str]) -> None:
    """A pipe's header is --tsv's (#45 item 11): one word a column, the same names either way."""
    columns = [Column.id("app", "app_name"), Column.id("session id", "id"), Column("state keys", "n", justify="right")]
    Renderer().table([{"app_name": "a", "id": "s-1", "n": 3}], columns)
    header, row = capsys.readouterr().out.splitlines()
    assert header.split() == ["app_name", "id", "n"] and row.split()[1] == "s-1"


def test_one_line_fit_hides_by_declared_order_and_elides_text() -> None:
    """#45 item 1: ids whole, the highest `drop` hidden first, the main text elided to fit."""
    from veadk_mem.cli.columns import fit_line

    columns = [
        Column.id("session id", "id"),
        Column("state keys", "k", drop=2),
        Column("events", "e", drop=1),
        Column.text("text", "t"),
    ]
    cells = [["s" * 36, "3", "12", "a long message " * 10]]
    fit = fit_line(columns, cells, 100)
    assert not fit.records and fit.hidden == () and fit.widths[0] == 36 and sum(fit.widths) + 9 == 100
    narrow = fit_line(columns, cells, 80)
    assert narrow.hidden == (1,) and narrow.shown == [0, 2, 3] and narrow.widths[0] == 36
    assert fit_line(columns, cells, 30).records  # the id alone does not leave room: blocks


def test_compact_times(monkeypatch: pytest.MonkeyPatch) -> None:
    import time

    from veadk_mem.timefmt import AGE, CLOCK

    now = time.time()
    assert format_time(now - 30, AGE) == "30s ago" and format_time(now - 3 * 86400 - 5, AGE) == "3d ago"
    assert format_time(now - 2 * 3600 - 1, AGE) == "2h ago"
    assert len(format_time(now - 90 * 86400, AGE)) == 10  # a date past 30 days
    assert len(format_time(now, CLOCK)) == 8  # 12:04:31 today


def test_a_one_line_table_names_what_it_hides_once(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, terminal: None
) -> None:
    monkeypatch.setenv("NO_COLOR", "1")
    columns = [Column.id("id", "id"), Column("state keys", "k", drop=1), Column.text("text", "t")]
    rows = [{"id": "x" * 50, "k": 3, "t": "hello " * 20}, {"id": "y" * 50, "k": 4, "t": "bye"}]
    r = Renderer()
    r.table(rows, columns)
    r.table(rows, columns)
    captured = capsys.readouterr()
    assert " ".join(captured.err.split()).count("1 column hidden (state keys): --wide shows them") == 1
    lines = re.sub(r"\x1b\[[0-9;]*m", "", captured.out).splitlines()
    assert len(lines) == 2 * (2 + 2) and all(len(line) <= 80 for line in lines) and "…" in captured.out


@pytest.mark.parametrize(
    "env",
    [
        {},
        {"TTY_COMPATIBLE": "1"},
        {"TTY_COMPATIBLE": "0"},
        {"FORCE_COLOR": "1"},
        {"FORCE_COLOR": ""},
        {"TTY_COMPATIBLE": "0", "FORCE_COLOR": "1"},
        {"TTY_COMPATIBLE": "1", "FORCE_COLOR": ""},
    ],
    ids=str,
)
def test_only_a_stream_rich_calls_no_terminal_is_taken_for_one_without_rich(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, env: dict[str, str]
) -> None:
    """`could_be_terminal` lets a pipe skip loading Rich: it says no only where Rich says no too."""
    from rich.console import Console

    for name in ("TTY_COMPATIBLE", "FORCE_COLOR"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    with (tmp_path / "out").open("w") as stream:  # a file: no TTY
        rich_says = Console(file=stream).is_terminal
        assert render.could_be_terminal(stream) or not rich_says
