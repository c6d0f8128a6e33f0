"""A big session read a page at a time is one version of it (issue 39, item 4): on PostgreSQL and
MySQL every page comes from one read-only snapshot that an agent's append does not wait on; on
sqlite an append between two pages makes vmem read the session again, never mix the two."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from google.adk.events import Event
from google.genai import types
from sessions_helpers import APP, adk_service, sqlite_url
from test_sessions_export_paged import _export, _fill

from veadk_mem.errors import StoreError
from veadk_mem.sessions.pages import PagedReads
from veadk_mem.sessions.read_queries import READ_ATTEMPTS
from veadk_mem.sessions.store import SessionStore


@pytest.fixture(params=["sqlite", "postgres", "mysql"])
def db(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return sqlite_url(tmp_path / "paged.db")
    return str(request.getfixturevalue("pg_url" if request.param == "postgres" else "mysql_url"))


async def _adk_append(url: str, sid: str, n: int) -> float:
    """An agent's turn through ADK's own DatabaseSessionService, timed among the events not read yet
    (a clock behind the session's: read page by page without one snapshot, it would replace the
    last event of the version being read); the seconds it took."""
    service = adk_service(url)
    try:
        started = time.monotonic()
        session = await service.get_session(app_name=APP, user_id="u-big", session_id=sid)
        assert session is not None
        content = types.Content(role="user", parts=[types.Part(text=f"appended {n}")])
        await service.append_event(
            session,
            Event(author="user", invocation_id=f"late-{n}", content=content, timestamp=1_790_000_001.0 + n * 0.0001),
        )
        return time.monotonic() - started
    finally:
        await service.close()


def _writer_between_pages(monkeypatch: pytest.MonkeyPatch, url: str, *, every: bool = False) -> dict[str, Any]:
    """An agent appends after the second page of a read (every read with `every`, else the first)."""
    seen: dict[str, Any] = {"reads": 0, "appended": 0, "waits": []}
    real = PagedReads.session_pages

    def spy(self: PagedReads, *args: Any, **kwargs: Any) -> AsyncIterator[Any]:
        seen["reads"] += 1

        async def pages() -> AsyncIterator[Any]:
            n = 0
            async for item in real(self, *args, **kwargs):
                yield item
                n += 1
                if n == 2 and (every or not seen["appended"]):
                    seen["appended"] += 1
                    # run while the read is open, in its own event loop: an append that waited
                    # for the reader would never finish (60 s: fail rather than hang)
                    seen["waits"].append(await asyncio.wait_for(_adk_append(url, args[2], seen["appended"]), 60))

        return pages()

    monkeypatch.setattr(PagedReads, "session_pages", spy)
    return seen


def _long_line(text: str) -> str:
    """The export line of the session "long", as written (a session's place follows its update time)."""
    [line] = [x for x in text.splitlines() if json.loads(x).get("id") == "long"]
    return line


def test_an_agent_appending_during_a_paged_export_gives_one_version(
    db: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _fill(db, tmp_path / "in.jsonl", {"small": 3, "long": 1_500})
    before, _ = asyncio.run(_export(db, 100))
    seen = _writer_between_pages(monkeypatch, db)
    during, warnings = asyncio.run(_export(db, 100))
    monkeypatch.undo()
    after, _ = asyncio.run(_export(db, 100))
    assert seen["appended"] == 1 and not warnings
    assert len(json.loads(_long_line(after))["events"]) == 1_501 and _long_line(after) != _long_line(before)
    if db.startswith("sqlite"):
        assert seen["reads"] == 2  # the page after the append saw the new update time: read again
        assert _long_line(during) == _long_line(after)
    else:
        assert seen["reads"] == 1
        assert _long_line(during) == _long_line(before)  # the snapshot's version, whole


def test_get_json_during_an_append_prints_one_version(db: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _fill(db, tmp_path / "in.jsonl", {"long": 2_500})

    async def get() -> str:
        async with SessionStore(db) as store:
            return "".join([p async for p in store.session_json(APP, "u-big", "long")])

    before = asyncio.run(get())
    seen = _writer_between_pages(monkeypatch, db)
    during = asyncio.run(get())
    assert seen["appended"] == 1
    monkeypatch.undo()
    after = asyncio.run(get())
    assert json.loads(after)["lastUpdateTime"] != json.loads(before)["lastUpdateTime"]
    assert during == (after if db.startswith("sqlite") else before)
    assert len(json.loads(during)["events"]) == (2_501 if db.startswith("sqlite") else 2_500)


def test_get_jsonl_during_an_append_prints_one_version(
    db: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`get --jsonl` reads as `get --json` does: lines of one version of the session, each event's
    line the JSON that `get --json` holds for it."""
    _fill(db, tmp_path / "in.jsonl", {"long": 2_500})

    async def get(jsonl: bool) -> str:
        async with SessionStore(db) as store:
            return "".join([p async for p in store.session_json(APP, "u-big", "long", lines=jsonl)])

    before = asyncio.run(get(True))
    seen = _writer_between_pages(monkeypatch, db)
    during = asyncio.run(get(True))
    assert seen["appended"] == 1
    monkeypatch.undo()
    after = asyncio.run(get(True))
    assert during == (after if db.startswith("sqlite") else before)
    lines = during.splitlines()
    assert len(lines) == (2_501 if db.startswith("sqlite") else 2_500) and during.endswith("}\n")
    # with no writer, the lines are the events `get --json` prints, one for one
    assert [json.loads(x) for x in after.splitlines()] == json.loads(asyncio.run(get(False)))["events"]


def test_sqlite_gives_up_on_a_session_that_changes_at_every_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = sqlite_url(tmp_path / "busy.db")
    _fill(url, tmp_path / "in.jsonl", {"long": 1_500})
    seen = _writer_between_pages(monkeypatch, url, every=True)

    async def get() -> str:
        async with SessionStore(url) as store:
            return "".join([p async for p in store.session_json(APP, "u-big", "long")])

    with pytest.raises(StoreError, match=f"changed {READ_ATTEMPTS} times while it was read"):
        asyncio.run(get())
    assert seen["reads"] == READ_ATTEMPTS


def test_a_spooled_session_gives_the_memory_strings_of_a_whole_one(
    db: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`ltm save --from-store` / `policy test --from-store` of a session past PAGED_EVENTS: its events
    come back from disk, one at a time, and the policy's decisions are those of the whole session."""
    from veadk_mem.policy import ResolvedPolicy, dry_run, preset_policy
    from veadk_mem.sessions import session_reads
    from veadk_mem.sessions.spooled import SpooledEvents

    _fill(db, tmp_path / "in.jsonl", {"long": 2_500})
    policy = ResolvedPolicy(preset_policy("all"))

    async def read() -> tuple[Any, list[Any]]:
        async with SessionStore(db) as store:
            one = await store.get_session(APP, "u-big", "long")
            every = [s async for s in store.iter_sessions()]
            return one, every

    whole, _ = asyncio.run(read())
    monkeypatch.setattr(session_reads, "PAGED_EVENTS", 1_000)
    spooled, listed = asyncio.run(read())
    assert isinstance(spooled.events, SpooledEvents) and isinstance(listed[0].events, SpooledEvents)
    assert len(spooled.events) == len(whole.events) == 2_500
    expected = dry_run([whole], policy).to_dict()
    assert dry_run([spooled], policy).to_dict() == expected == dry_run(listed, policy).to_dict()
    assert list(spooled.events) == whole.events  # a second pass reads the same events again
