"""The CLI decides nothing and writes nothing itself: what it used to decide is core code with
its own tests, and every byte it prints goes through the pipe-safe writer."""

from __future__ import annotations

import ast
import copy
import json
import random
from pathlib import Path

import pytest
from pydantic import ValidationError
from sessions_helpers import adk_events

from veadk_mem import events as ev
from veadk_mem.ltm.scope import whole_index
from veadk_mem.sessions import timeline as tl
from veadk_mem.sessions.timeline import TABLE_EVENTS, Timeline, window

CLI = Path(__file__).resolve().parents[1] / "veadk_mem" / "cli"
WRITER = "terminal.py"  # the one module that writes to a stream


def _writes(tree: ast.AST) -> list[str]:
    """print(), typer.echo() and sys.stdout/stderr.write() calls in a module."""
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        name = ast.unparse(func)
        if name in ("print", "typer.echo", "sys.stdout.write", "sys.stderr.write", "click.echo"):
            found.append(f"line {node.lineno}: {name}")
    return found


def test_no_cli_module_writes_a_stream_but_through_the_writer() -> None:
    offenders = {
        path.name: hits
        for path in sorted(CLI.glob("*.py"))
        if path.name != WRITER and (hits := _writes(ast.parse(path.read_text(encoding="utf-8"))))
    }
    assert offenders == {}


@pytest.mark.parametrize(
    ("everything", "since", "until", "whole"),
    [(True, None, None, True), (True, 1.0, None, False), (True, None, 2.0, False), (False, None, None, False)],
)
def test_only_an_unnarrowed_all_takes_the_whole_index(
    everything: bool, since: float | None, until: float | None, whole: bool
) -> None:
    assert whole_index(everything=everything, since=since, until=until) is whole


def test_a_terminal_timeline_is_capped_only_when_no_count_was_asked() -> None:
    assert window(TABLE_EVENTS + 5, None, cap=True) == tl.Window(TABLE_EVENTS, TABLE_EVENTS, 6, True)
    assert window(TABLE_EVENTS + 5, None, cap=False) == tl.Window(None, TABLE_EVENTS + 5, 1, False)
    assert window(TABLE_EVENTS + 5, 3, cap=True) == tl.Window(3, 3, TABLE_EVENTS + 3, False)
    assert window(4, 10, cap=True) == tl.Window(10, 4, 1, False)
    assert window(0, None, cap=True) == tl.Window(None, 0, 1, False)


def _events() -> list[object]:
    """ADK's own events of every kind (snake_case and camelCase), and odd ones ADK refuses or coerces."""
    plain: list[object] = [e.model_dump(mode="json", exclude_none=True) for e in adk_events(12)]
    plain += [e.model_dump(mode="json", by_alias=True, exclude_none=True) for e in adk_events(6)]
    compaction = {
        "startTimestamp": 1,
        "endTimestamp": 2e9,
        "compactedContent": {"role": "model", "parts": [{"text": "s"}]},
    }
    odd: list[object] = [
        {"author": 5},
        {"content": "str"},
        {"timestamp": "12.5", "author": "a"},  # coerced by the model
        {"errorCode": "E1", "error_code": "E2"},  # given twice: the alias wins, as in the model
        {"actions": {"stateDelta": {"a": 1}, "state_delta": {"b": 2}}},
        {"actions": {"compaction": compaction}, "timestamp": 5},
        {"actions": {"compaction": {**compaction, "compactedContent": {"parts": 5}}}},
        {"content": {"parts": [{"text": "t", "thought": "yes"}]}},
        [],
    ]
    rng = random.Random(40)
    mutated = []
    for _ in range(300):
        data = copy.deepcopy(rng.choice(plain))
        for _ in range(rng.randint(1, 3)):
            key = rng.choice(["author", "timestamp", "content", "actions", "branch", "errorMessage", "partial"])
            data[key] = rng.choice([None, 1, 1.5, "s", True, [], {}, {"parts": [{"text": 3}]}, {"state_delta": []}])
        mutated.append(data)
    return [*plain, *odd, *mutated]


def _model_row(timeline: Timeline, data: object) -> dict[str, object]:
    """The row the pydantic model's reading of the event gives (the slow path, for every event)."""
    try:
        return timeline._row(tl._dump(ev.Event.model_validate(data)))
    except ValidationError as exc:
        row = tl.odd_row(data, exc)
        row["n"] = timeline.next
        timeline.next += 1
        return row


def test_a_timeline_read_from_the_json_is_the_models_reading() -> None:
    fast, slow = Timeline(1), Timeline(1)
    for data in _events():
        assert json.dumps(fast.row_of(data), sort_keys=True) == json.dumps(_model_row(slow, data), sort_keys=True)


def test_an_adk_event_is_read_without_a_pydantic_model(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("a model built for an ADK event")

    events = [e.model_dump(mode="json", exclude_none=True) for e in adk_events(12)]
    monkeypatch.setattr(ev.Event, "model_validate", refuse)
    rows = [Timeline(1).row_of(data) for data in events]
    assert [r["types"] for r in rows[:6]] == [
        ["text"],
        ["thought", "text"],
        ["function_call"],
        ["function_response"],
        ["media"],
        ["error"],
    ]
