"""The decision for one event: saved (with the memory string VeADK would hand its backend) or dropped, and why."""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from veadk_mem.events import Event
from veadk_mem.policy.genai import genai_dump
from veadk_mem.policy.model import TEXTUAL, MemoryAutoSavePolicy, ResolvedPolicy, Warn


@dataclass
class Decision:
    """What VeADK does with one event: saved (with its memory string) or dropped, and why."""

    event: Event
    saved: bool
    reason: str
    memory: str | None
    role: str
    types: list[str] = field(default_factory=list)
    session_id: str = ""

    def to_dict(self) -> dict[str, Any]:
        """The event's entry in `vmem policy test --json`."""
        return {
            "id": self.event.id,
            "author": self.event.author,
            "role": self.role,
            "types": self.types,
            "decision": "saved" if self.saved else "dropped",
            "reason": self.reason,
            "memory": self.memory,
        }


def memory_gist(memory: str | None) -> str:
    """A one-line preview of a memory string for people: the part texts, every other part as
    [kind] (a function call, media, an event type, a thought), whitespace runs made one space."""
    if memory is None:
        return ""
    bits: list[str] = []
    for part in json.loads(memory).get("parts", []):
        meta = part.get("part_metadata") or {}
        tags = [f"[{k}]" for k in part if k not in ("text", "thought", "thought_signature", "part_metadata")]
        if "event_type" in meta:
            tags.append(f"[{meta['event_type']}]")
        if part.get("thought"):
            tags.append("[thought]")
        bits.append(" ".join([*tags, *([part["text"]] if "text" in part else [])]))
    return " ".join(" | ".join(bits).split()) or "(no parts)"


def _names(values: Iterable[str] | None) -> str:
    return "[" + ", ".join(values or []) + "]"


def part_types(part: dict[str, Any]) -> list[str]:
    """The event types of one genai-dumped part, in VeADK's order."""
    found: list[str] = []
    if part.get("text"):
        found.append("thought" if part.get("thought") else "text")
    for name in ("function_call", "function_response", "tool_call", "tool_response"):
        if part.get(name) is not None:
            found.append(name)
    if part.get("inline_data") is not None or part.get("file_data") is not None:
        found.append("media")
    for name in ("executable_code", "code_execution_result"):
        if part.get(name) is not None:
            found.append(name)
    return found


def _role(event: Event, message: dict[str, Any]) -> str:
    role = message.get("role")
    if event.author == "user" or role == "user":
        return "user"
    if role == "system":
        return "system"
    return "assistant"


def _role_refusal(role: str, author: str, p: MemoryAutoSavePolicy) -> str | None:
    if p.include_roles is not None and role not in p.include_roles:
        return f"role {role} not in include_roles {_names(p.include_roles)}"
    if role in p.exclude_roles:
        return f"role {role} in exclude_roles {_names(p.exclude_roles)}"
    if p.include_authors is not None and author not in p.include_authors:
        return f"author {author!r} not in include_authors {_names(p.include_authors)}"
    if author in p.exclude_authors:
        return f"author {author!r} in exclude_authors {_names(p.exclude_authors)}"
    return None


def _type_refusal(types: list[str], p: MemoryAutoSavePolicy) -> str | None:
    if not types:
        return None if p.include_empty_text else "no content and include_empty_text is off"
    left = [t for t in types if t not in p.exclude_event_types]
    if not left:
        return f"event types {_names(types)} all in exclude_event_types {_names(p.exclude_event_types)}"
    if p.include_event_types is not None and not set(left) & set(p.include_event_types):
        return f"event types {_names(left)} not in include_event_types {_names(p.include_event_types)}"
    return None


def _part_refusal(types: list[str], p: MemoryAutoSavePolicy) -> str | None:
    """Why a part is left out of the memory, or None when it is kept."""
    if not types:
        return "empty part (no text, data or call)"
    if p.text_only and p.include_event_types is None and not set(types) <= TEXTUAL:
        return f"{'+'.join(types)} part: text_only keeps only text and thought parts"
    excluded = [t for t in types if t in p.exclude_event_types]
    if excluded:
        return f"{'+'.join(types)} part: {', '.join(excluded)} in exclude_event_types"
    if p.include_event_types is not None and not set(types) & set(p.include_event_types):
        return f"{'+'.join(types)} part: not in include_event_types {_names(p.include_event_types)}"
    if types == ["thought"] and not p.include_thought:
        return "thought part: include_thought is off"
    return None


def _metadata_refusal(event_type: str, p: MemoryAutoSavePolicy) -> str | None:
    """Why a transcription or error of the event is not appended as a part, or None when it is."""
    if p.text_only and p.include_event_types is None and event_type not in TEXTUAL:
        return f"{event_type}: text_only keeps only text and thought parts"
    if event_type in p.exclude_event_types:
        return f"{event_type}: in exclude_event_types"
    if p.include_event_types is not None and event_type not in p.include_event_types:
        return f"{event_type}: not in include_event_types {_names(p.include_event_types)}"
    return None


def _sanitize(part: dict[str, Any]) -> dict[str, Any]:
    blob = part.get("inline_data")
    if isinstance(blob, dict) and "data" in blob:
        blob = dict(blob)
        data = blob.pop("data")
        blob["data_size"] = len(str(data))
        blob["data_omitted"] = True
        part = {**part, "inline_data": blob}
    return part


def _metadata_parts(
    event: Event, p: MemoryAutoSavePolicy, unknown: list[str], dropped: list[str]
) -> list[dict[str, Any]]:
    """Transcriptions and the error as text parts, when the policy allows their type."""
    out: list[dict[str, Any]] = []
    names = [n for n in ("input_transcription", "output_transcription") if getattr(event, n) is not None]
    if names:
        why = _metadata_refusal("transcription", p)
        if why:
            dropped.append(why)
        for name in [] if why else names:
            dumped = genai_dump(getattr(event, name), "Transcription", name, unknown)
            out.append({"text": json.dumps(dumped, ensure_ascii=False), "part_metadata": {"event_type": name}})
    if event.error_code or event.error_message:
        why = _metadata_refusal("error", p)
        if why:
            dropped.append(why)
        else:
            text = ": ".join(str(v) for v in (event.error_code, event.error_message) if v)
            out.append({"text": text, "part_metadata": {"event_type": "error"}})
    return out


def _summary(reasons: list[str]) -> str:
    counts: dict[str, int] = {}
    for reason in reasons:
        counts[reason] = counts.get(reason, 0) + 1
    return "; ".join(f"{r} (x{n})" if n > 1 else r for r, n in counts.items())


def decide(event: Event, policy: ResolvedPolicy, unknown: list[str] | None = None) -> Decision:
    """The decision VeADK's `_convert_event_to_memory_message` takes for one event, with a reason."""
    p = policy.policy
    unknown = [] if unknown is None else unknown
    where = f"event {event.id or '?'}: content"
    message = genai_dump(event.content, "Content", where, unknown) if event.content is not None else {"parts": []}
    role = _role(event, message)
    author = str(event.author or "")
    parts: list[dict[str, Any]] = message.get("parts") or []
    per_part = [part_types(part) for part in parts]
    types: list[str] = list(dict.fromkeys(t for found in per_part for t in found))
    if event.input_transcription is not None or event.output_transcription is not None:
        types.append("transcription")
    if event.error_code or event.error_message:
        types.append("error")

    refusal = _role_refusal(role, author, p) or _type_refusal(types, p)
    if refusal:
        return Decision(event, False, refusal, None, role, types)

    kept: list[dict[str, Any]] = []
    dropped: list[str] = []
    stripped = 0
    for part, found in zip(parts, per_part, strict=True):
        why = _part_refusal(found, p)
        if why:
            dropped.append(why)
            continue
        if "thought" in found and not p.include_thought:
            part = {k: v for k, v in part.items() if k not in ("thought", "thought_signature")}
            stripped += 1
        kept.append(_sanitize(part))
    kept.extend(_metadata_parts(event, p, unknown, dropped))
    if not kept and not p.include_empty_text:
        if dropped and all(d == "thought part: include_thought is off" for d in dropped):
            reason = "only thought parts and include_thought is off"
        else:
            reason = "no part left: " + (_summary(dropped) or "no content")
        return Decision(event, False, reason, None, role, types)

    message["role"] = role
    message["parts"] = kept
    if author and p.preset != "default":
        message["author"] = author
    notes = [f"role {role}, types {_names(types)} allowed"]
    if dropped:
        notes.append("dropped " + _summary(dropped))
    if stripped:
        notes.append("thought flag removed from a mixed part" + (f" (x{stripped})" if stripped > 1 else ""))
    if not kept:
        notes.append("kept empty: include_empty_text is on")
    return Decision(event, True, "; ".join(notes), json.dumps(message, ensure_ascii=False), role, types)


def evaluate(events: Iterable[Event], policy: ResolvedPolicy, *, warn: Warn | None = None) -> Iterator[Decision]:
    """One decision per event, in order; `warn` hears once about content fields google-genai does not know."""
    warned: set[str] = set()
    for event in events:
        unknown: list[str] = []
        decision = decide(event, policy, unknown)
        if unknown and warn is not None:
            for path in unknown:
                key = path.rsplit(".", 1)[-1]
                if key not in warned:
                    warned.add(key)
                    warn(f"{path}: not a google-genai field; left out of the memory (VeADK would refuse the event)")
        yield decision


def memory_strings(events: Iterable[Event], policy: ResolvedPolicy) -> list[str]:
    """Exactly the list of strings VeADK hands to the long-term-memory backend for these events."""
    return [d.memory for d in evaluate(events, policy) if d.memory is not None]
