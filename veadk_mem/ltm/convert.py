"""Turning memory records into ADK MemoryEntry-shaped dicts, as VeADK does; hosted payloads into records.

A record's text may be the JSON of a saved Content or a plain string. A hosted service's
payload (a `{"memories": [...]}` list, a dict carrying `text` / `abstract` / `summary` /
`content`, a string) becomes records with `records_of_payload`, in the backend that got it.
Each record becomes `{"id", "author", "timestamp", "content": {"role", "parts"},
"custom_metadata": {"score", "origin": {...}}, "source": {...} | null}` (`source`: the
provenance vmem recorded on save, `veadk_mem.ltm.provenance`).
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from veadk_mem.jsonio import try_loads
from veadk_mem.ltm.base import MemoryRecord

TEXT_KEYS = ("text", "abstract", "summary", "content", "memory", "memory_info")
META_KEYS = ("uri", "score", "category", "memory_type", "id", "created_at", "updated_at", "session_id", "event_id")


def _loads(text: str) -> Any:
    stripped = text.strip()
    if not stripped or stripped[0] not in "{[":
        return None
    return try_loads(stripped)  # a stored memory may be anything, even nested past any parser's limit


def _is_content(value: Any) -> bool:
    return isinstance(value, dict) and isinstance(value.get("parts"), list)


def part_text(part: dict[str, Any]) -> str:
    """The searchable text of one Content part (text, tool call or response, code, media name)."""
    if isinstance(part.get("text"), str):
        return str(part["text"])
    for key in ("function_call", "functionCall", "tool_call", "toolCall"):
        if isinstance(part.get(key), dict):
            call = part[key]
            return f"{call.get('name', '')}({json.dumps(call.get('args', {}), ensure_ascii=False)})"
    for key in ("function_response", "functionResponse", "tool_response", "toolResponse"):
        if isinstance(part.get(key), dict):
            resp = part[key]
            return f"{resp.get('name', '')} -> {json.dumps(resp.get('response', {}), ensure_ascii=False)}"
    for key in ("executable_code", "executableCode"):
        if isinstance(part.get(key), dict):
            return str(part[key].get("code", ""))
    for key in ("code_execution_result", "codeExecutionResult"):
        if isinstance(part.get(key), dict):
            return str(part[key].get("output", ""))
    return ""


def searchable_text(memory: str) -> str:
    """What to embed for a memory string: the text of a saved Content, else the string itself.

    The JSON scaffolding of `{"role": "user", "parts": [{"text": ...}]}` carries no meaning
    and would use up the model's input window.
    """
    value = _loads(memory)
    if _is_content(value):
        texts = [part_text(p) for p in value["parts"] if isinstance(p, dict)]
        joined = "\n".join(t for t in texts if t)
        return joined or memory
    return memory


def with_text(memory: str, text: str) -> str:
    """The memory string `memory` with its text replaced by `text` (`ltm edit`): a saved Content
    keeps its shape (role, author, key order) with one text part, as VeADK saves text; another
    string, or a `text` that is itself a Content's JSON, is taken as it is."""
    value = _loads(memory)
    if not _is_content(value) or _is_content(_loads(text)):
        return text
    return json.dumps({**value, "parts": [{"text": text}]}, ensure_ascii=False)


def _text_of(value: dict[str, Any]) -> str | None:
    for key in TEXT_KEYS:
        item = value.get(key)
        if isinstance(item, str) and item:
            return item
    return None


def _iso(value: Any) -> str | None:
    if value is None or value == "":
        return None
    if isinstance(value, (int, float)):
        return datetime.fromtimestamp(float(value), tz=UTC).isoformat().replace("+00:00", "Z")
    return str(value)


# Which ranking produced a search score (cosine, bm25, fused) and, for a fused one, the scores
# of each ranking (None: not found by it): next to `score` in a MemoryEntry's custom_metadata.
SCORE_KEYS = ("score_kind", "vector_score", "keyword_score")


def _round(value: Any) -> Any:
    return round(value, 6) if isinstance(value, float) else value


def _entry(
    *,
    content: dict[str, Any],
    author: str,
    memory_id: str | None,
    timestamp: Any,
    score: float | None,
    origin: dict[str, Any],
) -> dict[str, Any]:
    return {
        "id": memory_id or None,
        "author": author,
        "timestamp": _iso(timestamp),
        "content": content,
        "custom_metadata": {"score": None if score is None else round(float(score), 6), "origin": origin},
    }


def _content_from_string(text: str) -> list[dict[str, Any]]:
    """Contents held by one memory string (several for a {"memories": [...]} payload)."""
    value = _loads(text)
    if _is_content(value):
        content = {"role": value.get("role") or "user", "parts": value["parts"]}
        return [content]
    if isinstance(value, dict) and isinstance(value.get("memories"), list):
        out: list[dict[str, Any]] = []
        for item in value["memories"]:
            if isinstance(item, dict):
                inner = _text_of(item)
                if inner is not None:
                    out.extend(_content_from_string(inner))
            elif isinstance(item, str):
                out.extend(_content_from_string(item))
        return out
    if isinstance(value, dict):
        inner = _text_of(value)
        if inner is not None:
            return _content_from_string(inner)
    return [{"role": "user", "parts": [{"text": text}]}]


def records_of_payload(payload: dict[str, Any] | str, user_id: str) -> list[MemoryRecord]:
    """A hosted service's search payload as records: a {"memories": [...]} list gives several,
    a dict its text and what it says of the memory's origin, a string itself."""
    if isinstance(payload, str):
        return [MemoryRecord(text=payload, user_id=user_id, origin={})]
    if isinstance(payload.get("memories"), list):
        return [
            record
            for item in payload["memories"]
            if isinstance(item, (dict, str))
            for record in records_of_payload(item, user_id)
        ]
    text = _text_of(payload)
    if text is None:
        return []
    raw_score = payload.get("score")
    return [
        MemoryRecord(
            text=text,
            user_id=user_id,
            author=str(payload.get("author") or ""),
            id=str(payload["id"]) if payload.get("id") is not None else "",
            created_at=epoch_of(payload.get("created_at") or payload.get("timestamp")),
            score=float(raw_score) if isinstance(raw_score, (int, float)) else None,
            origin={k: payload[k] for k in META_KEYS if k in payload},
        )
    ]


def to_memory_entries(record: MemoryRecord, *, backend: str, index: str) -> list[dict[str, Any]]:
    """One record as MemoryEntry dicts (a text holding a {"memories": [...]} list gives several)."""
    if record.origin is not None:
        origin = {"backend": backend, "index": index, **record.origin}
    else:
        origin = {
            "backend": backend,
            "index": index,
            "user_id": record.user_id,
            "app_name": record.app_name,
            "session_id": record.session_id,
            "event_id": record.event_id,
            **{k: v for k, v in record.metadata.items() if v not in (None, "") and k not in SCORE_KEYS},
        }
    found = [
        _entry(
            content=content,
            author=record.author or "user",
            memory_id=record.id,
            timestamp=record.created_at,
            score=record.score,
            origin=origin,
        )
        for content in _content_from_string(record.text)
    ]
    source = record.source.to_json() if record.source is not None else None
    for entry in found:  # vmem's provenance (None: not recorded), beside ADK's MemoryEntry keys
        entry["source"] = source
    scores = {k: _round(record.metadata[k]) for k in SCORE_KEYS if k in record.metadata}
    for entry in found:
        entry["custom_metadata"].update(scores)
    return found


def entry_text(entry: dict[str, Any]) -> str:
    """The readable text of a MemoryEntry dict, for tables."""
    parts = entry.get("content", {}).get("parts") or []
    return "\n".join(t for t in (part_text(p) for p in parts if isinstance(p, dict)) if t)


def epoch_of(value: Any) -> float | None:
    """Epoch seconds from a number or an ISO-8601 string (a trailing Z included); None otherwise.

    Hosted services give a memory's time in either form.
    """
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str) and value:
        try:
            return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
        except ValueError:
            return None
    return None
