"""Helpers for the session tests: databases written by the real google-adk, in every layout."""

from __future__ import annotations

import asyncio
import os
import signal
import sqlite3
import subprocess
import time
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

from google.adk.events import Event, EventActions
from google.adk.sessions import DatabaseSessionService
from google.adk.sessions import Session as AdkSession
from google.adk.sessions.sqlite_session_service import SqliteSessionService
from google.genai import types

from veadk_mem import events as ev

APP = "demo_app"


def adk_events(n: int, *, start: float = 1_790_000_000.0) -> list[Event]:
    """n events of every kind the timeline shows: text, thought, tool call/response, media, error."""
    out: list[Event] = []
    for i in range(n):
        kind = i % 6
        ts = start + i * 1.5
        if kind == 0:
            content = types.Content(role="user", parts=[types.Part(text=f"question {i}: 你好 ☃")])
            out.append(Event(author="user", invocation_id=f"inv-{i // 6}", content=content, timestamp=ts))
        elif kind == 1:
            parts = [types.Part(text="thinking...", thought=True), types.Part(text=f"answer {i}")]
            out.append(
                Event(
                    author="agent",
                    invocation_id=f"inv-{i // 6}",
                    content=types.Content(role="model", parts=parts),
                    actions=EventActions(state_delta={"turn": i, "app:shared": i, "user:pref": f"p{i}"}),
                    timestamp=ts,
                )
            )
        elif kind == 2:
            call = types.FunctionCall(id=f"c{i}", name="lookup", args={"q": "weather", "n": i})
            out.append(
                Event(
                    author="agent",
                    invocation_id=f"inv-{i // 6}",
                    content=types.Content(role="model", parts=[types.Part(function_call=call)]),
                    long_running_tool_ids={f"c{i}"},
                    timestamp=ts,
                )
            )
        elif kind == 3:
            resp = types.FunctionResponse(id=f"c{i - 1}", name="lookup", response={"result": "sunny"})
            out.append(
                Event(
                    author="agent",
                    invocation_id=f"inv-{i // 6}",
                    content=types.Content(role="user", parts=[types.Part(function_response=resp)]),
                    timestamp=ts,
                )
            )
        elif kind == 4:
            blob = types.Blob(mime_type="image/png", data=b"\x89PNG\r\n\x1a\n" + bytes([i % 256]))
            out.append(
                Event(
                    author="user",
                    invocation_id=f"inv-{i // 6}",
                    content=types.Content(role="user", parts=[types.Part(inline_data=blob)]),
                    custom_metadata={"source": "upload", "nested": {"k": [1, 2]}},
                    timestamp=ts,
                )
            )
        else:
            out.append(
                Event(
                    author="agent",
                    invocation_id=f"inv-{i // 6}",
                    error_code="RATE_LIMIT",
                    error_message="slow down",
                    turn_complete=True,
                    timestamp=ts,
                )
            )
    return out


async def populate(service: Any, sessions: dict[tuple[str, str], int], *, app: str = APP) -> None:
    """Create sessions {(user, id): number of events} through an ADK session service."""
    for (user, sid), n in sessions.items():
        session = await service.create_session(
            app_name=app, user_id=user, session_id=sid, state={"topic": sid, "app:region": "cn", "user:lang": "zh"}
        )
        base = 1_790_000_000.0 + zlib.crc32(f"{user}/{sid}".encode()) % 1000  # deterministic, distinct per session
        for event in adk_events(n, start=base):
            await service.append_event(session, event)


def adk_service(url: str) -> Any:
    """ADK's DatabaseSessionService, or its SqliteSessionService for a plain sqlite path (no scheme)."""
    if "://" not in url:
        return SqliteSessionService(url)
    return DatabaseSessionService(url)


async def close(service: Any) -> None:
    await service.close()


async def adk_get(url: str, app: str, user: str, sid: str) -> AdkSession | None:
    service = adk_service(url)
    try:
        result: AdkSession | None = await service.get_session(app_name=app, user_id=user, session_id=sid)
        return result
    finally:
        await service.close()


def adk_view(session: AdkSession | ev.Session) -> dict[str, Any]:
    """A session as ADK sees it, for equality checks across stores."""
    if isinstance(session, ev.Session):
        session = AdkSession.model_validate(session.to_dict())
    data = session.model_dump(mode="json", exclude_none=True)
    for event in data["events"]:
        if event.get("long_running_tool_ids") is not None:
            event["long_running_tool_ids"] = sorted(event["long_running_tool_ids"])
    return data


def build(url: str, sessions: dict[tuple[str, str], int], *, app: str = APP) -> None:
    """Write sessions through the real google-adk service for `url`."""

    async def go() -> None:
        service = adk_service(url)
        try:
            await populate(service, sessions, app=app)
        finally:
            await service.close()

    asyncio.run(go())


def build_v0(url: str, sessions: dict[tuple[str, str], int]) -> None:
    """A v0 database (pickled actions) as ADK 1.19-1.21 wrote it: ADK's own v0 tables and service."""
    from google.adk.sessions.schemas.v0 import Base as BaseV0
    from sqlalchemy.ext.asyncio import create_async_engine

    if url.startswith("mysql"):
        # aiomysql 0.3 cannot bind bytes under PyMySQL 1.2 ('escape_bytes_prefixed' is a str there),
        # so ADK's own v0 writer fails on MySQL; give it PyMySQL's escaper for this fixture.
        import aiomysql.connection
        import pymysql.converters

        aiomysql.connection.escape_bytes_prefixed = pymysql.converters.escape_bytes  # type: ignore[attr-defined]

    async def go() -> None:
        engine = create_async_engine(url)
        async with engine.begin() as conn:
            await conn.run_sync(BaseV0.metadata.create_all)
        await engine.dispose()
        service = DatabaseSessionService(url)
        try:
            await populate(service, sessions)
        finally:
            await service.close()

    asyncio.run(go())


async def run_sql(url: str, *statements: str) -> None:
    """Run `statements` in one transaction on the database at `url`, as a DBA's tool would."""
    from sqlalchemy import text
    from sqlalchemy.ext.asyncio import create_async_engine

    engine = create_async_engine(url)
    try:
        async with engine.begin() as conn:
            for statement in statements:
                await conn.execute(text(statement))
    finally:
        await engine.dispose()


def sqlite_url(path: Path) -> str:
    return f"sqlite+aiosqlite:///{path}"


def sqlite_rows(path: Path, sql: str) -> list[tuple[Any, ...]]:
    with sqlite3.connect(path) as conn:
        return list(conn.execute(sql))


def interrupt_when(proc: subprocess.Popen[bytes], ready: Callable[[], bool], timeout: float = 120) -> str:
    """Ctrl-C the process group of `proc` once `ready()` holds (polled); its stderr after it exits.

    The process must have been started with `start_new_session=True`; it is killed if it outlives the test.
    """
    try:
        deadline = time.monotonic() + timeout
        while not ready():
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline
            time.sleep(0.01)
        os.killpg(proc.pid, signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    return err.decode()
