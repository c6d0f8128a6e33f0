"""A line read by the streaming scanner (over `VMEM_BIG_LINE` bytes) is accepted or refused exactly as
the same line read whole: same exit code, same message, same place (`sessions/bigline.py` `_scan`)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from veadk_mem.cli.app import app

PAD = '"p": "' + "y" * 1100 + '"'  # over the 1,024-byte cut before anything else in the object


def _event(i: int) -> dict[str, Any]:
    content = {"role": "user", "parts": [{"text": "x" * 600}]}
    return {"id": f"e{i}", "author": "user", "invocationId": "i", "timestamp": 1.7e9 + i, "content": content}


GOOD = json.dumps(
    {
        "id": "s1",
        "appName": "a",
        "userId": "u",
        "state": {},
        "events": [_event(i) for i in range(3)],
        "lastUpdateTime": 1.7e9,
    }
)
EVENTS = ",".join(json.dumps(_event(i)) for i in range(3))
LINES = {
    "good": GOOD,
    "extra data": GOOD + "x",
    "comma first": GOOD.replace('"events": [', '"events": [,'),
    "no comma": GOOD.replace("}, {", "} {", 1),
    "trailing comma": GOOD.replace("}]", "},]"),
    "no events": '{"id": "s1", "appName": "a", "userId": "u", "state": {}, "events": [], ' + PAD + "}",
    "events twice": '{"id": "s1", "appName": "a", "userId": "u", "state": {}, "events": ['
    + json.dumps(_event(1))
    + '], "events": ['
    + json.dumps(_event(2))
    + "], "
    + PAD
    + "}",
    "an array": "[1,2" + ",3" * 600 + "]",
    "no id": "{" + PAD + "}",
    "items without comma": "{" + PAD + ', "events": [1 2]}',
    "item missing": "{" + PAD + ', "events": [1,]}',
    "no colon": GOOD.replace('"state": {}', '"state" {}'),
    "members without comma": "{" + PAD + ', "id": "s1" "x": 1}',
    "closed twice": "{" + PAD + ', "events": [' + EVENTS + "]}}",
}


def _import(tmp_path: Path, line: str, env: dict[str, str]) -> tuple[int, str]:
    source = tmp_path / "in.jsonl"
    source.write_text(line + "\n", encoding="utf-8")
    db = tmp_path / f"s{len(env)}.db"
    result = CliRunner().invoke(app, ["session", "import", str(source), "--db-url", str(db)], env=env)
    return result.exit_code, result.stderr.replace(str(source), "FILE")


@pytest.mark.parametrize("name", list(LINES))
def test_a_big_line_is_read_as_the_same_line_whole(tmp_path: Path, name: str) -> None:
    line = LINES[name]
    whole = _import(tmp_path, line, {})
    streamed = _import(tmp_path, line, {"VMEM_BIG_LINE": "1024"})
    assert streamed == whole
    assert whole[0] == (0 if name in ("good", "no events", "events twice") else 2), whole


def test_the_scanner_reads_the_big_line(tmp_path: Path) -> None:
    """The one place the two reads differ, which shows the scanner ran: a line cut short is named
    at its own end by the scanner, at the next line by the JSON decoder of the whole file."""
    streamed = _import(tmp_path, GOOD[:-1], {"VMEM_BIG_LINE": "1024"})
    whole = _import(tmp_path, GOOD[:-1], {})
    said = "invalid JSON: expecting ',' delimiter\n"
    assert streamed == (2, f"vmem: error: FILE: line 1, column {len(GOOD) + 1}: {said}")
    assert whole == (2, f"vmem: error: FILE: line 2, column 1: {said}")
