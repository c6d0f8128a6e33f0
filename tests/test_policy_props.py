"""Property tests: random events and policies never crash the engine and decisions are coherent."""

from __future__ import annotations

import base64
import json
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from veadk_mem.events import Event, event_types
from veadk_mem.policy import EVENT_TYPES, ROLES, evaluate, memory_strings, resolve_policy

texts = st.sampled_from(["", " ", "hi", "花生", 'q"\\\n'])
b64 = st.binary(max_size=5).map(lambda b: base64.urlsafe_b64encode(b).decode())
parts = st.fixed_dictionaries(
    {},
    optional={
        "text": texts,
        "thought": st.sampled_from([True, False, None]),
        "thoughtSignature": b64,
        "functionCall": st.just({"name": "f", "args": {"a": None}}),
        "function_response": st.just({"name": "f", "response": {"ok": 1}}),
        "toolCall": st.just({"id": "t"}),
        "tool_response": st.just({"response": {}}),
        "inlineData": st.builds(lambda d: {"mimeType": "image/png", "data": d}, b64),
        "fileData": st.just({"fileUri": "gs://x"}),
        "executableCode": st.just({"code": "1", "language": "python"}),
        "code_execution_result": st.just({"outcome": "OUTCOME_OK"}),
    },
)
contents = st.one_of(
    st.none(),
    st.fixed_dictionaries(
        {},
        optional={
            "role": st.sampled_from(["user", "model", "system", "tool", ""]),
            "parts": st.lists(parts, max_size=3),
        },
    ),
)
events = st.builds(
    lambda n, author, content, extra: Event.model_validate(
        {"id": f"e{n}", "author": author, **({"content": content} if content is not None else {}), **extra}
    ),
    st.integers(0, 999),
    st.sampled_from(["user", "agent", "Agent", "", "system"]),
    contents,
    st.fixed_dictionaries(
        {},
        optional={
            "inputTranscription": st.just({"text": "t"}),
            "output_transcription": st.just({}),
            "errorCode": st.sampled_from(["", "E"]),
            "errorMessage": st.sampled_from(["", "m"]),
        },
    ),
)
maybe_roles = st.one_of(st.none(), st.lists(st.sampled_from(ROLES), max_size=3))
type_lists = st.lists(st.sampled_from(EVENT_TYPES), max_size=4)
policies: st.SearchStrategy[Any] = st.one_of(
    st.none(),
    st.sampled_from(["default", "all", "custom", "other"]),
    st.fixed_dictionaries(
        {},
        optional={
            "preset": st.sampled_from(["default", "all", "custom"]),
            "include_roles": maybe_roles,
            "exclude_roles": st.lists(st.sampled_from(ROLES), max_size=2),
            "include_authors": st.one_of(st.none(), st.lists(st.sampled_from(["user", "agent"]), max_size=2)),
            "exclude_authors": st.lists(st.sampled_from(["user", "Agent"]), max_size=2),
            "include_event_types": st.one_of(st.none(), type_lists),
            "exclude_event_types": type_lists,
            "text_only": st.booleans(),
            "include_thought": st.booleans(),
            "include_empty_text": st.booleans(),
        },
    ),
)

FAST = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@FAST
@given(st.lists(events, max_size=8), policies, st.booleans())
def test_every_event_gets_one_coherent_decision(batch: list[Event], spec: Any, assistant: bool) -> None:
    policy = resolve_policy(spec, include_assistant=assistant)
    decisions = list(evaluate(batch, policy))
    assert [d.event for d in decisions] == batch
    p = policy.policy
    for d in decisions:
        assert d.reason
        assert d.types == event_types(d.event)
        assert d.saved == (d.memory is not None)
        assert d.role in ROLES
        if d.memory is None:
            continue
        message = json.loads(d.memory)
        assert message["role"] == d.role and isinstance(message["parts"], list)
        assert ("author" in message) == (p.preset != "default" and bool(d.event.author))
        assert p.include_roles is None or d.role in p.include_roles
        assert d.role not in p.exclude_roles
        assert message["parts"] or p.include_empty_text
        for part in message["parts"]:
            assert "data" not in part.get("inline_data", {})
            assert p.include_thought or not (part.get("thought") and part.get("text"))


@FAST
@given(st.lists(events, max_size=8), policies)
def test_rerunning_is_identical(batch: list[Event], spec: Any) -> None:
    policy = resolve_policy(spec)
    first = memory_strings(batch, policy)
    assert memory_strings(batch, resolve_policy(spec)) == first
    assert [d.memory for d in evaluate(batch, policy) if d.saved] == first


@FAST
@given(st.binary(max_size=40), st.sampled_from(["std", "url", "nopad", "partial"]))
def test_every_valid_base64_spelling_is_respelt_urlsafe(raw: bytes, style: str) -> None:
    from veadk_mem.policy import urlsafe_base64

    expected = base64.urlsafe_b64encode(raw).decode()
    text = {"std": base64.b64encode(raw).decode(), "url": expected}.get(style, expected.rstrip("="))
    if style == "partial" and expected.endswith("=="):
        text += "="
    assert urlsafe_base64(text) == expected
