"""`vmem ltm reembed`: move a store's vectors to another model in place, where the store records its model.

The model is a property of an index (all its users' vectors are of one model, so they compare),
hence the unit moved is an index: `--app` names one, `--user` finds the index holding that
user's memories (refused when it holds other users' too), and neither means the configured
index, or every index of the store when none is configured. The store then records the new
model, so `provider = "auto"` keeps using it. Only the local store can do it
(`Capability.REEMBED`); others exit 4.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from veadk_mem.embedding import E5_NAME, E5_VECTOR_NAME, MINILM_NAME, create_embedder
from veadk_mem.errors import BadInput, NotFound
from veadk_mem.ltm.base import Capability

if TYPE_CHECKING:
    from veadk_mem.config import VmemSettings
    from veadk_mem.embedding.base import Embedder
    from veadk_mem.ltm.backends.local_reembed import ReembedReport, StopSwitch
    from veadk_mem.ltm.facade import LongTermMemory

MODEL_NAMES = (E5_NAME, MINILM_NAME)


def target_embedder(settings: VmemSettings, model: str | None, notice: Callable[[str], None] | None) -> Embedder:
    """The embedder to move to: an offline model by name or path, else the configured one (`auto`
    resolved as for a new store)."""
    configured = settings.model.embedding
    if model is None:
        return create_embedder(configured, notice=notice)
    if model in (E5_NAME, E5_VECTOR_NAME):
        local = E5_NAME
    elif model == MINILM_NAME:
        local = ""
    elif Path(model).exists():
        local = model
    else:
        raise BadInput(
            f"--model: unknown offline model {model!r}: use {' or '.join(MODEL_NAMES)}, "
            "a model folder or an e5 model file (or leave it out for the configured model)"
        )
    return create_embedder(configured.model_copy(update={"local_model": local}), "local")


@dataclass
class ReembedJob:
    """A planned re-embed: the store, the target embedder and the report of what moves."""

    backend: Any  # the local backend (Capability.REEMBED)
    embedder: Embedder
    report: ReembedReport

    @property
    def to_embed(self) -> int:
        """Memories this run will embed, at most (those staged by an interrupted run are not)."""
        return sum(i.memories for i in self.report.indexes)

    def run(
        self,
        *,
        batch_bytes: int,
        progress: Callable[[int], None] | None = None,
        stop: StopSwitch | None = None,
    ) -> ReembedReport:
        """Do it (blocking: run it in a worker thread); `stop.request()` ends it before the swap
        commits (`local_reembed.Stopped`), the store unchanged."""
        done: ReembedReport = self.backend.reembed(
            self.report, self.embedder, batch_bytes=batch_bytes, progress=progress, stop=stop
        )
        return done


async def plan_reembed(
    ltm: LongTermMemory,
    *,
    user_id: str | None,
    app_name: str | None,
    model: str | None,
) -> ReembedJob:
    """Which indexes move to which model; NotSupported (exit 4) for a store that cannot."""
    ltm.backend_for(None).require(Capability.REEMBED)  # before loading a model
    indexes = await _indexes(ltm, user_id, app_name)
    backend: Any = ltm.backend_for(index=indexes[0] if indexes else None)  # the local backend (REEMBED)
    embedder = target_embedder(ltm.settings, model, ltm.notice)
    report = backend.reembed_plan(indexes, embedder)
    if indexes and not report.indexes and not report.unchanged:
        raise NotFound(f"no memories in index {indexes[0]!r} of {backend.target}")
    return ReembedJob(backend, embedder, report)


async def _indexes(ltm: LongTermMemory, user_id: str | None, app_name: str | None) -> list[str] | None:
    """The indexes to move: the app's, the user's (alone in it), the configured one, or all (None)."""
    if user_id is None:
        if app_name or ltm.index or ltm.backend_config.get("index"):
            return [ltm.index_for(app_name)]
        return None
    index = await ltm.user_index(app_name, user_id)
    backend = ltm.backend_for(index=index)
    users = {u for i, u in await backend.scopes() if i == index}
    if user_id not in users:
        raise NotFound(f"user {user_id!r} has no memories in index {index!r}")
    others = len(users) - 1
    if others:
        raise BadInput(
            f"index {index!r} holds memories of {user_id!r} and {others} other users, all of one model: "
            "re-embed the whole index",
            hint=f"vmem ltm reembed --app {index} (without --user)",
        )
    return [index]
