"""Session JSON in and out: real google-adk sessions survive a round trip through vmem."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from adk_samples import rich_adk_session

from veadk_mem.errors import BadInput
from veadk_mem.events import Session, event_types, iter_documents, read_sessions


def _roundtrip(text: str, tmp_path: Path) -> list[Session]:
    path = tmp_path / "in.json"
    path.write_text(text, encoding="utf-8")
    return list(read_sessions(path))


@pytest.mark.parametrize("by_alias", [True, False], ids=["camelCase", "snake_case"])
def test_adk_session_round_trips_through_vmem(tmp_path: Path, by_alias: bool) -> None:
    from google.adk.sessions import Session as AdkSession

    original = rich_adk_session()
    [ours] = _roundtrip(original.model_dump_json(by_alias=by_alias, exclude_none=True), tmp_path)
    again = AdkSession.model_validate_json(ours.to_json())
    assert again == original
    # Output is camelCase ADK JSON whatever the input was.
    out = json.loads(ours.to_json())
    assert {"appName", "userId", "lastUpdateTime"} <= set(out)
    assert "invocationId" in out["events"][0]
    assert "functionCall" in out["events"][1]["content"]["parts"][1]
    assert "stateDelta" in out["events"][2]["actions"]


def test_round_trip_is_byte_exact_for_adk_camel_json(tmp_path: Path) -> None:
    original = rich_adk_session()
    adk_json = original.model_dump_json(by_alias=True, exclude_none=True)
    [ours] = _roundtrip(adk_json, tmp_path)
    assert json.loads(ours.to_json()) == json.loads(adk_json)


def test_unknown_fields_are_kept(tmp_path: Path) -> None:
    doc = {
        "id": "s",
        "appName": "a",
        "userId": "u",
        "futureField": {"keep_me": 1},
        "events": [{"id": "e", "author": "user", "brandNew": True, "content": {"parts": [{"text": "hi", "xPart": 3}]}}],
    }
    [ours] = _roundtrip(json.dumps(doc), tmp_path)
    out = json.loads(ours.to_json())
    assert out["futureField"] == {"keep_me": 1}
    assert out["events"][0]["brandNew"] is True
    assert out["events"][0]["content"]["parts"][0]["xPart"] == 3


def test_snake_case_unknown_top_level_keys_come_out_camel(tmp_path: Path) -> None:
    doc = {"id": "s", "app_name": "a", "user_id": "u", "events": [{"id": "e", "grounding_metadata": {"a_b": 1}}]}
    [ours] = _roundtrip(json.dumps(doc), tmp_path)
    event = json.loads(ours.to_json())["events"][0]
    assert event["groundingMetadata"] == {"a_b": 1}


def test_list_jsonl_and_state_records(tmp_path: Path) -> None:
    one = {"id": "s1", "appName": "a", "userId": "u"}
    two = {"id": "s2", "appName": "a", "userId": "u"}
    listed = _roundtrip(json.dumps([one, two]), tmp_path)
    assert [s.id for s in listed] == ["s1", "s2"]
    lines = "\n".join(
        [json.dumps(one), "", json.dumps({"kind": "app_state", "appName": "a", "state": {}}), json.dumps(two)]
    )
    assert [s.id for s in _roundtrip(lines, tmp_path)] == ["s1", "s2"]


def test_pretty_printed_single_session(tmp_path: Path) -> None:
    [ours] = _roundtrip(json.dumps({"id": "s", "appName": "a", "userId": "u"}, indent=2), tmp_path)
    assert ours.app_name == "a"


def test_malformed_json_names_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text('{"id": "s", "appName": "a", "userId": "u"}\n{"id": oops}\n', encoding="utf-8")
    with pytest.raises(BadInput, match=r"bad\.jsonl: line 2, column 8: invalid JSON: expecting value$"):
        list(read_sessions(path))
    path.write_text('{"id": "s", "appName": "a", "userId": "u\n', encoding="utf-8")
    with pytest.raises(BadInput) as raised:
        list(read_sessions(path))
    # json says "Invalid control character at"; the position is given once, up front
    assert raised.value.message.endswith("line 1, column 41: invalid JSON: invalid control character")


def test_non_session_document_names_json_path(tmp_path: Path) -> None:
    path = tmp_path / "s.json"
    path.write_text(json.dumps({"id": "s", "appName": "a", "userId": "u", "events": [{"content": {"parts": "x"}}]}))
    with pytest.raises(BadInput, match=r"s\.json: (line 1: )?\$\.events\[0\]\.content\.parts: "):
        list(read_sessions(path))
    path.write_text(json.dumps({"hello": "world"}))
    with pytest.raises(BadInput, match=r"s\.json: (line 1: )?\$\.id: Field required"):
        list(read_sessions(path))
    path.write_text("[1]")
    with pytest.raises(BadInput, match=r"s\.json: \[0\]: \$: expected a session object"):
        list(read_sessions(path))


def test_missing_and_empty_files(tmp_path: Path) -> None:
    with pytest.raises(BadInput, match="no such file"):
        list(iter_documents(tmp_path / "nope.json"))
    empty = tmp_path / "empty.json"
    empty.write_text("  \n")
    with pytest.raises(BadInput, match="empty input"):
        list(iter_documents(empty))


def test_event_types_cover_every_kind(tmp_path: Path) -> None:
    [ours] = _roundtrip(rich_adk_session().model_dump_json(by_alias=True, exclude_none=True), tmp_path)
    kinds = [event_types(e) for e in ours.events]
    assert kinds[0] == ["text"]
    assert kinds[1] == ["thought", "function_call"]
    assert kinds[2] == ["function_response"]
    assert kinds[3] == ["media"]
    assert kinds[4] == ["executable_code", "code_execution_result"]
    assert kinds[5] == ["transcription"]
    assert kinds[6] == ["error"]


def test_jsonl_line_numbers_count_leading_blank_lines(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    path.write_text('\n\n{"id": "s", "appName": "a", "userId": "u"}\n{"id": 1}\n', encoding="utf-8")
    with pytest.raises(BadInput, match=r"s\.jsonl: line 4: \$\.id: "):
        list(read_sessions(path))
