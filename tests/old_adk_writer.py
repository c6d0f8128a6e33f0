"""Run by an old google-adk in its own venv: write sessions the way an agent does, then read them back.

Usage: python old_adk_writer.py write DB_URL OUT_JSON
       python old_adk_writer.py read DB_URL OUT_JSON
       python old_adk_writer.py append DB_URL APP USER SESSION_ID

DB_URL is a sync SQLAlchemy URL: `sqlite:///FILE` (made async for releases that want it),
and for the pickle-era releases' PostgreSQL and MariaDB `postgresql+psycopg2://...` and
`mysql+pymysql://...` (.ci/test installs both drivers in every old venv).

`write` creates sessions with text, function calls and responses, state deltas at all three
scopes, artifact deltas and a transfer, through that ADK's DatabaseSessionService, then dumps
what its own get_session returns (camelCase ADK JSON) for each. `read` dumps every session
again (after vmem changed the database). `append` appends one event (the old ADK must still
be able to write). Nothing here imports vmem: it runs in the old ADK's venv.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from typing import Any

from google.adk.events import Event, EventActions
from google.adk.sessions import DatabaseSessionService
from google.genai import types

APP, USERS = "old_app", ("alice", "bob")


def service(url: str) -> Any:
    """The ADK's database service; releases before 1.19 take a sync URL, later ones an async one."""
    try:
        return DatabaseSessionService(db_url=url)
    except Exception:
        return DatabaseSessionService(db_url=url.replace("sqlite:///", "sqlite+aiosqlite:///", 1))


def dump(session: Any) -> dict[str, Any]:
    return json.loads(session.model_dump_json(by_alias=True, exclude_none=True))


def events(n: int, user: str, clock: float) -> list[Any]:
    out = []
    for i in range(n):
        stamp = clock + i
        if i % 4 == 0:
            out.append(
                Event(
                    author="user",
                    invocation_id=f"inv-{i}",
                    timestamp=stamp,
                    content=types.Content(role="user", parts=[types.Part(text=f"{user} says hello #{i}, café ✓")]),
                    actions=EventActions(
                        state_delta={"turn": i, f"user:seen_{i}": True, "app:version": f"v{i}", "temp:x": 1}
                    ),
                )
            )
        elif i % 4 == 1:
            out.append(
                Event(
                    author="helper",
                    invocation_id=f"inv-{i}",
                    timestamp=stamp,
                    content=types.Content(
                        role="model",
                        parts=[
                            types.Part(function_call=types.FunctionCall(id=f"call-{i}", name="lookup", args={"q": i}))
                        ],
                    ),
                )
            )
        elif i % 4 == 2:
            out.append(
                Event(
                    author="helper",
                    invocation_id=f"inv-{i}",
                    timestamp=stamp,
                    content=types.Content(
                        role="user",
                        parts=[
                            types.Part(
                                function_response=types.FunctionResponse(
                                    id=f"call-{i - 1}", name="lookup", response={"result": [1, 2, {"k": "v"}]}
                                )
                            )
                        ],
                    ),
                    actions=EventActions(artifact_delta={"report.txt": i}),
                )
            )
        else:
            out.append(
                Event(
                    author="helper",
                    invocation_id=f"inv-{i}",
                    timestamp=stamp,
                    content=types.Content(role="model", parts=[types.Part(text=f"Answer {i} for {user}.")]),
                    actions=EventActions(transfer_to_agent="other_agent", state_delta={"answered": i}),
                )
            )
    return out


async def write(url: str) -> dict[str, Any]:
    svc = service(url)
    clock = time.time() - 3600
    result = {}
    for u, user in enumerate(USERS):
        for s in range(2):
            sid = f"{user}-s{s}"
            session = await svc.create_session(
                app_name=APP, user_id=user, session_id=sid, state={"topic": f"t{s}", "user:lang": "en", "app:tier": 1}
            )
            for event in events(8 + s, user, clock + 100 * (u * 2 + s)):
                await svc.append_event(session, event)
    for user in USERS:
        for s in range(2):
            got = await svc.get_session(app_name=APP, user_id=user, session_id=f"{user}-s{s}")
            result[f"{user}-s{s}"] = dump(got)
    return result


async def read(url: str) -> dict[str, Any]:
    svc = service(url)
    result = {}
    for user in USERS:
        listed = await svc.list_sessions(app_name=APP, user_id=user)
        for item in listed.sessions:
            got = await svc.get_session(app_name=APP, user_id=user, session_id=item.id)
            result[item.id] = dump(got)
    return result


async def append(url: str, app: str, user: str, session_id: str) -> None:
    svc = service(url)
    session = await svc.get_session(app_name=app, user_id=user, session_id=session_id)
    event = Event(
        author="user",
        invocation_id="inv-late",
        timestamp=time.time(),
        content=types.Content(role="user", parts=[types.Part(text="one more thing")]),
    )
    await svc.append_event(session, event)


def main() -> None:
    command, url = sys.argv[1], sys.argv[2]
    if command == "append":
        asyncio.run(append(url, *sys.argv[3:6]))
        return
    data = asyncio.run(write(url) if command == "write" else read(url))
    with open(sys.argv[3], "w", encoding="utf-8") as handle:
        json.dump(data, handle, ensure_ascii=False, indent=1, sort_keys=True)


if __name__ == "__main__":
    main()
