"""Every table-printing command at 60, 80 and 120 columns: one line per record by default,
and under --wide every value whole.

By default (#45 item 1) a table keeps one line per record: key columns whole, free text
elided with `…`, lower-priority columns hidden and named once on stderr (`test_one_line_per_record`).

Under --wide, the gate of "output that never loses a character": a table on a terminal wraps inside its
cells and never cuts one, and never leaves a column out. The test records what each command
hands the renderer (rows and columns), renders it as on a terminal (TTY_COMPATIBLE=1,
COLUMNS=w), reads each drawn column top to bottom (or each `field:` of a record block, when
the table became records), and asserts every cell's text is there whole: key columns and the
main text included, at every width. Wrapping only moves characters to the next line of the
same column, so the column read without whitespace holds the value without whitespace; a
cropped table, a shortened cell or a left-out column does not. Identifier-like cells (types,
authors, times, ids) never fold: each of their words is on one line.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from veadk_mem.cli import render
from veadk_mem.cli.app import app
from veadk_mem.cli.columns import FOLD, TEXT

EXAMPLES = Path(__file__).resolve().parents[1] / "docs" / "examples" / "sessions"
WIDTHS = (60, 80, 120)
SEPARATORS = "│┃╇╈┼╋━─"
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")

COMPACTED = {
    "id": "ticket-2048-replacement-follow-up",
    "appName": "support_app",
    "userId": "cust-003",
    "state": {"user:preferred_contact": "email, never before 9am", "ticket_status": "awaiting courier pickup"},
    "events": [
        {
            "id": "evt-1",
            "author": "user",
            "timestamp": 1764921600.0,
            "content": {"role": "user", "parts": [{"text": "Where is my replacement phone for order 5531?"}]},
        },
        {
            "id": "evt-2",
            "author": "support_agent",
            "timestamp": 1764921660.0,
            "content": {
                "role": "model",
                "parts": [{"functionCall": {"name": "lookup_shipment", "args": {"order_id": "5531"}}}],
            },
        },
        {
            "id": "evt-3",
            "author": "user",
            "timestamp": 1764921720.0,
            "actions": {
                "compaction": {
                    "startTimestamp": 1764921600.0,
                    "endTimestamp": 1764921660.0,
                    "compactedContent": {
                        "role": "model",
                        "parts": [{"text": "Customer asked where replacement for order 5531 is; shipment looked up."}],
                    },
                }
            },
        },
    ],
}


@pytest.fixture
def world(tmp_path: Path, runner: CliRunner, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """A session database with the example sessions (and one with a compaction), and memories."""
    monkeypatch.setenv("MODEL_EMBEDDING_PROVIDER", "hash")
    db = str(tmp_path / "sessions.db")
    extra = tmp_path / "compacted.json"
    extra.write_text(json.dumps(COMPACTED), encoding="utf-8")
    long_ids = tmp_path / "long-ids.json"  # the case: 51-character session ids
    long_ids.write_text(json.dumps([{**COMPACTED, "id": f"{n}-" + "s" * 49, "userId": f"u{n}"} for n in range(3)]))
    for source in (EXAMPLES / "support_app-sessions.json", EXAMPLES / "ltm_demo-history.jsonl", extra, long_ids):
        result = runner.invoke(app, ["session", "import", str(source), "--db-url", db])
        assert result.exit_code == 0, result.output
    for source in (EXAMPLES / "ltm_demo-session-1.json", EXAMPLES / "support_app-sessions.json"):
        result = runner.invoke(app, ["ltm", "save", str(source)])
        assert result.exit_code == 0, result.output
    return {"db": db}


COMMANDS: list[tuple[str, Callable[[dict[str, str]], list[str]]]] = [
    ("session list", lambda w: ["session", "list", "--db-url", w["db"]]),
    ("session get", lambda w: ["session", "get", "support_app", "cust-001", "ticket-100", "--db-url", w["db"]]),
    (
        "session get (compaction)",
        lambda w: ["session", "get", "support_app", "cust-003", COMPACTED["id"], "--db-url", w["db"]],
    ),
    (
        "session delete --dry-run",
        lambda w: ["session", "delete", "--app", "support_app", "--dry-run", "--db-url", w["db"]],
    ),
    ("session stats", lambda w: ["session", "stats", "--db-url", w["db"]]),
    ("session stats --by age", lambda w: ["session", "stats", "--by", "age", "--db-url", w["db"]]),
    ("session stats --by user", lambda w: ["session", "stats", "--by", "user", "--db-url", w["db"]]),
    ("ltm search", lambda w: ["ltm", "search", "cracked screen order", "-u", "cust-001", "-a", "support_app"]),
    ("ltm list", lambda w: ["ltm", "list", "-u", "user-42"]),
    ("ltm delete --dry-run", lambda w: ["ltm", "delete", "-u", "user-42", "--all", "--dry-run"]),
    ("ltm save --dry-run", lambda w: ["ltm", "save", "--dry-run", str(EXAMPLES / "support_app-sessions.json")]),
    ("forget --dry-run", lambda w: ["forget", "user-42", "--dry-run", "--db-url", w["db"]]),
    ("policy test", lambda w: ["policy", "test", str(EXAMPLES / "ltm_demo-session-1.json")]),
    ("policy test (sessions)", lambda w: ["policy", "test", str(EXAMPLES / "support_app-sessions.json")]),
    (
        "policy test --policy all",
        lambda w: ["policy", "test", str(EXAMPLES / "support_app-sessions.json"), "--policy", "all"],
    ),
    ("policy show", lambda w: ["policy", "show"]),
    ("config show", lambda w: ["config", "show", "--db-url", w["db"]]),
]  # doctor prints checks, not a table, on a terminal: its widths are tests/test_doctor_messages.py's


def _text(value: Any, fmt: Callable[[Any], str] | None) -> str:
    if fmt is not None:
        return str(fmt(value))
    if value is None:
        return ""
    if isinstance(value, (dict, list)):
        return json.dumps(value, ensure_ascii=False)
    return str(value)


def _squash(text: str) -> str:
    return re.sub(r"\s+", "", text)


def _record_fields(out: str, headers: set[str]) -> list[str]:
    """Each `field: value` of each record block (a table too wide for the terminal), the
    value read across its continuation lines, whitespace removed."""
    fields: list[str] = []
    current: list[str] | None = None
    in_record = False
    for line in out.splitlines():
        if line.startswith("─["):
            in_record, current = True, None
            continue
        if not in_record:
            continue
        label = max((h for h in headers if h and line.startswith(h + ":")), key=len, default=None)
        if label is not None:
            current = [line[len(label) + 1 :]]
            fields.append("")
        elif line.startswith(" ") and current is not None:
            current.append(line)
        else:
            in_record, current = False, None
            continue
        fields[-1] = _squash("".join(current))
    return fields


def _column_streams(out: str) -> list[str]:
    """Each drawn column of each table, read top to bottom, whitespace removed."""
    streams: list[str] = []
    block: list[list[str]] = []

    def flush() -> None:
        if block:
            width = max(len(cells) for cells in block)
            for j in range(width):
                streams.append("".join(_squash(cells[j]) for cells in block if j < len(cells)))
            block.clear()

    for line in out.splitlines():
        if "│" in line or "┃" in line:
            cells = re.split("[│┃]", line)
            if block and len(cells) != len(block[0]):
                flush()
            block.append(cells)
        elif line and set(line) <= set(SEPARATORS + " "):
            continue  # the rule under the header
        else:
            flush()
    flush()
    return streams


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize(("name", "argv"), COMMANDS, ids=[c[0] for c in COMMANDS])
def test_every_value_appears_whole(
    world: dict[str, str],
    runner: CliRunner,
    monkeypatch: pytest.MonkeyPatch,
    name: str,
    argv: Callable[[dict[str, str]], list[str]],
    width: int,
) -> None:
    tables: list[tuple[list[dict[str, Any]], list[Any]]] = []
    fields: list[list[tuple[str, Any]]] = []
    real_table, real_fields = render.Renderer.table, render.Renderer.fields

    def table(self: Any, rows: Any, columns: Any, **kwargs: Any) -> None:
        tables.append((list(rows), list(columns)))
        real_table(self, rows, columns, **kwargs)

    def fields_(self: Any, pairs: Any, **kwargs: Any) -> None:
        fields.append(list(pairs))
        real_fields(self, pairs, **kwargs)

    monkeypatch.setattr(render.Renderer, "table", table)
    monkeypatch.setattr(render.Renderer, "fields", fields_)
    env = {"COLUMNS": str(width), "TTY_COMPATIBLE": "1", "NO_COLOR": "1"}
    result = runner.invoke(app, [*argv(world), "--wide"], env=env)
    assert result.exit_code in (0, 1), result.output  # doctor exits 1 when a store is unreachable
    out, err = ANSI.sub("", result.stdout), result.stderr
    assert tables or fields, f"{name}: printed no table"
    assert "…" not in out, f"{name}: a shortened cell at {width} columns"
    assert max(len(line) for line in out.splitlines()) <= width, f"{name}: wider than {width} columns"
    both = out + "\n" + ANSI.sub("", err)  # a summary table goes to stderr, as every command's summary
    streams = _column_streams(both)
    records = _record_fields(both, {col.header or col.key for _, columns in tables for col in columns})
    whole = _squash(both)
    lines = both.splitlines()
    checked = 0
    for rows, columns in tables:
        for col in columns:
            for row in rows:
                text = _text(row.get(col.key), col.fmt)
                value = _squash(text)
                if not value:
                    continue
                found = any(value in s for s in streams) or any(value in f for f in records)
                if not found and not streams and not records:
                    found = value in whole  # one column: no rules
                assert found, f"{name} at {width} columns: {col.header!r} value {value!r} is not whole in\n{out}\n{err}"
                if getattr(col, "kind", None) not in (TEXT, FOLD):  # identifier-like: no word folds
                    for word in text.split():
                        if len(word) <= width - 14:  # a word wider than a record's value column must fold
                            assert any(word in line for line in lines), (
                                f"{name} at {width} columns: {col.header!r} word {word!r} folded in\n{out}"
                            )
                checked += 1
    assert "left out" not in err, f"{name} at {width}: a column was left out\n{err}"
    for line in ANSI.sub("", err).replace("\r", "\n").splitlines():
        assert len(line) <= width, f"{name} at {width}: a note wider than the terminal: {line!r}"
    for pairs in fields:
        for _, value in pairs:
            assert _squash(str(value)) in whole, f"{name} at {width}: field {value!r} not whole"
            checked += 1
    assert checked, f"{name}: nothing checked"


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize(("name", "argv"), COMMANDS, ids=[c[0] for c in COMMANDS])
def test_one_line_per_record(
    world: dict[str, str],
    runner: CliRunner,
    monkeypatch: pytest.MonkeyPatch,
    name: str,
    argv: Callable[[dict[str, str]], list[str]],
    width: int,
) -> None:
    """Without --wide, each row of each table on stdout is one line within the width, its key
    cells whole on it; a hidden column is named on stderr, never silently gone."""
    from veadk_mem.cli.columns import KEY

    tables: list[tuple[list[dict[str, Any]], list[Any]]] = []
    real_table = render.Renderer.table

    def table(self: Any, rows: Any, columns: Any, **kwargs: Any) -> None:
        if not kwargs.get("to_stderr"):
            tables.append((list(rows), list(columns)))
        real_table(self, rows, columns, **kwargs)

    monkeypatch.setattr(render.Renderer, "table", table)
    env = {"COLUMNS": str(width), "TTY_COMPATIBLE": "1", "NO_COLOR": "1"}
    result = runner.invoke(app, argv(world), env=env)
    assert result.exit_code in (0, 1), result.output
    out, err = ANSI.sub("", result.stdout), " ".join(ANSI.sub("", result.stderr).split())
    lines = out.splitlines()
    assert max((len(line) for line in lines), default=0) <= width, f"{name}: wider than {width}\n{out}"
    if "one block per row" in err:  # keys alone wider than the terminal: records, said so
        return
    rows_lines = [line for line in lines if "│" in line]
    for rows, columns in tables:
        keys = [c for c in columns if c.kind == KEY]
        for row in rows:
            cells = [
                str(c.fmt(row.get(c.key)) if c.fmt else row.get(c.key)) for c in keys if row.get(c.key) is not None
            ]
            if cells:
                assert any(all(cell in line for cell in cells) for line in rows_lines), (
                    f"{name} at {width}: row {cells} not whole on one line\n{out}"
                )
        shown_headers = {h.strip() for line in lines if "┃" in line for h in line.split("┃")}
        drawn = any(h for h in shown_headers)
        for col in columns:
            if drawn and col.header and col.header not in shown_headers and any(row.get(col.key) for row in rows):
                assert col.header in err and "--wide" in err, f"{name} at {width}: {col.header!r} gone unsaid\n{err}"


def test_session_list_of_61_sessions_fits_80_columns_in_61_lines(tmp_path: Path, runner: CliRunner) -> None:
    """The issue's case: 61 ADK sessions at 80 columns are 61 lines and a 2-line header, not
    491 lines of blocks; what is hidden is said once, in a footer on stderr."""
    import asyncio
    import time

    from google.adk.events import Event
    from google.adk.sessions import DatabaseSessionService
    from google.genai import types

    db = tmp_path / "s.db"

    async def write() -> None:
        service = DatabaseSessionService(db_url=f"sqlite+aiosqlite:///{db}")
        try:
            for n in range(61):
                session = await service.create_session(
                    app_name="travel_planner" if n % 3 else "support_app", user_id=f"user-{n % 7}", state={"k": n}
                )
                content = types.Content(role="user", parts=[types.Part(text=f"order {n} arrived cracked")])
                await service.append_event(
                    session, Event(author="user", timestamp=time.time() - n * 3600, content=content)
                )
        finally:
            await service.close()

    asyncio.run(write())
    env = {"COLUMNS": "80", "TTY_COMPATIBLE": "1", "NO_COLOR": "1"}
    result = runner.invoke(app, ["session", "list", "--db-url", str(db)], env=env)
    assert result.exit_code == 0, result.output
    lines = ANSI.sub("", result.stdout).splitlines()
    assert len(lines) == 61 + 2 and max(len(line) for line in lines) <= 80
    assert all(re.search(r"[0-9a-f-]{36}", line) for line in lines[2:])  # each whole session id on its line
    assert lines[2].split("│")[-1].strip().endswith("ago")  # a compact time
    err = " ".join(result.stderr.split())
    assert err.count("hidden") == 1 and "created" in err and "--wide" in err
    wide = runner.invoke(app, ["session", "list", "--db-url", str(db), "--wide"], env=env)
    assert "hidden" not in wide.stderr and "created" in ANSI.sub("", wide.stdout)
    blocks = runner.invoke(app, ["session", "list", "--db-url", str(db), "--records"], env=env)
    assert ANSI.sub("", blocks.stdout).count("─[ ") == 61 and "too narrow" not in blocks.stderr


@pytest.mark.parametrize("by", [None, "app", "user", "day", "week", "age"])
def test_session_stats_keeps_one_line_per_row_at_80_columns(tmp_path: Path, runner: CliRunner, by: str) -> None:
    """#45 item 1: the age table (a bar and two 'older' columns) and the group tables (four token
    columns) became record blocks at 80 columns, with the 'too narrow' note each time; they drop
    their lower-priority columns by their declared order instead, and name them. (Keys wider
    than the terminal still make records: `world`'s 51-character ids, not here.)"""
    db = str(tmp_path / "sessions.db")
    for source in (EXAMPLES / "support_app-sessions.json", EXAMPLES / "ltm_demo-history.jsonl"):
        assert runner.invoke(app, ["session", "import", str(source), "--db-url", db]).exit_code == 0
    argv = ["session", "stats", "--db-url", db, *(["--by", by] if by else [])]
    result = runner.invoke(app, argv, env={"COLUMNS": "80", "TTY_COMPATIBLE": "1", "NO_COLOR": "1"})
    assert result.exit_code == 0, result.output
    err = " ".join(ANSI.sub("", result.stderr).split())
    assert "one block per row" not in err and "─[ 1 ]" not in result.stdout, result.stdout + err
    assert max(len(line) for line in ANSI.sub("", result.stdout).splitlines()) <= 80
    assert "hidden" in err  # what went is named once
