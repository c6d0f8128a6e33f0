"""Sessions for the stats and watch tests, written by the real google-adk: text, tool calls and
responses, model turns with usage_metadata, compactions; and the figures computed
independently from ADK's own get_session."""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

from google.adk.events import Event, EventActions
from google.adk.events.event_actions import EventCompaction
from google.genai import types
from sessions_helpers import adk_service

# (app, user, session id): (number of turns, start time, last-update age in days)
LAYOUT = {
    ("shop", "alice", "a1"): (3, 1_790_000_000.0),
    ("shop", "alice", "a2"): (1, 1_790_100_000.0),
    ("shop", "bob", "b1"): (2, 1_790_300_000.0),
    ("bank", "carol", "c1"): (4, 1_790_600_000.0),
    ("bank", "carol", "empty"): (0, 1_790_700_000.0),
}


def usage(i: int) -> types.GenerateContentResponseUsageMetadata:
    return types.GenerateContentResponseUsageMetadata(
        prompt_token_count=100 + i,
        candidates_token_count=20 + i,
        thoughts_token_count=i % 3,
        total_token_count=125 + 2 * i,
    )


def turn(i: int, ts: float, *, compact: bool = False) -> list[Event]:
    """One turn: user text, a model call with usage, the tool's response, the model's answer; a compaction."""
    inv = f"inv-{i}"
    call = types.FunctionCall(id=f"c{i}", name="lookup", args={"q": f"item {i}"})
    resp = types.FunctionResponse(id=f"c{i}", name="lookup", response={"result": i})
    out = [
        Event(
            invocation_id=inv,
            author="user",
            timestamp=ts,
            content=types.Content(role="user", parts=[types.Part(text=f"question {i} 你好")]),
        ),
        Event(
            invocation_id=inv,
            author="agent",
            timestamp=ts + 1,
            content=types.Content(role="model", parts=[types.Part(function_call=call)]),
            usage_metadata=usage(i),
        ),
        Event(
            invocation_id=inv,
            author="agent",
            timestamp=ts + 2,
            content=types.Content(role="user", parts=[types.Part(function_response=resp)]),
        ),
        Event(
            invocation_id=inv,
            author="agent",
            timestamp=ts + 3,
            content=types.Content(
                role="model", parts=[types.Part(text="hmm", thought=True), types.Part(text=f"answer {i}")]
            ),
            usage_metadata=usage(i + 7),
            actions=EventActions(state_delta={"turn": i}),
        ),
        Event(invocation_id=inv, author="agent", timestamp=ts + 4, actions=EventActions(state_delta={"x": i})),
    ]
    if compact:
        summary = types.Content(role="model", parts=[types.Part(text=f"summary up to {i}")])
        compaction = EventCompaction(start_timestamp=ts, end_timestamp=ts + 3, compacted_content=summary)
        out.append(
            Event(invocation_id=inv, author="user", timestamp=ts + 5, actions=EventActions(compaction=compaction))
        )
    return out


def write(url: str, layout: dict[tuple[str, str, str], tuple[int, float]] | None = None) -> None:
    """Write the sessions through ADK's own service for `url`."""

    async def go() -> None:
        service = adk_service(url)
        try:
            for (app, user, sid), (turns, start) in (layout or LAYOUT).items():
                session = await service.create_session(app_name=app, user_id=user, session_id=sid, state={"k": sid})
                for i in range(turns):
                    for event in turn(i, start + 100 * i, compact=i % 2 == 1):
                        await service.append_event(session, event)
        finally:
            await service.close()

    asyncio.run(go())


def kind(event: Event) -> str:
    """The kind `session stats` counts an event as, decided from ADK's own object."""
    if event.actions and event.actions.compaction is not None:
        return "compaction"
    parts = event.content.parts if event.content and event.content.parts else []
    if any(p.function_call for p in parts):
        return "function_call"
    if any(p.function_response for p in parts):
        return "function_response"
    role = event.content.role if event.content else None
    if any(p.text is not None for p in parts) and role in ("user", "model"):
        return "user_text" if role == "user" else "model_text"
    return "other"


def expected(url: str, keys: list[tuple[str, str, str]]) -> dict[str, Any]:
    """Per-session events, kinds and tokens from ADK's own get_session."""

    async def go() -> dict[str, Any]:
        service = adk_service(url)
        out: dict[str, Any] = {}
        try:
            for app, user, sid in keys:
                s = await service.get_session(app_name=app, user_id=user, session_id=sid)
                assert s is not None
                tokens: Counter[str] = Counter()
                for e in s.events:
                    u = e.usage_metadata
                    if u is not None:
                        tokens["prompt"] += u.prompt_token_count or 0
                        tokens["candidates"] += u.candidates_token_count or 0
                        tokens["thoughts"] += u.thoughts_token_count or 0
                        tokens["total"] += u.total_token_count or 0
                out[f"{app}/{user}/{sid}"] = {
                    "events": len(s.events),
                    "kinds": Counter(kind(e) for e in s.events),
                    "tokens": tokens,
                    "update_time": s.last_update_time,
                }
        finally:
            await service.close()
        return out

    return asyncio.run(go())


MIDNIGHT = 1_790_121_600.0  # 2026-09-24 00:00 UTC


def edge_events() -> list[Event]:
    """One session's events on both sides of a UTC midnight, whose kinds each take more than one
    look: a call after text, a response under role user, text under no role, a thought alone,
    usage_metadata without some of its counts."""
    call = types.FunctionCall(id="c9", name="lookup", args={"q": "function_call"})
    resp = types.FunctionResponse(id="c9", name="lookup", response={"text": "found"})
    return [
        Event(
            invocation_id="i",
            author="user",
            timestamp=MIDNIGHT - 30,
            content=types.Content(role="user", parts=[types.Part(text='say "function_call" and "text"')]),
        ),
        Event(
            invocation_id="i",
            author="agent",
            timestamp=MIDNIGHT - 10,
            content=types.Content(role="model", parts=[types.Part(text="let me look"), types.Part(function_call=call)]),
            usage_metadata=types.GenerateContentResponseUsageMetadata(prompt_token_count=40, total_token_count=47),
        ),
        Event(
            invocation_id="i",
            author="agent",
            timestamp=MIDNIGHT + 10,
            content=types.Content(role="user", parts=[types.Part(function_response=resp)]),
        ),
        Event(
            invocation_id="i",
            author="agent",
            timestamp=MIDNIGHT + 20,
            content=types.Content(parts=[types.Part(text="no role")]),
            usage_metadata=types.GenerateContentResponseUsageMetadata(candidates_token_count=3),
        ),
        Event(
            invocation_id="i",
            author="agent",
            timestamp=MIDNIGHT + 30,
            content=types.Content(role="model", parts=[types.Part(text="hmm", thought=True)]),
            usage_metadata=types.GenerateContentResponseUsageMetadata(thoughts_token_count=5, total_token_count=5),
        ),
    ]


def write_events(url: str, key: tuple[str, str, str], events: list[Event]) -> None:
    """Write one session with these events through ADK's own service for `url`."""

    async def go() -> None:
        service = adk_service(url)
        try:
            app, user, sid = key
            session = await service.create_session(app_name=app, user_id=user, session_id=sid)
            for event in events:
                await service.append_event(session, event)
        finally:
            await service.close()

    asyncio.run(go())
