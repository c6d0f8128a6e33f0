"""An agent for `vmem ltm sync`'s tests and bench: the real google-adk DatabaseSessionService
appending turns of 10 events (a user message, then the agent's nine: text, a tool call and its
response, more text) to sessions, as an ADK runner does, one append_event per event.

    python tests/sync_agent.py URL --app A --users 3 --sessions 12 --turns 2 [--rate 20] [--log F]

Sessions are spread over the users round robin; `--rate` paces new sessions per second (0: as
fast as the database takes them). Every text is unique. `--log` gets one JSON line per event:
its session, user, text and role, the time append_event returned (the commit) and how long it
took (the agent's append latency).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from typing import Any

from google.adk.events import Event
from google.adk.sessions import DatabaseSessionService
from google.genai import types

TURN = 10  # events per turn


def turn_events(sid: str, turn: int) -> list[Event]:
    """One turn: the user's text, then the agent's text, a tool call and response, and text."""
    inv = f"{sid}-inv{turn}"
    out = [
        Event(
            author="user",
            invocation_id=inv,
            content=types.Content(role="user", parts=[types.Part(text=f"{sid} turn {turn}: what about item {turn}?")]),
        )
    ]
    for i in range(1, TURN):
        if i % 4 == 2:
            call = types.FunctionCall(id=f"{inv}-c{i}", name="lookup", args={"item": turn, "step": i})
            content = types.Content(role="model", parts=[types.Part(function_call=call)])
        elif i % 4 == 3:
            resp = types.FunctionResponse(id=f"{inv}-c{i - 1}", name="lookup", response={"found": f"{sid}-{turn}-{i}"})
            content = types.Content(role="user", parts=[types.Part(function_response=resp)])
        else:
            content = types.Content(role="model", parts=[types.Part(text=f"{sid} turn {turn} step {i}: noted")])
        out.append(Event(author="agent", invocation_id=inv, content=content))
    return out


async def write(args: argparse.Namespace) -> None:
    service = DatabaseSessionService(args.url)
    log = open(args.log, "a", buffering=1) if args.log else None  # noqa: SIM115
    started = time.monotonic()
    try:
        for n in range(args.sessions):
            if args.rate:
                wait = started + n / args.rate - time.monotonic()
                if wait > 0:
                    await asyncio.sleep(wait)
            user = f"user{n % args.users}"
            sid = f"{args.prefix}s{n}"
            session = await service.create_session(app_name=args.app, user_id=user, session_id=sid)
            for turn in range(args.turns):
                for event in turn_events(sid, turn):
                    event.timestamp = time.time()
                    t0 = time.perf_counter()
                    await service.append_event(session, event)
                    took = time.perf_counter() - t0
                    if log is not None:
                        log.write(json.dumps(record(user, sid, event, took)) + "\n")
                if args.pause:
                    await asyncio.sleep(args.pause)
    finally:
        if log is not None:
            log.close()
        await service.close()


def record(user: str, sid: str, event: Event, took: float) -> dict[str, Any]:
    parts = event.content.parts if event.content is not None and event.content.parts else []
    text = next((p.text for p in parts if p.text), None)
    role = event.content.role if event.content is not None else None
    return {"user": user, "session": sid, "role": role, "text": text, "committed": time.time(), "append_s": took}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("url")
    parser.add_argument("--app", default="syncapp")
    parser.add_argument("--users", type=int, default=3)
    parser.add_argument("--sessions", type=int, default=6)
    parser.add_argument("--turns", type=int, default=2)
    parser.add_argument("--rate", type=float, default=0.0)
    parser.add_argument("--pause", type=float, default=0.0, help="seconds between a session's turns")
    parser.add_argument("--prefix", default="")
    parser.add_argument("--log", default="")
    asyncio.run(write(parser.parse_args()))
    sys.exit(0)


if __name__ == "__main__":
    main()
