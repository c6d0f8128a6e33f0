"""The import fast path (`rawsession.raw_session`) against the models it stands in for.

For any decoded JSON document, either the fast walk declines (None) and the import goes
through the models, or it gives exactly what the models give: the same session fields and,
for every event, the dict `Event.model_dump(mode="json", exclude_none=True)` stores.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from veadk_mem import events as ev
from veadk_mem.sessions.checks import _fill_event_ids
from veadk_mem.sessions.rawsession import dump_event, raw_session

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**60), max_value=2**60),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=6),
)
json_values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=8,
)


def _maybe(value: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """Mostly the well-typed value, sometimes anything JSON (the models then coerce or refuse)."""
    return st.one_of(value, value, value, json_values)


def _obj(fields: dict[str, st.SearchStrategy[Any]]) -> st.SearchStrategy[dict[str, Any]]:
    """A dict with any subset of `fields` (either spelling where two are given as 'a|b') plus extras."""

    @st.composite
    def build(draw: st.DrawFn) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for names, strategy in fields.items():
            if draw(st.booleans()):
                spellings = names.split("|")
                out[draw(st.sampled_from(spellings))] = draw(strategy)
        for _ in range(draw(st.integers(0, 2))):
            out[draw(st.sampled_from(["usageMetadata", "transfer_to_agent", "x", "groundingMetadata"]))] = draw(
                json_values
            )
        keys = list(out)
        order = draw(st.permutations(keys))
        return {k: out[k] for k in order}

    return build()


part = _obj(
    {
        "text": _maybe(st.text(max_size=8)),
        "thought": _maybe(st.booleans()),
        "functionCall|function_call": _maybe(
            _obj(
                {
                    "id": _maybe(st.text(max_size=3)),
                    "name": _maybe(st.text(max_size=3)),
                    "args": _maybe(st.dictionaries(st.text(max_size=3), json_values, max_size=2)),
                }
            )
        ),
        "inlineData|inline_data": _maybe(
            _obj({"mimeType|mime_type": _maybe(st.text(max_size=4)), "data": _maybe(st.text(max_size=4))})
        ),
    }
)
content = _obj({"role": _maybe(st.sampled_from(["user", "model"])), "parts": _maybe(st.lists(part, max_size=3))})
actions = _obj(
    {
        "stateDelta|state_delta": _maybe(st.dictionaries(st.text(max_size=4), json_values, max_size=3)),
        "artifactDelta|artifact_delta": _maybe(st.dictionaries(st.text(max_size=4), st.integers(0, 9), max_size=2)),
    }
)
event = _obj(
    {
        "id": _maybe(st.text(min_size=1, max_size=6)),
        "invocationId|invocation_id": _maybe(st.text(max_size=6)),
        "author": _maybe(st.sampled_from(["user", "agent"])),
        "timestamp": _maybe(st.floats(0, 4e9) | st.integers(0, 4_000_000_000)),
        "content": _maybe(content),
        "actions": _maybe(actions),
        "partial|partial": _maybe(st.booleans()),
        "turnComplete|turn_complete": _maybe(st.booleans()),
        "longRunningToolIds|long_running_tool_ids": _maybe(st.lists(st.text(max_size=3), max_size=2)),
        "customMetadata|custom_metadata": _maybe(st.dictionaries(st.text(max_size=3), json_values, max_size=2)),
        "inputTranscription|input_transcription": _maybe(
            _obj({"text": _maybe(st.text(max_size=4)), "finished": _maybe(st.booleans())})
        ),
    }
)
session = st.fixed_dictionaries(
    {
        "id": _maybe(st.text(min_size=1, max_size=5)),
        "appName": _maybe(st.text(min_size=1, max_size=5)),
        "userId": _maybe(st.text(min_size=1, max_size=5)),
    },
    optional={
        "state": _maybe(st.dictionaries(st.text(max_size=4), json_values, max_size=3)),
        "events": _maybe(st.lists(event, max_size=4)),
        "lastUpdateTime": _maybe(st.floats(0, 4e9) | st.integers(0, 10)),
    },
)


def _model_path(doc: dict[str, Any]) -> ev.Session | None:
    try:
        model = ev.Session.model_validate(doc)
    except Exception:
        return None
    if not (model.id and model.app_name and model.user_id):
        return None
    try:
        _fill_event_ids(model, "test")
    except Exception:
        return None
    return model


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(session)
def test_the_fast_walk_gives_what_the_models_give_or_declines(doc: dict[str, Any]) -> None:
    fast = raw_session(json.loads(json.dumps(doc)))
    if fast is None:
        return
    model = _model_path(doc)
    assert model is not None, "the fast walk took a session the models refuse"
    assert (fast.id, fast.app_name, fast.user_id) == (model.id, model.app_name, model.user_id)
    assert fast.state == model.state
    assert fast.last_update_time == model.last_update_time
    assert type(fast.last_update_time) is float
    assert len(fast.events) == len(model.events)
    for got, want in zip(fast.events, model.events, strict=True):
        assert got.data == dump_event(want)
        assert (got.id, got.invocation_id, got.author, got.timestamp) == (
            want.id,
            want.invocation_id,
            want.author,
            want.timestamp,
        )
        assert (got.branch, got.error_code) == (want.branch, want.error_code)


def test_sessions_adk_writes_take_the_fast_path() -> None:
    """What ADK and vmem's exports write (camelCase, declared types) never needs the models."""
    from tests.adk_samples import rich_adk_session

    docs = [json.loads(rich_adk_session().model_dump_json(by_alias=True, exclude_none=True))]
    for path in sorted((Path(__file__).parents[1] / "docs" / "examples" / "sessions").glob("*.json")):
        data = json.loads(path.read_text())
        docs += data if isinstance(data, list) else [data]
    assert len(docs) > 3
    for doc in docs:
        fast = raw_session(json.loads(json.dumps(doc)))
        assert fast is not None, doc.get("id")
        model = _model_path(doc)
        assert model is not None
        assert [e.data for e in fast.events] == [dump_event(e) for e in model.events]


@pytest.mark.parametrize(
    ("change", "expect"),
    [
        ({"partial": "true"}, True),  # the models coerce it: stored as a bool
        ({"timestamp": "1790000000.5"}, 1790000000.5),
        ({"invocationId": 7}, "refused"),  # no coercion int -> str: the models refuse
    ],
)
def test_input_the_models_coerce_or_refuse_is_left_to_them(tmp_path: Path, change: dict[str, Any], expect: Any) -> None:
    import asyncio

    from veadk_mem.errors import BadInput
    from veadk_mem.sessions.importer import import_file
    from veadk_mem.sessions.store import SessionStore

    event = {"id": "e1", "invocationId": "i1", "author": "user", "timestamp": 1790000000.0, **change}
    doc = {"id": "s1", "appName": "app", "userId": "u", "events": [event]}
    assert raw_session(json.loads(json.dumps(doc))) is None
    path = tmp_path / "in.jsonl"
    path.write_text(json.dumps(doc) + "\n")
    url = f"sqlite+aiosqlite:///{tmp_path / 'db.sqlite'}"

    async def run() -> Any:
        await import_file(SessionStore(url, create=True), path)
        async with SessionStore(url) as store:
            return await store.get_session("app", "u", "s1")

    if expect == "refused":
        with pytest.raises(BadInput, match=r"line 1: \$\.events\[0\]\.invocationId"):
            asyncio.run(run())
        assert not (tmp_path / "db.sqlite").exists()
        return
    got = asyncio.run(run())
    key = next(iter(change))
    value = got.events[0].model_dump()[{"partial": "partial", "timestamp": "timestamp"}[key]]
    assert value == expect and type(value) is type(expect)


def test_a_shape_half_built_in_one_thread_is_not_used_by_another(monkeypatch: pytest.MonkeyPatch) -> None:
    """The walk's shape of the models is built on first use. Held half-built in one thread while a
    second thread walks a session, the second used to take the half-built one (its fields not yet
    filled in): it declined a good session, or, half-built further, failed with KeyError('invocation_id')
    (two first imports into an empty MariaDB, run in two threads of one process, in 1 of 6 runs)."""
    import threading

    from veadk_mem.sessions import rawsession

    monkeypatch.setattr(rawsession, "_SHAPES", {})
    real = rawsession._kind_of
    holding, release = threading.Event(), threading.Event()

    def held_in_first(annotation: Any, cache: Any) -> Any:
        if threading.current_thread().name == "first" and not holding.is_set():
            holding.set()
            release.wait(30)
        return real(annotation, cache)

    monkeypatch.setattr(rawsession, "_kind_of", held_in_first)
    doc = {
        "id": "s1",
        "appName": "a",
        "userId": "u",
        "state": {},
        "events": [{"id": "e1", "author": "user", "invocationId": "inv", "timestamp": 1_790_000_000.0}],
        "lastUpdateTime": 1_790_000_001.0,
    }
    got: dict[str, Any] = {}
    first = threading.Thread(target=lambda: got.setdefault("first", raw_session(json.loads(json.dumps(doc)))))
    first.name = "first"
    first.start()
    try:
        assert holding.wait(30)
        second = raw_session(json.loads(json.dumps(doc)))  # while the first thread builds the shape
    finally:
        release.set()
        first.join(30)
    assert second is not None and second == got["first"]
    assert [e.invocation_id for e in second.events] == ["inv"]
