"""The policy core: resolution, VeADK's merge rules, per-event decisions and their reasons.

Expected strings were observed with veadk-python 1.1.19 (see tests/test_policy_veadk.py
for the recorded corpus); these tests pin the rules one at a time.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from veadk_mem.errors import BadInput
from veadk_mem.events import Event, event_types
from veadk_mem.policy import (
    MemoryAutoSavePolicy,
    decode_base64,
    evaluate,
    memory_strings,
    resolve_policy,
)


def ev(content: dict[str, Any] | None = None, author: str = "user", **extra: Any) -> Event:
    data: dict[str, Any] = {"id": "e1", "author": author, **extra}
    if content is not None:
        data["content"] = content
    return Event.model_validate(data)


def user_text(text: str = "hi") -> Event:
    return ev({"role": "user", "parts": [{"text": text}]})


def saved(event: Event, spec: Any = None, **kw: Any) -> str | None:
    [decision] = evaluate([event], resolve_policy(spec, **kw))
    return decision.memory


def reason(event: Event, spec: Any = None, **kw: Any) -> str:
    [decision] = evaluate([event], resolve_policy(spec, **kw))
    return decision.reason


# --- resolution ---------------------------------------------------------------------


def test_presets_match_veadk() -> None:
    default = resolve_policy(None).policy
    assert default.include_roles == ["user"] and default.include_event_types == ["text"]
    assert not default.include_thought and not default.include_empty_text and default.text_only
    everything = resolve_policy("all").policy
    assert everything.include_roles == ["user", "assistant", "system"]
    assert everything.include_event_types is None and not everything.text_only
    assert everything.include_thought and everything.include_empty_text
    custom = resolve_policy("custom").policy
    assert custom.include_roles is None and custom.include_event_types is None and custom.text_only


def test_openviking_and_include_assistant_widen_only_the_default_preset() -> None:
    assert resolve_policy(None, backend="openviking").policy.include_roles == ["user", "assistant"]
    assert resolve_policy("default", include_assistant=True).policy.include_roles == ["user", "assistant"]
    assert resolve_policy({"text_only": False}, include_assistant=True).policy.include_roles == ["user", "assistant"]
    assert resolve_policy("custom", include_assistant=True).policy.include_roles is None
    assert resolve_policy(None, backend="redis").policy.include_roles == ["user"]


def test_dict_overrides_only_fields_it_sets_and_null_is_an_override() -> None:
    resolved = resolve_policy({"preset": "all", "include_roles": None, "include_thought": False})
    assert resolved.policy.include_roles is None
    assert resolved.policy.include_thought is False
    assert resolved.policy.include_empty_text is True
    assert resolved.overridden == {"include_roles", "include_thought"}
    assert resolved.source_of("include_thought") == "override"
    assert resolved.source_of("text_only") == "preset all"
    assert resolve_policy({"include_roles": []}).policy.include_roles == []


def test_model_instance_keeps_its_fields_set() -> None:
    resolved = resolve_policy(MemoryAutoSavePolicy(preset="all", text_only=True))
    assert resolved.policy.text_only is True and resolved.policy.include_thought is True


def test_unknown_preset_string_is_default_with_a_warning() -> None:
    warnings: list[str] = []
    resolved = resolve_policy("alll", warn=warnings.append)
    assert resolved.policy == resolve_policy("default").policy
    assert warnings == ["unknown policy preset 'alll': VeADK treats it as 'default' (did you mean 'all'?)"]
    assert resolve_policy(" all ").policy.preset == "default"  # VeADK compares the string exactly


def test_unknown_field_warns_and_is_ignored() -> None:
    warnings: list[str] = []
    resolved = resolve_policy({"preset": "custom", "incude_roles": ["user"]}, warn=warnings.append)
    assert resolved.policy.include_roles is None
    assert warnings == ["--policy: unknown policy field 'incude_roles' is ignored (did you mean 'include_roles'?)"]


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ({"preset": "bogus"}, "--policy: preset: input should be 'default', 'all' or 'custom', got 'bogus'"),
        ({"include_roles": ["usr"]}, "include_roles.0: .* got 'usr' \\(did you mean 'user'\\?\\)"),
        ({"exclude_event_types": ["txt"]}, "exclude_event_types.0: .*did you mean 'text'"),
        ({"include_event_types": "text"}, "include_event_types: input should be a valid list"),
        ({"text_only": "maybe"}, "text_only: input should be a valid boolean"),
    ],
)
def test_bad_values_name_the_field(spec: dict[str, Any], message: str) -> None:
    with pytest.raises(BadInput, match=message):
        resolve_policy(spec)


def test_inline_json_files_and_named_policies(tmp_path: Path) -> None:
    assert resolve_policy('{"preset": "all"}').policy.preset == "all"
    json_file = tmp_path / "p.json"
    json_file.write_text('{"preset": "custom", "include_thought": true}')
    assert resolve_policy(str(json_file)).policy.include_thought is True
    toml_file = tmp_path / "p.toml"
    toml_file.write_text('preset = "custom"\ninclude_roles = ["assistant"]\n')
    resolved = resolve_policy(str(toml_file))
    assert resolved.policy.include_roles == ["assistant"] and resolved.origin == str(toml_file)
    named = {"tools": {"preset": "custom", "include_event_types": ["function_call"]}, "alias": "tools"}
    assert resolve_policy("alias", named=named).policy.include_event_types == ["function_call"]
    assert resolve_policy("tools", named=named).origin == "config [policy.tools]"


def test_policy_input_errors(tmp_path: Path) -> None:
    with pytest.raises(BadInput, match=r"inline JSON\): line 1, column \d+: invalid JSON"):
        resolve_policy('{"preset": ')
    with pytest.raises(BadInput, match=r"nope\.json: policy file not found"):
        resolve_policy("nope.json")
    bad = tmp_path / "bad.toml"
    bad.write_text("preset = \n")
    with pytest.raises(BadInput, match=r"bad\.toml: invalid TOML"):
        resolve_policy(str(bad))
    listed = tmp_path / "list.json"
    listed.write_text("[1]")
    with pytest.raises(BadInput, match="expected a preset name or a policy object, got list"):
        resolve_policy(str(listed))
    with pytest.raises(BadInput, match="refers to itself"):
        resolve_policy("loop", named={"loop": "loop"})


# --- decisions ----------------------------------------------------------------------


def test_default_saves_user_text_without_author() -> None:
    assert saved(user_text("花生")) == '{"parts": [{"text": "花生"}], "role": "user"}'
    assert saved(user_text(), "custom") == '{"parts": [{"text": "hi"}], "role": "user", "author": "user"}'


def test_role_normalisation() -> None:
    tool_reply = ev({"role": "user", "parts": [{"text": "r"}]}, author="agent")
    assert json.loads(saved(tool_reply) or "")["role"] == "user"
    assert reason(ev({"role": "model", "parts": [{"text": "x"}]}, author="agent")) == (
        "role assistant not in include_roles [user]"
    )
    assert (
        json.loads(saved(ev({"role": "system", "parts": [{"text": "x"}]}, author="sys"), "all") or "")["role"]
        == "system"
    )
    assert (
        json.loads(saved(ev({"role": "tool", "parts": [{"text": "x"}]}, author="a"), "all") or "")["role"]
        == "assistant"
    )


def test_author_filters_are_exact() -> None:
    event = ev({"role": "model", "parts": [{"text": "x"}]}, author="Chef")
    assert reason(event, {"preset": "all", "include_authors": ["chef"]}) == (
        "author 'Chef' not in include_authors [chef]"
    )
    assert reason(event, {"preset": "all", "exclude_authors": ["Chef"]}) == "author 'Chef' in exclude_authors [Chef]"


def test_thought_only_and_mixed_thought_parts() -> None:
    thought = ev({"role": "user", "parts": [{"text": "hmm", "thought": True, "thoughtSignature": "AP8="}]})
    assert reason(thought, "custom") == "only thought parts and include_thought is off"
    assert saved(thought, {"preset": "custom", "include_thought": True}) == (
        '{"parts": [{"text": "hmm", "thought": true, "thought_signature": "AP8="}], "role": "user", "author": "user"}'
    )
    mixed = ev(
        {"role": "user", "parts": [{"text": "plan", "thought": True, "thoughtSignature": "_w", "functionCall": {}}]}
    )
    assert saved(mixed, {"preset": "custom", "include_event_types": ["function_call"]}) == (
        '{"parts": [{"function_call": {}, "text": "plan"}], "role": "user", "author": "user"}'
    )


def test_inline_data_is_replaced_by_its_size() -> None:
    sizes = []
    for n in range(6):
        data = ["", "AA==", "AAA=", "AAAA", "AAAAAA", "AAAAAAA"][n]
        event = ev({"role": "user", "parts": [{"inlineData": {"mimeType": "x/y", "data": data}}]})
        memory = json.loads(saved(event, "all") or "")
        sizes.append(memory["parts"][0]["inline_data"]["data_size"])
        assert memory["parts"][0]["inline_data"]["data_omitted"] is True
    assert sizes == [0, 4, 4, 4, 8, 8]


def test_function_response_media_is_not_sanitised_and_bytes_are_urlsafe() -> None:
    event = ev({"role": "user", "parts": [{"functionResponse": {"parts": [{"inlineData": {"data": "+/8="}}]}}]})
    assert saved(event, "all") == (
        '{"parts": [{"function_response": {"parts": [{"inline_data": {"data": "-_8="}}]}}], '
        '"role": "user", "author": "user"}'
    )


def test_transcriptions_and_errors_become_text_parts() -> None:
    event = ev(
        None,
        inputTranscription={},
        outputTranscription={"text": "试试", "finished": True},
        errorCode="",
        errorMessage="quota",
    )
    assert saved(event, "all") == (
        '{"parts": [{"text": "{}", "part_metadata": {"event_type": "input_transcription"}}, '
        '{"text": "{\\"text\\": \\"试试\\", \\"finished\\": true}", '
        '"part_metadata": {"event_type": "output_transcription"}}, '
        '{"text": "quota", "part_metadata": {"event_type": "error"}}], "role": "user", "author": "user"}'
    )
    assert reason(ev(None, errorCode=""), "all").startswith("role user, types [] allowed")


def test_contentless_events() -> None:
    assert saved(ev(None, author="a"), "all") == '{"parts": [], "role": "assistant", "author": "a"}'
    assert reason(ev(None), "custom") == "no content and include_empty_text is off"
    assert saved(ev({"role": "user"}), "all") == '{"role": "user", "parts": [], "author": "user"}'


def test_text_only_matters_only_without_include_list() -> None:
    call = ev({"role": "user", "parts": [{"functionCall": {"name": "f"}}]})
    assert reason(call, "custom") == "no part left: function_call part: text_only keeps only text and thought parts"
    assert saved(call, {"preset": "custom", "include_event_types": ["function_call"]}) is not None


def test_exclude_wins() -> None:
    event = ev({"role": "user", "parts": [{"text": "x"}]})
    assert reason(event, {"preset": "all", "exclude_event_types": ["text"]}) == (
        "event types [text] all in exclude_event_types [text]"
    )
    assert reason(event, {"preset": "all", "exclude_roles": ["user"]}) == "role user in exclude_roles [user]"


def test_saved_reason_lists_dropped_parts() -> None:
    event = ev({"role": "user", "parts": [{"text": "a"}, {"text": "b", "thought": True}, {"fileData": {}}]})
    assert reason(event) == (
        "role user, types [text, thought, media] allowed; dropped thought part: not in include_event_types [text]; "
        "media part: not in include_event_types [text]"
    )


def test_bad_base64_is_bad_input() -> None:
    event = ev({"role": "user", "parts": [{"inlineData": {"data": "YR=="}}]})
    with pytest.raises(BadInput, match=r"event e1: content.parts\[0\].inline_data.data: invalid base64"):
        memory_strings([event], resolve_policy("all"))


def test_unknown_content_fields_warn_once() -> None:
    warnings: list[str] = []
    events = [ev({"role": "user", "parts": [{"text": "x", "shiny": 1}]}) for _ in range(3)]
    list(evaluate(events, resolve_policy(None), warn=warnings.append))
    assert len(warnings) == 1 and "parts[0].shiny: not a google-genai field" in warnings[0]


@pytest.mark.parametrize(
    ("text", "raw"),
    [("", b""), ("YQ", b"a"), ("YQ=", b"a"), ("YQ==", b"a"), ("YW-j", b"ao\xa3"), ("YW+j", b"ao\xa3"), ("YWI=", b"ab")],
)
def test_base64_accepted_like_pydantic(text: str, raw: bytes) -> None:
    assert decode_base64(text) == raw


@pytest.mark.parametrize(
    "text",
    ["YQ===", "Y Q==", "YWJj\n", "YW+_", "Y", "YQ==YQ==", "=", "YR==", "YWJ=", "YWJ==", "AAAA=", "AA=A", "A-_="],
)
def test_base64_refused_like_pydantic(text: str) -> None:
    assert decode_base64(text) is None


def test_event_types_match_veadk_inference() -> None:
    event = ev({"role": "user", "parts": [{"text": ""}, {"text": "", "thought": True}, {"text": "t", "thought": True}]})
    assert event_types(event) == ["thought"]
    [decision] = evaluate([event], resolve_policy("all"))
    assert decision.types == ["thought"]


def test_reasons_name_transcriptions_and_errors_left_out() -> None:
    event = ev(None, inputTranscription={"text": "t"}, errorMessage="boom")
    assert reason(event, "custom") == (
        "no part left: transcription: text_only keeps only text and thought parts; "
        "error: text_only keeps only text and thought parts"
    )
    assert reason(event, {"preset": "all", "exclude_event_types": ["error"]}) == (
        "role user, types [transcription, error] allowed; dropped error: in exclude_event_types"
    )
    assert reason(ev({"role": "user", "parts": [{"text": ""}]}), "custom") == (
        "no content and include_empty_text is off"
    )
    assert reason(ev({"role": "user", "parts": [{"text": ""}, {"text": "x"}]}), "custom") == (
        "role user, types [text] allowed; dropped empty part (no text, data or call)"
    )


def test_named_policy_warnings_say_where() -> None:
    warnings: list[str] = []
    named = {"tools": {"preset": "custom", "include_event_type": ["text"]}}
    resolve_policy("tools", named=named, warn=warnings.append)
    assert warnings == [
        "config [policy.tools]: unknown policy field 'include_event_type' is ignored "
        "(did you mean 'include_event_types'?)"
    ]
    warnings.clear()
    resolve_policy("tols", named=named, warn=warnings.append)
    assert warnings == ["unknown policy preset 'tols': VeADK treats it as 'default' (did you mean 'tools'?)"]
