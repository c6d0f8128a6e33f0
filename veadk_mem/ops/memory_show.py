"""`vmem ltm show ID`: one memory, where it came from, and why the policy kept it (#42 item 2).

The memory is read back from the long-term store; its source is the provenance vmem
recorded when it saved it. When the session database is reachable, the event(s) it came
from are read and the policy decides on them again, as `vmem policy test` explains a
decision: the reason, and whether the recomputed string is the memory's text byte for
byte. A memory without provenance (saved by a VeADK agent itself) is matched by content
hash against the strings every candidate policy makes of the user's sessions.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from veadk_mem.errors import NotFound, VmemError
from veadk_mem.ltm.base import content_hash
from veadk_mem.ltm.lookup import find_memory
from veadk_mem.ltm.provenance import NOT_RECORDED
from veadk_mem.ops.memory_match import ALL_PRESETS, candidate_policies, session_store, session_strings

if TYPE_CHECKING:
    from veadk_mem.config import VmemSettings
    from veadk_mem.ltm.base import MemoryRecord
    from veadk_mem.ltm.facade import LongTermMemory
    from veadk_mem.policy.decision import Decision
    from veadk_mem.sessions.store import SessionStore

MAX_MATCHES = 20  # sessions named for a memory matched by content hash (a string many sessions said)


@dataclass
class SourceEvent:
    """One event a memory came from, with the policy's decision on it now."""

    app_name: str
    user_id: str
    session_id: str
    event_id: str
    author: str = ""
    timestamp: float | None = None
    policy: str = ""
    decision: str = ""  # saved | dropped | "" (the event is not in the session any more)
    reason: str = ""
    same_text: bool = False  # the recomputed memory string is the memory's text, byte for byte

    def to_json(self) -> dict[str, Any]:
        return {
            "app_name": self.app_name,
            "user_id": self.user_id,
            "session_id": self.session_id,
            "event_id": self.event_id,
            "author": self.author,
            "timestamp": self.timestamp,
            "policy": self.policy,
            "decision": self.decision or None,
            "reason": self.reason,
            "same_text": self.same_text,
        }


@dataclass
class MemoryShow:
    """What `ltm show` found of one memory."""

    index: str
    user_id: str
    backend: str
    record: MemoryRecord
    session_db: str = ""  # the database read, or why none was
    session_db_read: bool = False
    matched_by: str = ""  # provenance | content hash | "" (no source found)
    events: list[SourceEvent] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def source_text(self) -> str:
        """The source in one phrase: the recorded one, else what matching found, else `not recorded`."""
        source = self.record.source
        if source is not None:
            return f"{source.app_name}/{source.user_id}/{source.label()}" + (
                f" (policy {source.policy})" if source.policy else ""
            )
        if self.events:
            first = self.events[0]
            more = f" and {len(self.events) - 1} more" if len(self.events) > 1 else ""
            return f"{NOT_RECORDED}; matched by content hash: {first.session_id}/{first.event_id}{more}"
        return NOT_RECORDED

    def to_json(self) -> dict[str, Any]:
        from veadk_mem.ltm.convert import epoch_of

        r = self.record
        return {
            "id": r.id,
            "index": self.index,
            "user_id": self.user_id,
            "backend": self.backend,
            "text": r.text,
            "content_hash": r.content_hash,
            "created_at": epoch_of(r.created_at) if r.created_at is not None else None,
            "source": r.source.to_json() if r.source is not None else None,
            "matched_by": self.matched_by or None,
            "session_database": {"where": self.session_db, "read": self.session_db_read},
            "events": [e.to_json() for e in self.events],
            "notes": list(self.notes),
        }


def _event(app: str, user: str, session: str, decision: Decision, policy: str, digest: str) -> SourceEvent:
    same = decision.memory is not None and content_hash(decision.memory) == digest
    return SourceEvent(
        app_name=app,
        user_id=user,
        session_id=session,
        event_id=decision.event.id,
        author=decision.event.author,
        timestamp=decision.event.timestamp or None,
        policy=policy,
        decision="saved" if decision.saved else "dropped",
        reason=decision.reason,
        same_text=same,
    )


async def _from_provenance(settings: VmemSettings, ltm: LongTermMemory, store: SessionStore, show: MemoryShow) -> None:
    """The recorded events, read from their session and decided again by the recorded policy."""
    from veadk_mem.policy import configured_policy, decide

    source = show.record.source
    assert source is not None
    app, user = source.app_name or show.record.app_name, source.user_id or show.user_id
    try:
        policy = configured_policy(source.policy or None, settings, backend=ltm.backend_name)
        name = source.policy or "default"
    except VmemError as exc:  # a policy file moved since: say so, decide with the configured one
        show.notes.append(f"policy {source.policy!r}: {exc.message}; decided with the configured policy")
        policy, name = ltm.resolve_policy(None), "configured"
    try:
        await store.get_summary(app, user, source.session_id)
    except NotFound:
        show.notes.append(f"session {app}/{user}/{source.session_id} is no longer in the session database")
        return
    wanted = set(source.event_ids)
    async for event in store.iter_events(app, user, source.session_id):
        if event.id in wanted:
            wanted.discard(event.id)
            show.events.append(
                _event(app, user, source.session_id, decide(event, policy), name, show.record.content_hash)
            )
    for missing in [e for e in source.event_ids if e in wanted]:
        show.notes.append(f"event {missing} is no longer in session {source.session_id}")
        show.events.append(SourceEvent(app, user, source.session_id, missing, policy=name))


async def _by_hash(ltm: LongTermMemory, store: SessionStore, show: MemoryShow, app_name: str | None) -> None:
    """The events of the user's sessions whose memory string (under any candidate policy) is the memory's text."""
    from veadk_mem.sessions.store import SessionFilter

    policies = candidate_policies(ltm, ALL_PRESETS)
    digest = show.record.content_hash
    for summary in await store.list_sessions(SessionFilter(app=app_name, user=show.user_id)):
        async for found, where, decision in session_strings(
            store, summary.app_name, summary.user_id, summary.id, policies
        ):
            if found == digest:
                show.events.append(
                    _event(summary.app_name, summary.user_id, summary.id, decision, where.policy, digest)
                )
                break  # one event per session is enough to name it
        if len(show.events) >= MAX_MATCHES:
            show.notes.append(f"the first {MAX_MATCHES} sessions that made it are shown")
            break
    if show.events:
        show.matched_by = "content hash"


async def show_memory(
    settings: VmemSettings, ltm: LongTermMemory, memory_id: str, *, user_id: str | None, app_name: str | None
) -> MemoryShow:
    """The memory with this id (NotFound, exit 3; NotSupported, exit 4, where it cannot be read back), its
    source and, when the session database is reachable, its events and the policy's decision on them."""
    index, user, record = await find_memory(ltm, memory_id, user_id=user_id, app_name=app_name)
    show = MemoryShow(index=index, user_id=user, backend=ltm.backend_name, record=record)
    store, show.session_db = session_store(settings)
    if store is None:
        show.notes.append(f"session database not read: {show.session_db}")
        return show
    try:
        async with store:
            if record.source is not None and record.source.session_id:
                show.matched_by = "provenance"
                await _from_provenance(settings, ltm, store, show)
            else:
                await _by_hash(ltm, store, show, app_name)
            show.session_db_read = True
    except VmemError as exc:  # the memory is shown all the same; the database's failure is named
        show.notes.append(f"session database not read: {exc.message}")
    return show
