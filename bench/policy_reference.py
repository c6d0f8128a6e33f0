"""Record what VeADK 1.1.19 itself saves for generated sessions and policies: the test oracle.

Generates random ADK sessions (every event type, thoughts, mixed parts, inline data of
0..5 bytes in both base64 alphabets, transcriptions, errors, odd roles and authors,
camelCase and snake_case keys) and policies (presets, unknown preset strings, dicts with
null overrides, unknown keys and invalid values), runs them through the real
`LongTermMemory._filter_and_convert_events` of veadk-python 1.1.19, and writes every case
with the exact list of strings VeADK produced (or the fact that it refused the policy or
the session) to tests/data/policy_veadk_1.1.19.json.

It must run in a throwaway virtualenv holding veadk-python, never in vmem's own:
    python3 -m venv /tmp/veadk-ref && /tmp/veadk-ref/bin/pip install veadk-python==1.1.19
    /tmp/veadk-ref/bin/python bench/policy_reference.py [--seed 7] [--sessions 40]
"""

from __future__ import annotations

import argparse
import base64
import json
import random
import warnings
from pathlib import Path
from typing import Any

OUT = Path(__file__).resolve().parent.parent / "tests" / "data" / "policy_veadk_1.1.19.json"

AUTHORS = ["user", "user", "chef_agent", "Chef_Agent", "User", "system", "", "tool_bridge"]
ROLES = ["user", "model", "model", "system", None, "", "tool", "assistant"]
TEXTS = ["I am allergic to peanuts", "", "花生过敏 — 素食", 'line\nbreak "quoted" \\ tab\t', " ", "ok"]


def key(rng: random.Random, snake: str) -> str:
    """A key in snake_case or camelCase: ADK reads both."""
    if rng.random() < 0.5:
        return snake
    head, *rest = snake.split("_")
    return head + "".join(w.capitalize() for w in rest)


def b64(rng: random.Random, raw: bytes) -> str:
    """Base64 of raw bytes in one of the spellings pydantic accepts."""
    style = rng.choice(["std", "url", "nopad"])
    if style == "std":
        return base64.b64encode(raw).decode()
    if style == "url":
        return base64.urlsafe_b64encode(raw).decode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def random_part(rng: random.Random) -> dict[str, Any]:
    """One part: text, thought, tools, media, code, metadata, or a mix."""
    kind = rng.choice(
        [
            "text",
            "text",
            "text",
            "thought",
            "thought_fc",
            "thought_blob",
            "fc",
            "fr",
            "fr_media",
            "tool_call",
            "tool_response",
            "blob",
            "file",
            "code",
            "result",
            "video",
            "meta",
            "empty",
            "text_fc",
        ]
    )
    raw = bytes(rng.randrange(256) for _ in range(rng.randrange(6)))
    part: dict[str, Any] = {}
    if kind in ("text", "thought", "thought_fc", "thought_blob", "text_fc", "meta"):
        part["text"] = rng.choice(TEXTS)
    if kind.startswith("thought"):
        part["thought"] = True
        if rng.random() < 0.5:
            part[key(rng, "thought_signature")] = b64(rng, raw)
    elif kind == "text" and rng.random() < 0.3:
        part["thought"] = rng.choice([False, None])
    if kind in ("fc", "thought_fc", "text_fc"):
        part[key(rng, "function_call")] = {"id": "fc-1", "name": "lookup", "args": {"q": "x", "n": None, "deep": [1.5]}}
    if kind == "fr":
        part[key(rng, "function_response")] = {"name": "lookup", "response": {"result": ["dal", None]}}
    if kind == "fr_media":
        part[key(rng, "function_response")] = {
            "name": "render",
            "response": {},
            "parts": [{key(rng, "inline_data"): {key(rng, "mime_type"): "image/png", "data": b64(rng, raw)}}],
        }
    if kind == "tool_call":
        part[key(rng, "tool_call")] = {"id": "t1", key(rng, "tool_type"): rng.choice(["url_context", "GOOGLE_MAPS"])}
    if kind == "tool_response":
        part[key(rng, "tool_response")] = {"id": "t1", "response": {"ok": True}}
    if kind in ("blob", "thought_blob"):
        blob = {key(rng, "mime_type"): "image/png", "data": b64(rng, raw)}
        if rng.random() < 0.3:
            blob[key(rng, "display_name")] = "pic"
        part[key(rng, "inline_data")] = blob
    if kind == "file":
        part[key(rng, "file_data")] = {
            key(rng, "file_uri"): "gs://b/menu.pdf",
            key(rng, "mime_type"): "application/pdf",
        }
    if kind == "code":
        part[key(rng, "executable_code")] = {"code": "print(1)", "language": rng.choice(["python", "PYTHON"])}
    if kind == "result":
        part[key(rng, "code_execution_result")] = {
            "outcome": rng.choice(["OUTCOME_OK", "outcome_failed"]),
            "output": "2",
        }
    if kind == "video":
        part[key(rng, "video_metadata")] = {"fps": rng.choice([1, 2.5])}
        part["text"] = "clip"
    if kind == "meta":
        part[key(rng, "part_metadata")] = {"source": "ui", "none": None}
    return part


def random_event(rng: random.Random, index: int) -> dict[str, Any]:
    """One ADK event JSON object (camelCase or snake_case keys)."""
    event: dict[str, Any] = {
        "id": f"e{index}",
        key(rng, "invocation_id"): f"inv-{index // 3}",
        "author": rng.choice(AUTHORS),
        "timestamp": 1_764_000_000.0 + index,
    }
    shape = rng.random()
    if shape < 0.8:
        content: dict[str, Any] = {}
        role = rng.choice(ROLES)
        if role is not None:
            content["role"] = role
        if rng.random() < 0.92:
            content["parts"] = [random_part(rng) for _ in range(rng.choice([0, 1, 1, 1, 2, 2, 3]))]
        event["content"] = content
    for name in ("input_transcription", "output_transcription"):
        if rng.random() < 0.12:
            event[key(rng, name)] = rng.choice([{}, {"text": "what can I eat", "finished": True}, {"text": "试试"}])
    if rng.random() < 0.1:
        event[key(rng, "error_code")] = rng.choice(["", "RESOURCE_EXHAUSTED"])
    if rng.random() < 0.1:
        event[key(rng, "error_message")] = rng.choice(["", "quota exceeded"])
    return event


def random_session(rng: random.Random, number: int) -> dict[str, Any]:
    """An ADK session with 4..14 random events."""
    events = [random_event(rng, i) for i in range(rng.randrange(4, 15))]
    return {"id": f"s{number}", "appName": "demo", "userId": "u1", "state": {}, "events": events}


FIXED_POLICIES: list[Any] = [
    None,
    "default",
    "all",
    "custom",
    "ALL",
    "bogus",
    "",
    {},
    {"preset": "all"},
    {"preset": "custom"},
    {"preset": "default", "include_roles": None},
    {"preset": "default", "include_roles": []},
    {"preset": "custom", "include_roles": ["user", "assistant"], "include_event_types": ["text", "function_call"]},
    {"preset": "custom", "text_only": False},
    {"preset": "custom", "text_only": False, "include_thought": True},
    {"preset": "custom", "include_empty_text": True, "text_only": False},
    {"preset": "all", "include_thought": False},
    {"preset": "all", "exclude_event_types": ["thought", "media"]},
    {"preset": "all", "include_event_types": ["transcription", "error"]},
    {"preset": "all", "include_event_types": None, "text_only": True},
    {"preset": "all", "include_authors": ["chef_agent"]},
    {"preset": "all", "exclude_authors": ["user"], "exclude_roles": ["system"]},
    {"preset": "default", "include_event_types": ["text", "media", "thought"], "include_thought": True},
    {"preset": "default", "include_event_types": None},
    {"preset": "default", "text_only": False, "include_event_types": None, "include_empty_text": True},
    {"preset": "custom", "include_event_types": ["error", "transcription", "tool_call", "tool_response"]},
    {"preset": "custom", "exclude_event_types": ["text"]},
    {"include_roles": ["assistant"], "unknown_key": 1, "includeRoles": ["user"]},
    {"preset": "all", "include_roles": ["system"]},
    {"preset": "Default"},
    {"preset": "custom", "include_roles": ["bot"]},
    {"preset": "custom", "text_only": "yes"},
    {"preset": "custom", "include_event_types": "text"},
]


# Single events for genai fields the random sessions do not reach: enums in any case,
# floats given as ints, nested transcriptions, function-response media, partial padding.
EDGE_EVENTS: list[list[Any]] = [
    [
        {
            "content": {
                "role": "user",
                "parts": [
                    {
                        "text": "a",
                        "mediaResolution": {"level": "media_resolution_low", "numTokens": 3},
                        "speechMetadata": {"speaker": "x"},
                        "audioTranscription": {"text": "t", "languageCode": "en"},
                        "mediaProcessing": "static",
                    }
                ],
            }
        },
        "all",
    ],
    [
        {
            "content": {
                "role": "model",
                "parts": [
                    {
                        "functionCall": {
                            "name": "f",
                            "partialArgs": [{"jsonPath": "$.a", "numberValue": 3}],
                            "willContinue": True,
                        }
                    }
                ],
            }
        },
        "all",
    ],
    [
        {
            "content": {
                "role": "model",
                "parts": [
                    {
                        "functionResponse": {
                            "name": "f",
                            "scheduling": "when_idle",
                            "willContinue": False,
                            "parts": [
                                {
                                    "fileData": {"fileUri": "gs://x", "displayName": "d"},
                                    "inlineData": {"data": "AQ", "displayName": "n"},
                                }
                            ],
                        }
                    }
                ],
            }
        },
        "all",
    ],
    [
        {
            "inputTranscription": {"text": "hi", "languageCode": "zh", "words": [{"word": "hi", "startOffset": "1s"}]},
            "content": {"role": "user", "parts": []},
        },
        "all",
    ],
    [{"content": {"role": "user", "parts": [{"text": "x", "thought": "True"}]}}, "all"],
    [
        {
            "content": {
                "role": "user",
                "parts": [
                    {"codeExecutionResult": {"outcome": "Outcome_Ok", "id": "c"}},
                    {"executableCode": {"code": "1", "language": "Python"}},
                ],
            }
        },
        "all",
    ],
    [
        {
            "content": {
                "role": "user",
                "parts": [
                    {"text": "x", "thought_signature": "YWI", "thought": True},
                    {"text": "y", "inline_data": {"data": ""}},
                ],
            }
        },
        {"preset": "all", "include_thought": False},
    ],
    [
        {"content": {"role": "user", "parts": [{"text": "x"}]}, "author": "user", "errorCode": "E", "errorMessage": ""},
        {"preset": "all", "include_event_types": ["error"]},
    ],
    [
        {"content": {"role": "user", "parts": [{"text": "x"}]}, "outputTranscription": {"text": ""}},
        {"preset": "custom", "include_event_types": ["transcription"], "include_empty_text": True},
    ],
    [
        {
            "content": {
                "role": "user",
                "parts": [
                    {"toolCall": {"toolType": "Url_Context", "args": {"u": 1}}},
                    {"toolResponse": {"response": {"x": [1, 2.0, None]}}},
                ],
            }
        },
        "all",
    ],
]


def reference_strings(ltm: Any, session_json: str, policy: Any, include_assistant: bool) -> dict[str, Any]:
    """VeADK's strings for one session and policy, or which input it refused."""
    from google.adk.sessions import Session
    from pydantic import ValidationError

    try:
        session = Session.model_validate_json(session_json)
    except ValidationError as exc:
        return {"error": "session", "detail": str(exc).splitlines()[1]}
    try:
        saved = ltm._filter_and_convert_events(
            session.events, include_assistant=include_assistant, auto_save_memory_policy=policy
        )
    except ValidationError as exc:
        return {"error": "policy", "detail": str(exc).splitlines()[1]}
    return {"saved": saved}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--sessions", type=int, default=40)
    parser.add_argument("--out", type=Path, default=OUT, help="where to write (default: the test fixture)")
    args = parser.parse_args()
    warnings.simplefilter("ignore")
    from importlib.metadata import version

    from veadk.memory.long_term_memory import LongTermMemory

    LongTermMemory.model_post_init = lambda self, context: None  # type: ignore[method-assign]
    ltm = LongTermMemory.model_construct()
    rng = random.Random(args.seed)
    sessions = [random_session(rng, n) for n in range(args.sessions)]
    sessions.append(
        {
            "id": "s-bad-base64",
            "appName": "demo",
            "userId": "u1",
            "events": [
                {"id": "e0", "author": "user", "content": {"role": "user", "parts": [{"inlineData": {"data": "YR=="}}]}}
            ],
        }
    )
    cases = []
    for number, session in enumerate(sessions):
        text = json.dumps(session, ensure_ascii=False)
        picks = rng.sample(range(len(FIXED_POLICIES)), 12) if number < args.sessions else range(3)
        for index in picks:
            for include_assistant in (False, True) if index < 4 else (rng.random() < 0.3,):
                result = reference_strings(ltm, text, FIXED_POLICIES[index], include_assistant)
                cases.append({"session": number, "policy": index, "include_assistant": include_assistant, **result})
    edge_cases = []
    for event, policy in EDGE_EVENTS:
        session = {"id": "edge", "appName": "demo", "userId": "u1", "events": [{"id": "e1", "author": "user", **event}]}
        result = reference_strings(ltm, json.dumps(session, ensure_ascii=False), policy, False)
        edge_cases.append({"session": session, "policy": policy, **result})
    args.out.parent.mkdir(parents=True, exist_ok=True)
    document = {
        "produced_by": f"bench/policy_reference.py --seed {args.seed} --sessions {args.sessions}",
        "oracle": (
            f"veadk-python {version('veadk-python')} LongTermMemory._filter_and_convert_events, "
            f"google-genai {version('google-genai')}, google-adk {version('google-adk')}"
        ),
        "sessions": sessions,
        "policies": FIXED_POLICIES,
        "cases": cases,
        "edge_cases": edge_cases,
    }
    args.out.write_text(json.dumps(document, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
    saved = sum(len(c.get("saved", [])) for c in cases)
    print(f"wrote {args.out}: {len(sessions)} sessions, {len(cases)} cases, {saved} saved strings")


if __name__ == "__main__":
    main()
