"""vmem's memory strings equal VeADK 1.1.19's, byte for byte, on a recorded corpus.

tests/data/policy_veadk_1.1.19.json was written by bench/policy_reference.py running the
real veadk-python 1.1.19 (see the file's `produced_by` and `oracle` keys).
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

import pytest

from veadk_mem.errors import BadInput
from veadk_mem.events import Session, parse_session
from veadk_mem.policy import memory_strings, resolve_policy

CORPUS = Path(__file__).parent / "data" / "policy_veadk_1.1.19.json"
DOC: dict[str, Any] = json.loads(CORPUS.read_text(encoding="utf-8"))


@cache
def session(number: int) -> Session:
    return parse_session(DOC["sessions"][number], f"corpus session {number}")


def test_corpus_names_its_oracle() -> None:
    assert "veadk-python 1.1.19" in DOC["oracle"]
    assert len(DOC["cases"]) > 400


@pytest.mark.parametrize(
    "case", DOC["cases"], ids=lambda c: f"s{c['session']}-p{c['policy']}-a{int(c['include_assistant'])}"
)
def test_same_strings_as_veadk(case: dict[str, Any]) -> None:
    spec = DOC["policies"][case["policy"]]
    if case.get("error") == "policy":
        with pytest.raises(BadInput):
            resolve_policy(spec, include_assistant=case["include_assistant"])
        return
    policy = resolve_policy(spec, include_assistant=case["include_assistant"])
    if case.get("error") == "session":
        with pytest.raises(BadInput, match="base64"):
            memory_strings(session(case["session"]).events, policy)
        return
    assert memory_strings(session(case["session"]).events, policy) == case["saved"]


@pytest.mark.parametrize("case", DOC["edge_cases"], ids=lambda c: json.dumps(c["policy"])[:30])
def test_genai_edge_fields_match_veadk(case: dict[str, Any]) -> None:
    events = parse_session(case["session"], "edge case").events
    assert memory_strings(events, resolve_policy(case["policy"])) == case["saved"]
