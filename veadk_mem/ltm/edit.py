"""`vmem ltm edit`: replace a wrong memory's text (issue #42 item 5).

A store that keeps the text it is sent (local, redis, opensearch, the in-memory store, mem0
with its inference off: `Capability.EDIT`) gets the corrected memory by delete-and-add
through the facade's own paths: the new text (a saved Content keeps its JSON shape, its text replaced) is embedded as
any save's, gets its own content hash and id, keeps the old memory's source (provenance) and
saved-at, and the replay ledger follows where the store uses one. The new memory is saved
before the old one is deleted, so a failure between the two leaves both, never neither, and its
one line says so and names the command that finishes the edit. A
service that rewrites what it is sent (viking, openviking, tos_context, mem0 inferring) cannot
be corrected this way: NotSupported (exit 4) names it.
"""

from __future__ import annotations

import dataclasses
import shlex
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from veadk_mem.errors import BadInput, NotSupported, VmemError
from veadk_mem.ltm.base import Capability, MemoryRecord
from veadk_mem.ltm.convert import with_text
from veadk_mem.ltm.lookup import find_memory
from veadk_mem.ltm.registry import load_backend

if TYPE_CHECKING:
    from veadk_mem.ltm.facade import LongTermMemory


@dataclass
class Edit:
    """One memory's correction: the old record, the new one, and (once done) the new id."""

    index: str
    user_id: str
    old: MemoryRecord
    new: MemoryRecord
    dry_run: bool
    new_id: str = ""
    already_held: bool = False  # the store held the new text already: the old memory only went

    def to_json(self) -> dict[str, Any]:
        """`ltm edit --json`: vmem's own report, snake_case."""
        return {
            "dry_run": self.dry_run,
            "index": self.index,
            "user_id": self.user_id,
            "id": self.old.id,
            "new_id": self.new_id or None,
            "old_text": self.old.text,
            "new_text": self.new.text,
            "old_content_hash": self.old.content_hash,
            "new_content_hash": self.new.content_hash,
            "already_held": self.already_held,
        }


async def edit_memory(
    ltm: LongTermMemory,
    *,
    memory_id: str,
    text: str,
    user_id: str | None = None,
    app_name: str | None = None,
    dry_run: bool = False,
) -> Edit:
    """Replace memory `memory_id`'s text with `text` (see the module's docstring)."""
    if not text.strip():
        raise BadInput("--text: empty; give the memory's corrected text")
    try:
        declared: frozenset[Capability] = getattr(load_backend(ltm.backend_name), "capabilities", frozenset())
    except BadInput:  # a store handed to the facade under a name of its own
        declared = ltm.backend_for(app_name).capabilities
    if Capability.EDIT not in declared:  # said before the store is built: it may need credentials
        raise _cannot(ltm.backend_name)
    if not ltm.backend_for(app_name).can(Capability.EDIT):  # mem0 with its inference on
        raise _cannot(ltm.backend_name, hint=INFER_HINT if ltm.backend_name == "mem0" else None)
    index, user_id, old = await find_memory(ltm, memory_id, user_id=user_id, app_name=app_name)
    new = MemoryRecord(
        text=with_text(old.text, text),
        user_id=user_id,
        app_name=old.app_name,
        session_id=old.session_id,
        event_id=old.event_id,
        author=old.author,
        source=dataclasses.replace(old.source) if old.source is not None else None,
    )
    if new.content_hash == old.content_hash:
        raise BadInput(f"--text: memory {memory_id} already holds this text; nothing to change")
    edit = Edit(index=index, user_id=user_id, old=old, new=new, dry_run=dry_run)
    if dry_run:
        return edit
    if await ltm.new_records(user_id, [new], index):
        (edit.new_id,) = await ltm.save_records(user_id, [new], index)
    else:
        edit.already_held = True
    try:
        await ltm.delete(app_name=app_name, user_id=user_id, records=[old], index=index)
    except VmemError as exc:
        _say_both_are_there(exc, edit)
        raise
    return edit


def _say_both_are_there(exc: VmemError, edit: Edit) -> None:
    """`exc`, raised by the old memory's delete after the corrected one was saved, made one line saying
    so: both texts are in the store, and the command that finishes the edit; its `committed` (what the
    history records) names the memory saved."""
    finish = shlex.join(
        ["vmem", "ltm", "delete", "--user", edit.user_id, "--app", edit.index, "--id", edit.old.id, "--yes"]
    )
    saved = f"saved as memory {edit.new_id}" if edit.new_id else "already held by the store"
    exc.message = (
        f"memory {edit.old.id} was not replaced: the corrected text is {saved}, but deleting the old one failed "
        f"({exc.message}); both texts are in index {edit.index!r} now: to finish the edit run {finish}"
    )
    exc.args = (exc.message,)
    exc.hint = None  # one line: the store's own hint is about reaching it, not about this state
    if edit.new_id:
        exc.committed = {"memories": 1, "ids": [edit.new_id]}


INFER_HINT = "with [database.mem0] infer = false (DATABASE_MEM0_INFER=false) Mem0 keeps text verbatim"


def _cannot(backend: str, hint: str | None = None) -> NotSupported:
    return NotSupported(
        f"the {backend} backend cannot edit a memory: its service rewrites or infers what it is sent",
        hint=hint or "delete the memory (vmem ltm delete --id) and save the corrected session instead",
    )
