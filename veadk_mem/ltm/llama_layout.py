"""The node documents llama-index writes for VeADK, shared by the redis and opensearch backends.

VeADK saves through llama-index: each memory string is a `Document` split into `TextNode`s,
and each node is stored with `_node_content` (the node as JSON, text removed), `_node_type`
and the document id three times (`document_id`, `doc_id`, `ref_doc_id`). Writing the same
shape lets llama-index's readers (VeADK's search) parse what vmem saved as its own.
"""

from __future__ import annotations

import hashlib
import uuid
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from veadk_mem.errors import VmemError
from veadk_mem.ltm.base import MemoryRecord, content_hash
from veadk_mem.ltm.provenance import from_fields

if TYPE_CHECKING:
    from collections.abc import Callable

    from veadk_mem.embedding.base import Embedder
    from veadk_mem.ltm.base import BackendHealth, MemoryRecord


def node_uuid(*parts: str) -> str:
    """A uuid-shaped id derived from parts: the same memory always lands on the same ids."""
    digest = hashlib.sha256("\0".join(parts).encode("utf-8")).hexdigest()
    return str(uuid.UUID(hex=digest[:32]))


def vmem_meta(memory: MemoryRecord) -> dict[str, Any]:
    """What vmem keeps of a memory's origin in the node's metadata (`vmem: 1` marks our nodes):
    the content hash, the save time and the memory's provenance, flat (strings and numbers)."""
    meta: dict[str, Any] = {
        "vmem": 1,
        "content_hash": memory.content_hash,
        "app_name": memory.app_name,
        "session_id": memory.session_id,
        "event_id": memory.event_id,
        "author": memory.author,
        "created_at": memory.created_at,
    }
    if memory.source is not None:
        meta.update(memory.source.fields())
    return meta


def llama_node(node_id: str, doc_id: str, meta: dict[str, Any], start: int, length: int) -> dict[str, Any]:
    """A llama-index TextNode as `node_to_metadata_dict(remove_text=True)` serialises it."""
    return {
        "id_": node_id,
        "embedding": None,
        "metadata": meta,
        "excluded_embed_metadata_keys": list(meta),
        "excluded_llm_metadata_keys": list(meta),
        "relationships": {"1": {"node_id": doc_id, "node_type": "4", "metadata": {}, "hash": None}},
        "metadata_template": "{key}: {value}",
        "metadata_separator": "\n",
        "text": "",
        "mimetype": "text/plain",
        "start_char_idx": start,
        "end_char_idx": start + length,
        "metadata_seperator": "\n",
        "text_template": "{metadata_str}\n\n{content}",
        "class_name": "TextNode",
    }


def node_metadata(node: dict[str, Any], doc_id: str) -> dict[str, Any]:
    """The `metadata` object llama-index stores beside a node (flat metadata + the node JSON)."""
    import json

    return {
        **node["metadata"],
        "_node_content": json.dumps(node, ensure_ascii=False),
        "_node_type": "TextNode",
        "document_id": doc_id,
        "doc_id": doc_id,
        "ref_doc_id": doc_id,
    }


@dataclass
class Doc:
    """One memory (a llama-index document) as its nodes: (start, text) per chunk."""

    doc_id: str
    keys: list[str] = field(default_factory=list)
    chunks: list[tuple[int | None, str]] = field(default_factory=list)
    meta: dict[str, Any] = field(default_factory=dict)

    def text(self) -> str:
        """The memory string, rebuilt from its chunks by their character offsets."""
        ordered = sorted(self.chunks, key=lambda c: (c[0] is None, c[0] or 0))
        out = ""
        for start, piece in ordered:
            if start is not None and start <= len(out):
                out = out[:start] + piece
            else:
                out += ("\n" if out else "") + piece
        return out


def doc_record(doc: Doc, user_id: str, index: str) -> MemoryRecord:
    """A memory record from a document's nodes and vmem's metadata (VeADK's own nodes carry none)."""

    meta = doc.meta
    text = doc.text()
    return MemoryRecord(
        text=text,
        user_id=user_id,
        id=doc.doc_id,
        app_name=str(meta.get("app_name", "")),
        session_id=str(meta.get("session_id", "")),
        event_id=str(meta.get("event_id", "")),
        author=str(meta.get("author", "")),
        content_hash=str(meta.get("content_hash") or content_hash(text)),
        created_at=meta.get("created_at"),
        metadata={"index": index, "chunks": len(doc.keys)},
        source=from_fields(meta),
    )


def doc_hashes(docs: dict[str, Doc]) -> set[str]:
    """The content hashes of these documents: vmem's from its metadata, VeADK's from their text."""

    return {str(d.meta.get("content_hash") or content_hash(d.text())) for d in docs.values()}


def check_embedder(report: BackendHealth, dims: set[int], embedder: Callable[[], Embedder]) -> BackendHealth:
    """The health report with the configured embedder, and a problem for index vectors of another dimension."""

    try:
        model = embedder()
    except VmemError as exc:
        report.notes.append(f"embedder: {exc.message}")
        return report
    report.model = model.describe()
    wrong = sorted(d for d in dims if d != model.dim)
    if wrong:
        report.problems.append(
            f"index vectors are {', '.join(str(d) for d in wrong)}-d but the embedder is {model.describe()}"
        )
    return report
