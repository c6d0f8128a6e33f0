"""Helpers for `vmem ltm sync`'s tests: sessions the real google-adk writes, and what VeADK's policy
would save of them, next to what long-term memory holds."""

from __future__ import annotations

import asyncio
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from google.adk.events import Event
from google.adk.sessions import DatabaseSessionService
from google.genai import types
from sync_agent import turn_events

from veadk_mem.config import load_settings
from veadk_mem.ltm.facade import LongTermMemory
from veadk_mem.policy import memory_strings
from veadk_mem.sessions.records import SessionFilter
from veadk_mem.sessions.store import SessionStore

APP = "syncapp"


@pytest.fixture(params=["sqlite", "postgres", "mysql"])
def db(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """An empty session database ADK writes and vmem reads: a sqlite file, a PostgreSQL or a MariaDB database."""
    if request.param == "sqlite":
        return f"sqlite+aiosqlite:///{tmp_path / 'sessions.db'}"
    return str(request.getfixturevalue("pg_url" if request.param == "postgres" else "mysql_url"))


def user_text(sid: str, text: str) -> Event:
    """A user's text message: a memory under VeADK's default policy."""
    return Event(
        author="user", invocation_id=f"{sid}-x", content=types.Content(role="user", parts=[types.Part(text=text)])
    )


def agent_text(sid: str, text: str) -> Event:
    """The agent's text: dropped by the default policy."""
    return Event(
        author="agent", invocation_id=f"{sid}-x", content=types.Content(role="model", parts=[types.Part(text=text)])
    )


def append(url: str, user: str, sid: str, events: list[Event], *, app: str = APP) -> None:
    """Append events to the session (created when missing) through ADK's DatabaseSessionService."""
    import time

    async def go() -> None:
        service = DatabaseSessionService(url)
        try:
            session = await service.get_session(app_name=app, user_id=user, session_id=sid)
            if session is None:
                session = await service.create_session(app_name=app, user_id=user, session_id=sid)
            for event in events:
                event.timestamp = time.time()
                await service.append_event(session, event)
        finally:
            await service.close()

    asyncio.run(go())


def turns(sid: str, count: int, start: int = 0) -> list[Event]:
    """`count` turns of ten events (sync_agent's)."""
    return [e for t in range(start, start + count) for e in turn_events(sid, t)]


def expected(url: str, app: str = APP) -> dict[str, list[str]]:
    """Per user, the memory strings VeADK's default policy keeps of every session's events, each once."""
    settings = load_settings().settings
    policy = LongTermMemory.from_settings(settings).resolve_policy(None)

    async def go() -> dict[str, list[str]]:
        out: dict[str, set[str]] = {}
        async with SessionStore(url) as store:
            for summary in await store.list_sessions(SessionFilter(app=app)):
                session = await store.get_session(summary.app_name, summary.user_id, summary.id)
                out.setdefault(summary.user_id, set()).update(memory_strings(session.events, policy))
        return {u: sorted(texts) for u, texts in out.items()}

    return asyncio.run(go())


def stored(users: list[str], app: str = APP) -> dict[str, Counter[str]]:
    """Per user, how many times each memory text is in long-term memory (the configured backend)."""
    settings = load_settings().settings

    async def go() -> dict[str, Counter[str]]:
        async with LongTermMemory.from_settings(settings) as ltm:
            backend = ltm.backend_for(app)
            return {u: Counter(r.text for r in await backend.list_memories(u)) for u in users}

    return asyncio.run(go())


def each_once(url: str, app: str = APP) -> tuple[dict[str, list[str]], dict[str, Counter[str]]]:
    """(what the policy would save, what the store holds) per user: equal when every memory is there once."""
    want = expected(url, app)
    return want, stored(sorted(want), app)


def as_once(want: dict[str, list[str]]) -> dict[str, Counter[str]]:
    return {u: Counter(texts) for u, texts in want.items()}


def json_lines(text: str) -> list[dict[str, Any]]:
    import json

    return [json.loads(line) for line in text.splitlines() if line.strip().startswith("{")]
