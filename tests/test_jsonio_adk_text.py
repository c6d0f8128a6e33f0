"""`adk_text` writes what ADK's DynamicJSON column writes (`json.dumps`), byte for byte, through the
encoder it builds once, NaN and infinities as null."""

from __future__ import annotations

import json
from typing import Any

import pytest

from veadk_mem.adkjson import fresh_source
from veadk_mem.jsonio import adk_text

VALUES: list[Any] = [
    {},
    [],
    "plain",
    "naïve — 東京 \U0001f600 \x7f \u202e",
    "\ud83d half an emoji",
    {"a": 1, "b": [1.5, -0.0, 1e300, 10**30, True, False, None], "c": {"d": {"e": 'x\ny\t"z\\'}}},
    {1: "int key", 2.5: "float key", False: "bool key", None: "null key"},
    {"usage_metadata": {"prompt_token_count": 12}, "actions": {"state_delta": {}, "artifact_delta": {}}},
]


@pytest.mark.parametrize("value", VALUES, ids=range(len(VALUES)))
def test_adk_text_is_json_dumps(value: Any) -> None:
    assert adk_text(value) == json.dumps(value)


def test_the_same_dict_twice_is_not_a_cycle() -> None:
    shared = {"k": [1, 2]}
    assert adk_text({"a": shared, "b": [shared, shared]}) == json.dumps({"a": shared, "b": [shared, shared]})


def test_nan_and_infinities_are_null_and_the_next_value_is_unaffected() -> None:
    assert adk_text({"x": [float("nan"), {"y": float("inf")}], "z": -float("inf")}) == (
        '{"x": [null, {"y": null}], "z": null}'
    )
    assert adk_text({"x": [1.0, {"y": 2}]}) == '{"x": [1.0, {"y": 2}]}'  # the refused NaN left nothing behind


def test_a_compiled_default_is_a_fresh_copy_each_time() -> None:
    default = {"state_delta": {}, "artifact_delta": {"a": [1, {"b": "c"}]}, "n": 0.0}
    ns: dict[str, Any] = {}
    source = fresh_source(default, ns, "D0")
    first, second = eval(source, ns), eval(source, ns)
    assert first == second == default
    first["state_delta"]["x"] = 1
    first["artifact_delta"]["a"][1]["b"] = "changed"
    assert second == default and default["state_delta"] == {} and default["artifact_delta"]["a"][1] == {"b": "c"}
    assert "state_delta" not in source  # no value of the data in the source
