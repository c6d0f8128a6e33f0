"""Which memories a session made: the pieces `ltm show` and erasure share (#42 items 2, 3).

A memory vmem saved names its session (provenance); one a VeADK agent saved itself names
nothing, but its text is exactly a memory string the save policy computes from one of the
session's events, so recomputing the strings (the same engine `ltm save` uses) and comparing
content hashes finds it. Events are read a page at a time, never a session whole.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from veadk_mem.errors import BadInput, NotSupported, VmemError
from veadk_mem.ltm.base import content_hash
from veadk_mem.ltm.provenance import policy_name

if TYPE_CHECKING:
    from veadk_mem.config import VmemSettings
    from veadk_mem.ltm.facade import LongTermMemory
    from veadk_mem.policy.model import ResolvedPolicy
    from veadk_mem.sessions.store import SessionStore

ALL_PRESETS = "all-presets"


@dataclass(frozen=True)
class Produced:
    """One memory string a policy makes of one event: where it came from."""

    session_id: str
    event_id: str
    policy: str


@dataclass(frozen=True)
class EventChoice:
    """Some events of a session: those with these ids (`inside`), or all but them."""

    ids: frozenset[str]
    inside: bool = True


def candidate_policies(ltm: LongTermMemory, spec: str | None) -> list[ResolvedPolicy]:
    """The policies whose memory strings are looked for: `spec` (else the configured default), or with
    `all-presets` the configured default, every [policy.NAME] and every preset (one of each distinct policy)."""
    from veadk_mem.policy import PRESETS

    if spec != ALL_PRESETS:
        return [ltm.resolve_policy(spec)]
    specs: list[str | None] = [None, *ltm.settings.policy.named(), *PRESETS]
    found: dict[str, ResolvedPolicy] = {}
    for each in specs:
        policy = ltm.resolve_policy(each)
        found.setdefault(policy.policy.model_dump_json(), policy)
    return list(found.values())


async def session_strings(
    store: SessionStore,
    app_name: str,
    user_id: str,
    session_id: str,
    policies: list[ResolvedPolicy],
    events: EventChoice | None = None,
) -> AsyncIterator[tuple[str, Produced, Any]]:
    """(content hash, where, decision) of every memory string the policies make of the session's events
    (those `events` chooses), streamed a page at a time; a text no store can hold (a lone surrogate) is passed over."""
    from veadk_mem.policy import decide

    names = [policy_name(p) or "default" for p in policies]
    async for event in store.iter_events(app_name, user_id, session_id):
        if events is not None and (event.id in events.ids) != events.inside:
            continue
        seen: set[str] = set()
        for policy, name in zip(policies, names, strict=True):
            decision = decide(event, policy)
            if decision.memory is None:
                continue
            try:
                digest = content_hash(decision.memory)
            except BadInput:
                continue
            if digest not in seen:
                seen.add(digest)
                yield digest, Produced(session_id, event.id, name), decision


async def session_hashes(
    store: SessionStore,
    app_name: str,
    user_id: str,
    session_id: str,
    policies: list[ResolvedPolicy],
    events: EventChoice | None = None,
) -> dict[str, list[Produced]]:
    """content hash -> the events (and policy) that produce it, for one session (the events `events` chooses)."""
    found: dict[str, list[Produced]] = {}
    async for digest, where, _decision in session_strings(store, app_name, user_id, session_id, policies, events):
        found.setdefault(digest, []).append(where)
    return found


def session_store(settings: VmemSettings) -> tuple[SessionStore | None, str]:
    """The session database, or None with the reason (VeADK's in-process `local` backend; no such file)."""
    from veadk_mem.sessions.store import SessionStore
    from veadk_mem.sessions.url import sqlite_file

    try:
        store = SessionStore.from_settings(settings)
    except NotSupported:
        return None, "short_term_memory.backend = local keeps sessions in the agent's process"
    except VmemError as exc:
        return None, exc.message
    path = sqlite_file(store.db.url)
    if path is not None and not Path(path).exists():
        return None, f"{store.db.display_url} does not exist"
    return store, store.db.display_url
