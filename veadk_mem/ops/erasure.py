"""Erasure that follows a session into long-term memory, then proves nothing is left (#42 item 3).

`session delete --with-memories`, `forget USER --session ID`, `session prune --with-memories`
and browse's delete all come here. For the sessions to delete:

1. plan: the sessions (`plan_delete`, as `session delete` finds them: an unknown id is
   NotFound before anything is touched), the memory strings the candidate policies make
   of their events (streamed a page at a time, kept as content hashes), and the memories
   that match, in every index the user's memories are in: by provenance (the session id
   vmem recorded), by the session id a service keeps (VikingDB), or by content hash in the
   session's own index (so memories a VeADK agent saved itself, which name no session, are
   found). Reading the long-term store here means an unreachable one fails the job before
   anything is deleted, and a backend that cannot delete (tos_context) is NotSupported.
2. a memory string another session that stays also makes (same hash) is kept and
   reported: deleting it would take a memory that session still stands behind; it goes
   when every session that makes it is erased. A profile a service derives from all of a
   user's sessions (VikingDB's `sys_profile_v1`) is kept and reported likewise.
3. delete the memories, THEN the sessions: a failure part-way leaves the sessions, from
   which a re-run finds the same memories and finishes the job.
4. verify: list each index again and search for each deleted memory's text; whatever still
   has a deleted id or content hash is reported as left (the caller exits 1).

The report (`ErasureReport.to_json`) is what the operator sees, memory texts included; the
history keeps `ErasureReport.receipt()`, the proof a data-protection request asks for: ids and
content hashes only, never the erased text (the history is append-only: text stored there could
never be erased), every list capped at MAX_IDS with its total.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from veadk_mem.errors import BadInput, Interrupted, NotFound, VmemError
from veadk_mem.ltm.base import Capability
from veadk_mem.ltm.lookup import user_indexes
from veadk_mem.ltm.provenance import policy_name
from veadk_mem.ops.history import MAX_IDS
from veadk_mem.ops.memory_match import EventChoice, Produced, candidate_policies, session_hashes
from veadk_mem.sessions.delete_flow import PlannedDelete, carry_out, plan_delete
from veadk_mem.sessions.records import DeleteReport, SessionFilter, SessionKey

if TYPE_CHECKING:
    from veadk_mem.config import RetentionSettings
    from veadk_mem.ltm.base import MemoryRecord
    from veadk_mem.ltm.facade import LongTermMemory
    from veadk_mem.policy.model import ResolvedPolicy
    from veadk_mem.sessions.records import SessionSummary
    from veadk_mem.sessions.retention import PruneReport, RetentionPlan
    from veadk_mem.sessions.store import SessionStore

PROFILE_TYPES = ("sys_profile_v1",)  # memories a service derives from all of a user's sessions
VERIFY_TOP_K = 10


@dataclass
class MatchedMemory:
    """A memory made from an erased session: how it was found, and (when kept) why."""

    index: str
    user_id: str
    record: MemoryRecord
    matched_by: str  # provenance | session id | content hash
    sessions: list[str] = field(default_factory=list)  # the erased sessions that made it
    events: list[str] = field(default_factory=list)
    kept: str = ""  # why it stays ("" when it goes)

    def to_json(self) -> dict[str, Any]:
        from veadk_mem.ltm.convert import searchable_text

        out = {
            "index": self.index,
            "user_id": self.user_id,
            "id": self.record.id,
            "content_hash": self.record.content_hash,
            "text": searchable_text(self.record.text),
            "matched_by": self.matched_by,
            "sessions": self.sessions,
            "events": self.events,
        }
        if self.kept:
            out["kept"] = self.kept
        return out

    def receipt(self) -> dict[str, Any]:
        """This memory as the history keeps it: where it was and its content hash, never its text."""
        out: dict[str, Any] = {
            "index": self.index,
            "user_id": self.user_id,
            "id": self.record.id,
            "content_hash": self.record.content_hash,
            "matched_by": self.matched_by,
            **capped("sessions", self.sessions),
            **capped("events", self.events),
        }
        if self.kept:
            out["kept"] = self.kept
        return out


def capped(name: str, items: list[Any]) -> dict[str, Any]:
    """`{name: the first MAX_IDS items, name_total: how many}`: a receipt's list stays bounded."""
    return {name: items[:MAX_IDS], f"{name}_total": len(items)}


@dataclass
class Verification:
    """What the pass after the delete found: memories checked, and those still there."""

    checked: int = 0
    searches: int = 0
    left: list[dict[str, Any]] = field(default_factory=list)  # {index, user_id, id, content_hash, found_by}

    @property
    def clean(self) -> bool:
        return not self.left

    def to_json(self) -> dict[str, Any]:
        return {"checked": self.checked, "searches": self.searches, "clean": self.clean, "left": self.left}


@dataclass
class ErasureReport:
    """The plan of an erasure and, once carried out, the receipt: what went from each store, what stayed."""

    backend: str
    session_db: str
    policies: list[str]
    sessions: DeleteReport
    memories: list[MatchedMemory] = field(default_factory=list)
    kept: list[MatchedMemory] = field(default_factory=list)
    dry_run: bool = True
    done: bool = False
    deleted_memories: int = 0
    deleted_sessions: int = 0
    verification: Verification | None = None

    @property
    def events(self) -> int:
        return self.sessions.events

    @property
    def clean(self) -> bool:
        return self.verification is None or self.verification.clean

    def to_json(self) -> dict[str, Any]:
        return {
            "dry_run": self.dry_run,
            "session_database": self.session_db,
            "backend": self.backend,
            "policies": self.policies,
            "sessions": self.sessions.to_json(),
            "memories": [m.to_json() for m in self.memories],
            "kept": [m.to_json() for m in self.kept],
            "deleted": {"sessions": self.deleted_sessions, "memories": self.deleted_memories} if self.done else None,
            "verification": self.verification.to_json() if self.verification is not None else None,
        }

    def receipt(self) -> dict[str, Any]:
        """What the history keeps of this erasure: `to_json` without any memory's text, every list
        capped at MAX_IDS with its total (the history can never delete what it stores)."""
        s = self.sessions
        keys = [f"{x.app_name}/{x.user_id}/{x.id}" for x in s.sessions]
        skipped = [f"{k.app_name}/{k.user_id}/{k.id}" for k in s.skipped]
        verification = None
        if self.verification is not None:
            v = self.verification
            verification = {"checked": v.checked, "searches": v.searches, "clean": v.clean, **capped("left", v.left)}
        return {
            "session_database": self.session_db,
            "backend": self.backend,
            "policies": self.policies,
            "sessions": {**capped("ids", keys), "events": s.events, **capped("skipped", skipped)},
            **capped("memories", [m.receipt() for m in self.memories]),
            **capped("kept", [m.receipt() for m in self.kept]),
            "deleted": {"sessions": self.deleted_sessions, "memories": self.deleted_memories} if self.done else None,
            "verification": verification,
        }


@dataclass
class _Group:
    """What the erased sessions of one (app, user) made: content hash -> (session, event) pairs."""

    app_name: str
    user_id: str
    sessions: set[str] = field(default_factory=set)  # erased whole
    trimmed: dict[str, frozenset[str]] = field(default_factory=dict)  # session id -> its events trimmed
    hashes: dict[str, list[tuple[str, str]]] = field(default_factory=dict)

    def add(self, made: dict[str, list[Produced]]) -> None:
        for digest, where in made.items():
            self.hashes.setdefault(digest, []).extend((p.session_id, p.event_id) for p in where)


async def _groups(
    store: SessionStore,
    sessions: list[SessionSummary],
    policies: list[ResolvedPolicy],
    trimmed: dict[SessionKey, frozenset[str]] | None = None,
) -> dict[tuple[str, str], _Group]:
    """The erased sessions (and trimmed events) by (app, user), with the memory strings they made."""
    groups: dict[tuple[str, str], _Group] = {}
    for s in sessions:
        group = groups.setdefault((s.app_name, s.user_id), _Group(s.app_name, s.user_id))
        group.sessions.add(s.id)
        group.add(await session_hashes(store, s.app_name, s.user_id, s.id, policies))
    for key, ids in (trimmed or {}).items():
        if not ids:
            continue
        group = groups.setdefault((key.app_name, key.user_id), _Group(key.app_name, key.user_id))
        group.trimmed[key.id] = ids
        group.add(await session_hashes(store, key.app_name, key.user_id, key.id, policies, EventChoice(ids)))
    return groups


def _is_profile(record: MemoryRecord) -> bool:
    """A profile a service derives from all of the user's sessions (VikingDB's `sys_profile_v1`)."""
    kind = (record.origin or {}).get("memory_type") or record.metadata.get("memory_type")
    return kind in PROFILE_TYPES


def _match(record: MemoryRecord, group: _Group, own_index: bool) -> MatchedMemory | None:
    """How this memory came from one of the group's sessions, or None."""
    source = record.source
    index, user = "", group.user_id
    if _is_profile(record):  # made of every session of the user, the erased ones among them
        return MatchedMemory(index, user, record, "user profile", sorted(group.sessions))
    if source is not None and source.app_name in ("", group.app_name):
        trimmed = group.trimmed.get(source.session_id)
        whole = source.session_id in group.sessions
        if whole or (trimmed is not None and source.event_ids and trimmed.issuperset(source.event_ids)):
            return MatchedMemory(index, user, record, "provenance", [source.session_id], list(source.event_ids))
    if record.session_id in group.sessions and record.app_name in ("", group.app_name):
        return MatchedMemory(
            index, user, record, "session id", [record.session_id], [record.event_id] if record.event_id else []
        )
    made = group.hashes.get(record.content_hash) if own_index else None  # see _keep_shared for a named source
    if made:
        return MatchedMemory(
            index, user, record, "content hash", sorted({s for s, _ in made}), list(dict.fromkeys(e for _, e in made))
        )
    return None


def _named_sessions(record: MemoryRecord) -> list[tuple[str, str]]:
    """The (app, session id) pairs a memory names as where it came from: its provenance, a service's id."""
    source = record.source
    named = [(source.app_name, source.session_id)] if source is not None and source.session_id else []
    if record.session_id:
        named.append((record.app_name, record.session_id))
    return named


async def _memories(ltm: LongTermMemory, group: _Group) -> list[MatchedMemory]:
    """The memories of the group's user that its sessions made, in every index they may be in."""
    own = ltm.index_for(group.app_name)
    indexes = list(dict.fromkeys([own, *await user_indexes(ltm, group.user_id, None)]))
    found: list[MatchedMemory] = []
    for index in indexes:
        backend = ltm.backend_for(index=index)
        backend.require(Capability.LIST)
        async for batch in backend.iter_memories(group.user_id):
            for record in batch:
                matched = _match(record, group, index == own)
                if matched is not None:
                    matched.index = index
                    found.append(matched)
    return found


async def _keep_shared(
    store: SessionStore,
    ltm: LongTermMemory,
    matched: list[MatchedMemory],
    groups: dict[tuple[str, str], _Group],
    policies: list[ResolvedPolicy],
) -> None:
    """Mark the memories a session that stays also makes (same content hash), and services' profiles, as kept.

    The sessions that stand behind a memory are the user's staying sessions of the erased sessions'
    apps and of every app whose index is the memory's (with `long_term_memory.index` set, all apps
    share one index), and, for a memory matched by content hash, the session its recorded source
    names (another app's, say): that memory is the staying session's, however the same string was
    made. A named source that no longer exists does not keep it."""
    for m in matched:
        if _is_profile(m.record):
            m.kept = "a profile the service derives from all of the user's sessions: delete it with `vmem ltm delete`"
    for user in dict.fromkeys(u for _, u in groups):
        mine = [m for m in matched if m.user_id == user]
        wanted = {m.record.content_hash: m for m in mine if not m.kept}
        if not wanted:
            continue
        apps = {a for a, u in groups if u == user}
        indexes = {m.index for m in wanted.values()}
        named = {sid for m in mine for _, sid in _named_sessions(m.record)}
        for other in await store.list_sessions(SessionFilter(user=user)):
            group = groups.get((other.app_name, user))
            if group is not None and other.id in group.sessions:
                continue
            if other.id in named:
                _keep_named(mine, other)
            if other.app_name not in apps and ltm.index_for(other.app_name) not in indexes:
                continue
            rest = EventChoice(group.trimmed[other.id], inside=False) if group and other.id in group.trimmed else None
            made = await session_hashes(store, other.app_name, user, other.id, policies, rest)
            for digest in made.keys() & wanted.keys():
                del wanted[digest]
                reason = f"session {other.app_name}/{user}/{other.id}, which stays, makes the same memory"
                for same in mine:  # the same text in another index is one memory string too
                    if same.record.content_hash == digest and not same.kept:
                        same.kept = reason
            if not wanted:
                break


def _keep_named(mine: list[MatchedMemory], other: SessionSummary) -> None:
    """Keep the memories matched by content hash whose recorded source is `other`, a session that stays."""
    for m in mine:
        if m.kept or m.matched_by != "content hash":
            continue
        if any(sid == other.id and app in ("", other.app_name) for app, sid in _named_sessions(m.record)):
            m.kept = f"its recorded source, session {other.app_name}/{other.user_id}/{other.id}, stays"


async def user_session(store: SessionStore, user: str, session_id: str, app_name: str | None) -> SessionKey:
    """`forget USER --session ID`'s session: looked up by its key (with the app) or its id (one bounded
    query on the key columns), never among the user's listed sessions, which leave out one whose
    state does not decode. NotFound when the user has none; BadInput when it is in several apps."""
    from veadk_mem.sessions.read_queries import ID_CANDIDATES

    if app_name is not None:
        found = [s.key for s in await store.rows.stored_sessions(keys=[SessionKey(app_name, user, session_id)])]
    else:
        keys = await store.rows.sessions_by_id(session_id)
        found = [k for k in keys if k.id == session_id and k.user_id == user]
        if not found and len(keys) >= ID_CANDIDATES:  # a common id: the user's may lie past the cap
            found = [s.key for s in await store.rows.stored_sessions(user=user) if s.id == session_id]
    if not found:
        where = f" in app {app_name!r}" if app_name else ""
        raise NotFound(f"no session {session_id!r} of user {user!r}{where}: nothing deleted")
    if len(found) > 1:
        apps = ", ".join(sorted(k.app_name for k in found))
        raise BadInput(f"session {session_id!r} of user {user!r} is in several apps ({apps}): name one with --app")
    return found[0]


async def plan_erasure(
    store: SessionStore,
    ltm: LongTermMemory,
    *,
    keys: list[SessionKey] | None = None,
    flt: SessionFilter | None = None,
    purge_state: bool = False,
    policy: str | None = None,
) -> tuple[ErasureReport, PlannedDelete]:
    """The sessions to delete and the memories that go with them (NotFound: an unknown session id;
    NotSupported: a backend that cannot list or delete; a store failure: unreachable). Touches nothing."""
    _check_backend(ltm)
    planned = await plan_delete(store, keys=keys, flt=flt, purge_state=purge_state)
    policies = candidate_policies(ltm, policy)
    report = ErasureReport(
        backend=ltm.backend_name,
        session_db=store.db.display_url,
        policies=[policy_name(p) or "default" for p in policies],
        sessions=planned.report,
    )
    await _find_memories(store, ltm, report, await _groups(store, planned.chosen, policies), policies)
    return report, planned


async def _find_memories(
    store: SessionStore,
    ltm: LongTermMemory,
    report: ErasureReport,
    groups: dict[tuple[str, str], _Group],
    policies: list[ResolvedPolicy],
) -> None:
    """The report's memories (to delete) and kept ones, for what the groups erase."""
    matched: list[MatchedMemory] = []
    for group in groups.values():
        matched.extend(await _memories(ltm, group))
    await _keep_shared(store, ltm, matched, groups, policies)
    report.memories = [m for m in matched if not m.kept]
    report.kept = [m for m in matched if m.kept]


def _check_backend(ltm: LongTermMemory) -> None:
    """NotSupported (exit 4) before anything is read when the backend cannot list or delete (tos_context)."""
    kind = ltm.backend_type()
    if kind is not None:
        kind.require(Capability.LIST)
        kind.require(Capability.DELETE)


async def _keep_resumed(store: SessionStore, report: ErasureReport, planned: list[SessionSummary]) -> None:
    """Just before the memories go: a planned session an agent updated since the plan stays (the
    re-checking delete keeps it), so the memories it made move to `kept` instead of going first."""
    if not planned:
        return
    keys = [s.key for s in planned]
    try:
        found: list[SessionSummary] = list(await store.find_sessions(keys))
    except NotFound:  # one deleted meanwhile, or a state the reads cannot decode: as stored
        found = await store.rows.stored_sessions(keys=keys)
    now = {s.key: s.update_time for s in found}
    changed = {(s.user_id, s.id): s.key for s in planned if s.key in now and abs(now[s.key] - s.update_time) > 1e-6}
    if not changed:
        return
    for m in report.memories:
        key = next((changed[(m.user_id, sid)] for sid in m.sessions if (m.user_id, sid) in changed), None)
        if key is not None:
            where = f"{key.app_name}/{key.user_id}/{key.id}"
            m.kept = f"session {where} changed since the plan (an agent resumed it): it stays"
    report.kept += [m for m in report.memories if m.kept]
    report.memories = [m for m in report.memories if not m.kept]


async def _delete_memories(ltm: LongTermMemory, report: ErasureReport) -> None:
    by_scope: dict[tuple[str, str], list[MemoryRecord]] = {}
    for m in report.memories:
        by_scope.setdefault((m.index, m.user_id), []).append(m.record)
    for (index, user), records in by_scope.items():
        report.deleted_memories += await ltm.delete(app_name=None, user_id=user, records=records, index=index)


async def prune_erasure(
    store: SessionStore,
    ltm: LongTermMemory,
    settings: RetentionSettings,
    *,
    app: str | None = None,
    policy: str | None = None,
    dry_run: bool = False,
    yes: bool = False,
    confirm: Callable[[RetentionPlan], None] | None = None,
) -> tuple[PruneReport, ErasureReport]:
    """`session prune --with-memories`: the memories of the sessions the rules delete and of the events
    they trim go first (after the confirmation), then the prune runs as without; then the verification."""
    from veadk_mem.sessions.retention import planned_trims, prune, refuse_dangerous, retention_plan

    _check_backend(ltm)
    plan = await retention_plan(store, settings, app=app)
    refuse_dangerous(plan, app=app, yes=yes)
    doomed = [s.summary() for s in plan.doomed]
    trims = await planned_trims(store, plan)
    policies = candidate_policies(ltm, policy)
    events = sum(s.event_count for s in doomed)
    report = ErasureReport(
        backend=ltm.backend_name,
        session_db=store.db.display_url,
        policies=[policy_name(p) or "default" for p in policies],
        sessions=DeleteReport(sessions=doomed, events=events, dry_run=True),
    )
    await _find_memories(store, ltm, report, await _groups(store, doomed, policies, trims), policies)
    if dry_run:
        return await prune(store, settings, app=app, dry_run=True, yes=yes, planned=plan), report

    async def first(_plan: RetentionPlan) -> None:
        await _keep_resumed(store, report, doomed)  # the prune's delete re-checks every session
        await _delete_memories(ltm, report)

    try:
        pruned = await prune(store, settings, app=app, yes=yes, confirm=confirm, planned=plan, first=first)
    except BaseException as exc:
        raise _memories_went(exc, report) from None
    if pruned.deleted is not None:
        report.sessions = pruned.deleted
        report.deleted_sessions = len(pruned.deleted.sessions)
    report.dry_run, report.done = False, True
    report.verification = await verify(ltm, report.memories, report.kept)
    return pruned, report


async def carry_out_erasure(
    store: SessionStore, ltm: LongTermMemory, report: ErasureReport, planned: PlannedDelete
) -> ErasureReport:
    """Delete the planned memories, then the sessions, then verify the memories are gone. When the
    delete re-checks its sessions (a filter with --older-than), the memories of a session resumed
    since the plan stay with it."""
    if planned.recheck:
        await _keep_resumed(store, report, planned.chosen)
    await _delete_memories(ltm, report)
    try:
        report.sessions = await carry_out(store, planned)
    except BaseException as exc:
        raise _memories_went(exc, report) from None
    report.deleted_sessions = len(report.sessions.sessions)
    report.dry_run, report.done = False, True
    report.verification = await verify(ltm, report.memories, report.kept)
    return report


def _memories_went(exc: BaseException, report: ErasureReport) -> BaseException:
    """`exc`, raised by the session delete after the memories went, saying so: its message no longer
    claims nothing was changed, and its `committed` (what the history records) counts them."""
    from veadk_mem.sessions.dberrors import partial

    gone = report.deleted_memories
    if not gone:
        return exc
    if isinstance(exc, (KeyboardInterrupt,)) or type(exc).__name__ == "CancelledError":
        exc = Interrupted("interrupted")
    if not isinstance(exc, VmemError):
        return exc
    committed = dict(exc.committed or {})
    committed["memories"] = int(committed.get("memories", 0)) + gone
    committed["ids"] = [*committed.get("ids", []), *(f"memory {m.index}/{m.record.id}" for m in report.memories)]
    exc.committed = committed
    exc.message = (
        f"{partial(exc.message)} -- {gone:,} memor{'y' if gone == 1 else 'ies'} made from these sessions "
        "had been deleted first; run the same command again to delete the sessions"
    )
    exc.args = (exc.message,)
    return exc


async def verify(ltm: LongTermMemory, deleted: list[MatchedMemory], kept: list[MatchedMemory]) -> Verification:
    """List each index again and search for each deleted memory's text: anything with a deleted id or
    content hash still there is left (a memory string kept on purpose is not counted)."""
    from veadk_mem.ltm.convert import searchable_text

    result = Verification()
    spared = {(m.user_id, m.record.content_hash) for m in kept}
    scopes: dict[tuple[str, str], list[MatchedMemory]] = {}
    for m in deleted:
        scopes.setdefault((m.index, m.user_id), []).append(m)
    for (index, user), group in scopes.items():
        gone = _Gone(index, user, {m.record.id for m in group}, {m.record.content_hash for m in group})
        gone.hashes -= {h for u, h in spared if u == user}
        backend = ltm.backend_for(index=index)
        async for batch in backend.iter_memories(user):
            for record in batch:
                gone.check(record, "listing", result)
        for m in group:
            result.checked += 1
            result.searches += 1
            for record in await backend.search(user, searchable_text(m.record.text), VERIFY_TOP_K):
                gone.check(record, "search", result)
    return result


@dataclass
class _Gone:
    """What must no longer be in one index of one user: ids and content hashes."""

    index: str
    user_id: str
    ids: set[str]
    hashes: set[str]
    seen: set[str] = field(default_factory=set)

    def check(self, record: MemoryRecord, how: str, result: Verification) -> None:
        """Add the record to the left-overs when it is one of the deleted (once per memory)."""
        if (record.id in self.ids or record.content_hash in self.hashes) and record.id not in self.seen:
            self.seen.add(record.id)
            entry = {"index": self.index, "user_id": self.user_id, "id": record.id}
            result.left.append({**entry, "content_hash": record.content_hash, "found_by": how})


async def erase(
    store: SessionStore,
    ltm: LongTermMemory,
    *,
    keys: list[SessionKey] | None = None,
    flt: SessionFilter | None = None,
    purge_state: bool = False,
    policy: str | None = None,
    dry_run: bool = False,
    confirm: Callable[[ErasureReport], None] | None = None,
) -> ErasureReport:
    """Plan, confirm (`confirm` raises to stop), delete memories then sessions, verify: the whole job."""
    report, planned = await plan_erasure(store, ltm, keys=keys, flt=flt, purge_state=purge_state, policy=policy)
    if dry_run or not (planned.chosen or planned.orphans or report.memories):
        report.dry_run = dry_run
        return report
    if confirm is not None:
        confirm(report)
    return await carry_out_erasure(store, ltm, report, planned)
