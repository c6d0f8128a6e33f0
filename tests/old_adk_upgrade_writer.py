"""Run by an old google-adk in its own venv: write one session whose event carries a huge state delta.

Usage: python old_adk_upgrade_writer.py big DB_URL OUT_JSON N

Writes session `alice-big` of app `old_app` through that ADK's DatabaseSessionService: a
user event, then an agent event whose `EventActions.state_delta` holds N values (ADK pickles
it whole into the v0 `actions` column), then one more event; dumps what its own get_session
returns (camelCase ADK JSON) to OUT_JSON, keyed by session id, as old_adk_writer.py does.
Nothing here imports vmem: it runs in the old ADK's venv.
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

APP, USER, SESSION = "old_app", "alice", "alice-big"


def service(url: str) -> Any:
    """The ADK's database service; releases before 1.19 take a sync URL, later ones an async one."""
    try:
        return DatabaseSessionService(db_url=url)
    except Exception:
        return DatabaseSessionService(db_url=url.replace("sqlite:///", "sqlite+aiosqlite:///", 1))


async def big(url: str, n: int) -> dict[str, Any]:
    svc = service(url)
    clock = time.time() - 600
    session = await svc.create_session(app_name=APP, user_id=USER, session_id=SESSION, state={"topic": "big"})
    text = types.Content(role="user", parts=[types.Part(text="remember all of this")])
    await svc.append_event(session, Event(author="user", invocation_id="inv-0", timestamp=clock, content=text))
    delta = {f"k{i:06d}": i for i in range(n)}
    answer = types.Content(role="model", parts=[types.Part(text="remembered")])
    await svc.append_event(
        session,
        Event(
            author="helper",
            invocation_id="inv-0",
            timestamp=clock + 1,
            content=answer,
            actions=EventActions(state_delta=delta),
        ),
    )
    done = types.Content(role="model", parts=[types.Part(text="done")])
    await svc.append_event(session, Event(author="helper", invocation_id="inv-1", timestamp=clock + 2, content=done))
    got = await svc.get_session(app_name=APP, user_id=USER, session_id=SESSION)
    return {SESSION: json.loads(got.model_dump_json(by_alias=True, exclude_none=True))}


def main() -> None:
    command, url, out, n = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    assert command == "big", command
    data = asyncio.run(big(url, n))
    with open(out, "w", encoding="utf-8") as handle:
        json.dump(data, handle, ensure_ascii=False)


if __name__ == "__main__":
    main()
