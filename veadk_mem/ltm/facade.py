"""`LongTermMemory`: VeADK's long-term-memory entry point, for a CLI.

Same parameters and rules as VeADK's class (backend name or instance, backend_config,
top_k 5, index -> app_name -> `default_app`, `viking_mem` -> `viking`, assistant events
kept for openviking), plus what an operator needs and VeADK's manual saves lack:
idempotent saves (content hash per user and index), dry runs, list / delete / forget.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from types import TracebackType
from typing import TYPE_CHECKING, Any, Self

from veadk_mem.embedding import E5_NAME, E5_VECTOR_NAME, MINILM_NAME, create_embedder, provider_for_model
from veadk_mem.errors import BadInput, NotFound, NotSupported, VmemError
from veadk_mem.ltm.base import Capability, LongTermMemoryBackend, MemoryRecord, embed_records
from veadk_mem.ltm.convert import to_memory_entries
from veadk_mem.ltm.keywords import SEARCH_MODES
from veadk_mem.ltm.ledger import Ledger, Scope, send_once
from veadk_mem.ltm.provenance import Provenance, policy_name
from veadk_mem.ltm.registry import canonical_name, load_backend

if TYPE_CHECKING:
    from veadk_mem.config import VmemSettings
    from veadk_mem.embedding.base import Embedder
    from veadk_mem.events import Session

DEFAULT_INDEX = "default_app"


@dataclass
class SessionReport:
    """What saving one session did (or would do, in a dry run)."""

    app_name: str
    user_id: str
    session_id: str
    index: str
    events: int = 0
    memories: int = 0
    saved: int = 0
    duplicates: int = 0
    dropped: int = 0
    error: str | None = None
    ids: list[str] = field(default_factory=list)
    source: str = ""
    ledger_skipped: list[str] = field(default_factory=list)  # event ids of memories the ledger says were sent

    def as_dict(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "app_name": self.app_name,
            "user_id": self.user_id,
            "session_id": self.session_id,
            "index": self.index,
            "events": self.events,
            "memories": self.memories,
            "saved": self.saved,
            "duplicates": self.duplicates,
            "dropped": self.dropped,
            "ledger_skipped": len(self.ledger_skipped),
            "ledger_skipped_events": self.ledger_skipped,
            "error": self.error,
        }


class LongTermMemory:
    """The facade every `vmem ltm` command goes through; `async with` closes its stores and ledger."""

    def __init__(
        self,
        backend: str | LongTermMemoryBackend = "local",
        backend_config: dict[str, Any] | None = None,
        top_k: int = 5,
        index: str = "",
        app_name: str = "",
        *,
        settings: VmemSettings | None = None,
        embedder: Embedder | None = None,
        warn: Callable[[str], None] | None = None,
        notice: Callable[[str], None] | None = None,
    ) -> None:
        from veadk_mem.config import VmemSettings

        self.settings = settings or VmemSettings()
        self.warn = warn
        self.notice = notice
        self.top_k = top_k
        self.index = index
        self.app_name = app_name
        self.backend_config = dict(backend_config or {})
        self._embedder = embedder
        self._embedders: dict[str, Embedder] = {}
        self._instance: LongTermMemoryBackend | None = None
        if isinstance(backend, LongTermMemoryBackend):
            self._instance = backend
            self.backend_name = backend.name or type(backend).__name__
        else:
            self.backend_name = canonical_name(backend, warn)
        self._backends: dict[str, LongTermMemoryBackend] = {}
        # (index, content hash) -> (chunks, vectors) embedded ahead by prepare_sessions, taken by the save.
        self._prepared: dict[tuple[str, str], tuple[Any, Any]] = {}
        self._dry_store: Any = None  # the in-memory store a dry run saves into
        self._ledger: Ledger | None = None

    @property
    def ledger(self) -> Ledger:
        """The replay ledger (opened on first use) for backends that cannot say what they hold."""
        if self._ledger is None:
            self._ledger = Ledger()
        return self._ledger

    def _scope(self, backend: LongTermMemoryBackend, user_id: str) -> Scope:
        return Scope(self.backend_name, backend.ledger_store, backend.index, user_id)

    @classmethod
    def from_settings(
        cls,
        settings: VmemSettings,
        *,
        app_name: str = "",
        warn: Callable[[str], None] | None = None,
        notice: Callable[[str], None] | None = None,
        embedder: Embedder | None = None,
    ) -> LongTermMemory:
        """The facade as `[long_term_memory]` configures it."""
        ltm = settings.long_term_memory
        config: dict[str, Any] = {}
        if ltm.local_path:
            config["local_path"] = ltm.local_path
        return cls(
            backend=ltm.backend,
            backend_config=config,
            top_k=ltm.top_k,
            index=ltm.index,
            app_name=app_name,
            settings=settings,
            warn=warn,
            notice=notice,
            embedder=embedder,
        )

    # --- index and backend -------------------------------------------------------------

    def index_for(self, app_name: str | None = None) -> str:
        """VeADK's fallback: backend_config index, then index, then the app name, then default_app."""
        if self._instance is not None:
            return self._instance.index
        return str(self.backend_config.get("index") or self.index or app_name or self.app_name or DEFAULT_INDEX)

    async def user_index(self, app_name: str | None, user_id: str) -> str:
        """The index to read a user's memories from.

        VeADK's fallback when anything names it; otherwise, so that `vmem ltm search -u U`
        finds what `vmem ltm save` stored under the session's app name, the one index
        holding the user's memories (several: ask for --app; none: default_app).
        """
        named = self._instance is not None or app_name or self.index or self.app_name
        if named or self.backend_config.get("index"):
            return self.index_for(app_name)
        backend = self.backend_for(None)
        known = await backend.known_indexes(user_id) if backend.can(Capability.INDEXES) else None
        if not known:
            return DEFAULT_INDEX
        if len(known) > 1:
            raise BadInput(
                f"user {user_id!r} has memories in several indexes ({', '.join(known)}): name one with --app",
                hint="or set long_term_memory.index",
            )
        return known[0]

    async def indexes_of(self, user_id: str) -> list[str] | None:
        """Every index holding the user's memories, when the store can tell (else None): what
        an empty search or listing points to."""
        try:
            backend = self.backend_for(None)
            return await backend.known_indexes(user_id) if backend.can(Capability.INDEXES) else None
        except VmemError:
            return None

    def backend_for(self, app_name: str | None = None, *, index: str | None = None) -> LongTermMemoryBackend:
        """The backend bound to the index of this app (created and prechecked on first use)."""
        if self._instance is not None:
            return self._instance
        name = index or self.index_for(app_name)
        if name not in self._backends:
            factory = load_backend(self.backend_name)
            config = {k: v for k, v in self.backend_config.items() if k != "index"}
            backend = factory(name, settings=self.settings, embedder_factory=self._make_embedder, **config)
            backend.precheck_index_naming()
            backend.warn, backend.notice = self.warn, self.notice
            self._backends[name] = backend
        return self._backends[name]

    def _make_embedder(self, stored_model: str | None) -> Embedder:
        """The configured embedder; under `auto`, the one that made the index's vectors when known."""
        from veadk_mem.embedding.local import local_model_available

        if self._embedder is not None:
            return self._embedder
        settings = self.settings.model.embedding
        key, provider, dim = "configured", None, 384
        if settings.provider == "auto" and stored_model:
            found = provider_for_model(stored_model)
            if found == "hash":
                key, provider, dim = stored_model, "hash", int(stored_model.rsplit("-", 1)[-1])
            elif found == "local" and stored_model == E5_VECTOR_NAME and settings.local_model != E5_NAME:
                # a store made with the multilingual model keeps it, whatever local model is configured
                settings = settings.model_copy(update={"local_model": E5_NAME})
                key, provider = E5_VECTOR_NAME, "local"
            elif found == "local" and stored_model == MINILM_NAME and settings.local_model != "":
                # and one made with MiniLM keeps MiniLM
                settings = settings.model_copy(update={"local_model": ""})
                key, provider = MINILM_NAME, "local"
            elif found == "local" and local_model_available(settings.local_model):
                key, provider = "local", "local"
        # One embedder per kind, shared by the indexes that use it (a model loads once).
        if key not in self._embedders:
            self._embedders[key] = create_embedder(settings, provider, notice=self.notice, hash_dim=dim)
        return self._embedders[key]

    # --- policy ------------------------------------------------------------------------

    def resolve_policy(self, spec: Any = None, *, include_assistant: bool = False) -> Any:
        """A policy spec (preset, [policy.NAME], file, inline JSON, None) resolved for this backend."""
        from veadk_mem.policy import configured_policy

        return configured_policy(
            spec, self.settings, backend=self.backend_name, include_assistant=include_assistant, warn=self.warn
        )

    # --- save --------------------------------------------------------------------------

    async def add_session_to_memory(
        self,
        session: Session,
        policy: Any = None,
        *,
        dry_run: bool = False,
        progress: Callable[[int], None] | None = None,
    ) -> SessionReport:
        """Filter a session's events through the policy and save the new memory strings."""
        if policy is None:
            policy = self.resolve_policy()
        index = self.index_for(session.app_name)
        report = SessionReport(session.app_name, session.user_id, session.id, index, events=len(session.events))
        records, report.dropped = self._memories_of(session, policy)
        report.memories = len(records)
        skipped: list[MemoryRecord] = []
        new = await self.new_records(session.user_id, records, index, skipped)
        report.ledger_skipped = [r.event_id for r in skipped]
        report.duplicates = len(records) - len(new)
        for record in new:  # embedded with other sessions' memories by prepare_sessions
            if record.vectors is None:
                record.chunks, record.vectors = self._prepared.pop((index, record.content_hash), (None, None))
        if not new:
            return report
        into = self.dry_run_backend(index) if dry_run else None
        ids = await self.save_records(session.user_id, new, index, progress=progress, into=into)
        report.ids = list(ids)
        report.saved = len(ids)
        report.duplicates = len(records) - len(ids)
        return report

    def _memories_of(self, session: Session, policy: Any) -> tuple[list[MemoryRecord], int]:
        """The memory records the policy keeps of a session's events, and how many events it dropped.

        Each record carries its provenance (`source`): the events whose content it is (several when
        the session repeats a memory string), their author and time, and the policy's name.
        """
        from veadk_mem.policy import evaluate

        records: list[MemoryRecord] = []
        by_hash: dict[str, MemoryRecord] = {}
        dropped = 0
        name = policy_name(policy)
        for decision in evaluate(session.events, policy):
            if not decision.saved or decision.memory is None:
                dropped += 1
                continue
            event = decision.event
            try:
                record = MemoryRecord(
                    text=decision.memory,
                    user_id=session.user_id,
                    app_name=session.app_name,
                    session_id=session.id,
                    event_id=event.id,
                    author=event.author,
                )
            except BadInput as exc:  # text no store can hold: the session is reported and skipped
                raise BadInput(f"session {session.id}: event {event.id}: {exc.message}") from None
            first = by_hash.get(record.content_hash)
            if first is not None and first.source is not None:
                first.source.event_ids.append(event.id)  # the same string again: one memory, both events
            else:
                record.source = Provenance(
                    app_name=session.app_name,
                    user_id=session.user_id,
                    session_id=session.id,
                    event_ids=[event.id],
                    author=event.author,
                    event_time=event.timestamp or None,
                    policy=name,
                )
                by_hash[record.content_hash] = record
            records.append(record)
        return records, dropped

    async def prepare_sessions(self, sessions: list[Session], policy: Any) -> None:
        """Embed the new memories of many sessions together, in the embedder's batches, before they are saved.

        A replay of thousands of short sessions is then bound by the model, not by one embed
        call per session. Only for backends that embed in this process; a failure here is
        left for each session's own save to report.
        """
        self._prepared.clear()  # what an earlier batch left unsaved (duplicates, failures)
        groups: dict[str, list[MemoryRecord]] = {}
        try:
            for session in sessions:
                index = self.index_for(session.app_name)
                backend = self.backend_for(index=index)
                if not backend.can(Capability.EMBEDS):
                    return
                try:
                    records, _ = self._memories_of(session, policy)
                except BadInput:  # this session's own save reports it; the others are embedded together
                    continue
                new = await self.new_records(session.user_id, records, index)
                groups.setdefault(index, []).extend(new)
            for index, records in groups.items():
                unique = list({r.content_hash: r for r in records}.values())
                await self.embed(self.backend_for(index=index), unique)
                self._prepared.update(((index, r.content_hash), (r.chunks, r.vectors)) for r in unique)
        except VmemError:
            return

    async def embed(self, backend: LongTermMemoryBackend, records: list[MemoryRecord]) -> None:
        """Chunk and embed the records for a backend that stores vectors, in a worker thread
        (an HTTP embedder blocks, a local model computes): the event loop goes on meanwhile."""
        todo = [r for r in records if r.chunks is None or r.vectors is None]
        if todo and backend.can(Capability.EMBEDS):
            await asyncio.to_thread(embed_records, backend.embedder, todo, backend.embedding_text)

    async def embed_queries(self, backend: LongTermMemoryBackend, queries: list[str]) -> None:
        """Embed search queries ahead, in a worker thread, for a backend that stores vectors."""
        if queries and backend.can(Capability.EMBEDS):
            await asyncio.to_thread(backend.queries.prepare, backend.embedder, queries)

    def dry_run_backend(self, index: str) -> LongTermMemoryBackend:
        """The index of the in-memory store a dry run saves into, so it runs the save path and stores nothing."""
        from veadk_mem.ltm.backends.memory import MemoryBackend, MemoryStore

        if self._dry_store is None:
            self._dry_store = MemoryStore()
        return MemoryBackend(index, store=self._dry_store)

    async def new_records(
        self, user_id: str, records: list[MemoryRecord], index: str, skipped: list[MemoryRecord] | None = None
    ) -> list[MemoryRecord]:
        """Records whose content hash is neither earlier in the batch nor in the store.

        A store that cannot say what it holds is asked of the replay ledger instead;
        `skipped` collects the records the ledger (not the store) said were sent already.
        """
        unique: dict[str, MemoryRecord] = {}
        for record in records:
            unique.setdefault(record.content_hash, record)
        if not unique:
            return []
        backend = self.backend_for(index=index)
        if backend.can(Capability.HASHES):
            existing = await backend.existing_hashes(user_id, list(unique))
        else:
            existing = self.ledger.sent(self._scope(backend, user_id), unique)
            if skipped is not None:
                skipped.extend(r for h, r in unique.items() if h in existing)
        return [r for h, r in unique.items() if h not in existing]

    async def save_records(
        self,
        user_id: str,
        records: list[MemoryRecord],
        index: str,
        *,
        progress: Callable[[int], None] | None = None,
        into: LongTermMemoryBackend | None = None,
    ) -> list[str]:
        """Save new records into the index (or `into`, a dry run's store), embedded first for a
        store of vectors. A store that cannot say what it holds is sent only what the replay
        ledger lets this process claim (never what another save claimed or sent), and the
        ledger records it, so the next replay skips it."""
        backend = into or self.backend_for(index=index)
        await self.embed(backend, records)
        now = time.time()
        for record in records:  # saved-at: when vmem first saved it (an import or copy keeps the original's)
            if record.source is not None and record.source.saved_at is None:
                record.source.saved_at = now
        told = 0

        def tell(n: int) -> None:
            nonlocal told
            told += n
            if progress is not None:
                progress(n)

        async def send(chosen: list[MemoryRecord]) -> list[str]:
            return await backend.save(user_id, chosen, progress=tell)

        if backend.can(Capability.HASHES):
            ids = await send(records)
        else:
            ids = await send_once(self.ledger, self._scope(backend, user_id), records, send, warn=self.warn)
        if progress is not None and told < len(records):
            progress(len(records) - told)  # what a store saving in one piece (or the ledger's skip) did not tell
        return ids

    # --- read --------------------------------------------------------------------------

    async def search_memory(
        self,
        *,
        app_name: str | None,
        user_id: str,
        query: str,
        top_k: int | None = None,
        min_score: float | None = None,
        since: float | None = None,
        until: float | None = None,
        mode: str | None = None,
    ) -> list[dict[str, Any]]:
        """The user's memories closest to the query, as MemoryEntry dicts, best first.

        `mode` (vector, keyword, hybrid; default `search_mode`, else the backend's own)
        picks the ranking; `vector` is what a VeADK agent retrieves. since/until (epoch
        seconds, until exclusive) keep memories saved in that range: the closest `top_k`
        of those, found by asking the backend for more results (4x at a time, up to
        SEARCH_WINDOW_CAP) until enough fall in the range or it has no more. `min_score`
        compares the score shown: in hybrid mode the fused score in [0, 1] (`keywords.fuse_scores`).
        """
        if not query.strip():
            raise BadInput("the search query is empty")
        mode = self.search_mode(mode)  # before the backend is built: a hosted one needs its credentials
        index = await self.user_index(app_name, user_id)
        backend = self.backend_for(index=index)
        k = top_k or self.top_k
        timed = since is not None or until is not None
        asked = k
        while True:
            records = await backend.search_by(user_id, query, asked, mode)
            entries = self._entries(records, index)
            if not timed:
                break
            entries = [e for e in entries if _in_window(e.get("timestamp"), since, until)]
            if len(entries) >= k or len(records) < asked or asked >= SEARCH_WINDOW_CAP:
                entries = entries[:k]
                break
            asked = min(asked * 4, SEARCH_WINDOW_CAP)
        if min_score is not None:
            entries = [e for e in entries if _filter_score(e["custom_metadata"]) >= min_score]
        return entries

    def backend_type(self) -> type[LongTermMemoryBackend] | None:
        """The backend's class (its declared capabilities), without configuring it: no credentials needed.
        None for a plugin registered as a factory function."""
        if self._instance is not None:
            return type(self._instance)
        found = load_backend(self.backend_name)
        return found if isinstance(found, type) and issubclass(found, LongTermMemoryBackend) else None

    def search_mode(self, mode: str | None) -> str:
        """The mode asked for, else `search_mode`, else the backend's default; exit 4 when it has no such mode."""

        backend: Any = self._instance if self._instance is not None else load_backend(self.backend_name)
        modes: tuple[str, ...] = getattr(backend, "search_modes", ("vector",))
        configured = self.settings.long_term_memory.search_mode
        chosen = mode or (configured if configured != "auto" else getattr(backend, "default_search_mode", "vector"))
        if chosen not in SEARCH_MODES:
            raise BadInput(f"unknown search mode {chosen!r}: use one of {', '.join(SEARCH_MODES)}")
        if chosen not in modes:
            raise NotSupported(
                f"the {self.backend_name} backend has no {chosen} search: it searches by {' or '.join(modes)}",
                hint="leave out --mode (and long_term_memory.search_mode) to search as the backend does",
            )
        return chosen

    async def search_batch(
        self, requests: list[SearchRequest], *, mode: str | None = None, **options: Any
    ) -> list[SearchRequest]:
        """Run many searches in one process: the queries of each index embedded together, in batches.

        Each request gets its `entries`, or its `error` (one failing query does not stop the rest).
        """
        await self.prepare_searches(requests, mode=mode)
        for request in requests:
            await self.search_one(request, mode=mode, **options)
        return requests

    async def prepare_searches(self, requests: list[SearchRequest], *, mode: str | None = None) -> None:
        """Find each request's index and embed the queries of each index together, ahead of
        `search_one`; a request whose index or embedding fails gets its `error`."""

        by_index: dict[str, list[SearchRequest]] = {}
        for request in requests:
            if request.error is not None:  # refused when the query file was read
                continue
            try:
                request.index = await self.user_index(request.app_name, request.user_id)
            except VmemError as exc:
                request.error = exc
                continue
            by_index.setdefault(request.index, []).append(request)
        for index, group in by_index.items():
            try:
                backend = self.backend_for(index=index)
                if self.search_mode(mode) != "keyword":
                    await self.embed_queries(backend, [r.query for r in group if r.query.strip()])
            except VmemError as exc:
                for request in group:
                    request.error = exc

    async def search_one(self, request: SearchRequest, *, mode: str | None = None, **options: Any) -> None:
        """Search one prepared request: its `entries`, or its `error`."""

        if request.error is not None:
            return
        top_k = options.pop("top_k", None)
        try:
            request.entries = await self.search_memory(
                app_name=request.app_name or None,
                user_id=request.user_id,
                query=request.query,
                top_k=request.top_k or top_k,
                mode=mode,
                **options,
            )
        except VmemError as exc:
            request.error = exc

    async def list_memories(
        self,
        *,
        app_name: str | None,
        user_id: str,
        limit: int | None = None,
        since: float | None = None,
        until: float | None = None,
    ) -> list[dict[str, Any]]:
        """The user's memories, newest first, as MemoryEntry dicts; since/until (epoch seconds,
        until exclusive) keep those saved in that range, as session filters do."""
        index = await self.user_index(app_name, user_id)
        timed = since is not None or until is not None
        backend = self.backend_for(index=index)
        backend.require(Capability.LIST)
        records = await backend.list_memories(user_id, limit=None if timed else limit)
        if timed:
            records = [r for r in records if _in_window(r.created_at, since, until)][:limit]
        return self._entries(records, index)

    def _entries(self, records: list[MemoryRecord], index: str) -> list[dict[str, Any]]:
        """Records as MemoryEntry dicts, in their order."""
        return [e for r in records for e in to_memory_entries(r, backend=self.backend_name, index=index)]

    async def get_user_profile(self, *, app_name: str | None, user_id: str) -> str:
        """The backend's profile of the user (viking only; others raise NotSupported)."""
        backend = self.backend_for(app_name)
        backend.require(Capability.PROFILE)
        return await backend.profile(user_id)

    # --- delete ------------------------------------------------------------------------

    async def select(
        self,
        *,
        app_name: str | None,
        user_id: str,
        ids: list[str] | None = None,
        session_id: str | None = None,
        everything: bool = False,
        index: str | None = None,
        since: float | None = None,
        until: float | None = None,
    ) -> list[MemoryRecord]:
        """The user's memories a delete would remove: by id, by session, or all, narrowed to
        those saved in [since, until) (epoch seconds). Ids the index does not hold are warned
        about; when none of them is there, NotFound."""
        chosen = [bool(ids), session_id is not None, everything]
        if sum(chosen) != 1:
            raise BadInput("say what to delete: --id ID..., --session S or --all (exactly one)")
        index = index or await self.user_index(app_name, user_id)
        backend = self.backend_for(index=index)
        backend.require(Capability.LIST)
        records = await backend.list_memories(user_id)
        if ids:
            wanted = set(ids)
            records = [r for r in records if r.id in wanted]
            missing = sorted(wanted - {r.id for r in records})
            if missing and not records:
                raise NotFound(f"no memory of user {user_id!r} in index {index!r} has id {', '.join(missing)}")
            for memory_id in missing:
                if self.warn is not None:
                    self.warn(f"no memory {memory_id} for user {user_id!r} in index {index!r}")
        elif session_id is not None:
            records = [r for r in records if r.session_id == session_id]
        if since is not None or until is not None:
            records = [r for r in records if _in_window(r.created_at, since, until)]
        return records

    async def delete(
        self,
        *,
        app_name: str | None,
        user_id: str,
        records: list[MemoryRecord],
        index: str | None = None,
        everything: bool = False,
    ) -> int:
        """Delete these (selected) memories of the user, and their replay-ledger entries
        (every entry of the user's index when `everything`), so a later save resends them."""
        if not records:
            return 0
        backend = self.backend_for(app_name, index=index)
        backend.require(Capability.DELETE)
        if not backend.can(Capability.HASHES):
            self.ledger.check()  # a ledger that cannot follow the delete fails it before anything goes
        deleted = await backend.delete_memories(user_id, [r.id for r in records])
        if not backend.can(Capability.HASHES):
            self.ledger.forget(
                self._scope(backend, user_id),
                ids=[r.id for r in records],
                hashes=[r.content_hash for r in records],
                sessions=[r.session_id for r in records],
                everything=everything,
            )
        return deleted

    async def forget_plan(self, *, user_id: str, app_name: str | None = None) -> dict[str, list[MemoryRecord]]:
        """index -> the user's memories there: every index the store knows of, or the app's."""
        if app_name is not None:
            indexes = [self.index_for(app_name)]
        else:
            backend = self.backend_for(None)
            backend.require(Capability.INDEXES)
            indexes = await backend.known_indexes(user_id) or []
        plan: dict[str, list[MemoryRecord]] = {}
        for index in indexes:
            plan[index] = await self.select(app_name=None, user_id=user_id, everything=True, index=index)
        return plan

    async def close(self) -> None:
        """Release the stores' connections and the ledger."""
        for backend in self._backends.values():
            await backend.close()
        if self._ledger is not None:
            self._ledger.close()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()


SEARCH_WINDOW_CAP = 1000  # results a time-windowed search asks a backend for, at most


@dataclass
class SearchRequest:
    """One query of a batch search, and what it found (entries) or why it failed (error)."""

    query: str
    user_id: str
    app_name: str = ""
    top_k: int | None = None
    index: str = ""
    entries: list[dict[str, Any]] = field(default_factory=list)
    error: Any = None  # a VmemError

    def as_dict(self) -> dict[str, Any]:
        """One line of `ltm search --queries` output."""
        out: dict[str, Any] = {"query": self.query, "user_id": self.user_id, "app_name": self.app_name}
        out["index"] = self.index or None
        if self.error is not None:
            out["error"] = str(getattr(self.error, "message", self.error))
        else:
            out["results"] = self.entries
        return out


def _filter_score(meta: dict[str, Any]) -> float:
    """The score --min-score compares: the one shown (cosine, BM25, or a hybrid hit's fused score in [0, 1])."""
    value = meta.get("score")
    return float(value) if isinstance(value, (int, float)) else 0.0


def _in_window(stamp: Any, since: float | None, until: float | None) -> bool:
    """Whether a memory's time (ISO string or epoch) lies in [since, until); no time: no."""
    from veadk_mem.ltm.convert import epoch_of

    epoch = epoch_of(stamp)
    if epoch is None:
        return False
    return (since is None or epoch >= since) and (until is None or epoch < until)
