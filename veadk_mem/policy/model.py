"""The policy model VeADK defines (MemoryAutoSavePolicy), its presets, and the resolved policy vmem applies."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, Field

MemoryEventType = Literal[
    "text",
    "thought",
    "function_call",
    "function_response",
    "tool_call",
    "tool_response",
    "media",
    "executable_code",
    "code_execution_result",
    "transcription",
    "error",
]
MemoryRole = Literal["user", "assistant", "system"]
MemoryAutoSavePreset = Literal["default", "all", "custom"]

EVENT_TYPES: tuple[str, ...] = MemoryEventType.__args__  # type: ignore[attr-defined]
ROLES: tuple[str, ...] = MemoryRole.__args__  # type: ignore[attr-defined]
PRESETS: tuple[str, ...] = MemoryAutoSavePreset.__args__  # type: ignore[attr-defined]
TEXTUAL = frozenset({"text", "thought"})

Warn = Callable[[str], None]


class MemoryAutoSavePolicy(BaseModel):
    """Controls which events automatic long-term-memory saving persists (VeADK's model)."""

    preset: MemoryAutoSavePreset = "default"
    include_roles: list[MemoryRole] | None = None
    exclude_roles: list[MemoryRole] = Field(default_factory=list)
    include_authors: list[str] | None = None
    exclude_authors: list[str] = Field(default_factory=list)
    include_event_types: list[MemoryEventType] | None = None
    exclude_event_types: list[MemoryEventType] = Field(default_factory=list)
    text_only: bool = True
    include_thought: bool = False
    include_empty_text: bool = False


POLICY_FIELDS: tuple[str, ...] = tuple(MemoryAutoSavePolicy.model_fields)


def preset_policy(preset: str, *, include_assistant: bool = False) -> MemoryAutoSavePolicy:
    """The base policy of a preset; any string other than `all` / `custom` means `default`, as in VeADK."""
    if preset == "all":
        return MemoryAutoSavePolicy(
            preset="all",
            include_roles=["user", "assistant", "system"],
            include_event_types=None,
            text_only=False,
            include_thought=True,
            include_empty_text=True,
        )
    if preset == "custom":
        return MemoryAutoSavePolicy(preset="custom")
    return MemoryAutoSavePolicy(
        preset="default",
        include_roles=["user", "assistant"] if include_assistant else ["user"],
        include_event_types=["text"],
        text_only=True,
        include_thought=False,
        include_empty_text=False,
    )


@dataclass(frozen=True)
class ResolvedPolicy:
    """The effective policy, which fields an override set, and where the policy came from."""

    policy: MemoryAutoSavePolicy
    overridden: frozenset[str] = frozenset()
    origin: str = "preset default"
    include_assistant: bool = False

    def to_dict(self) -> dict[str, Any]:
        """Every field of the effective policy, as JSON data."""
        return self.policy.model_dump(mode="json")

    def source_of(self, name: str) -> str:
        """`override` for a field the policy set explicitly, else `preset <name>`; the preset itself: the origin."""
        if name == "preset":
            return self.origin
        return "override" if name in self.overridden else f"preset {self.policy.preset}"

    def describe(self) -> dict[str, Any]:
        """The `vmem policy show --json` object: origin, every field, and each field's source."""
        return {
            "origin": self.origin,
            "include_assistant": self.include_assistant,
            "policy": self.to_dict(),
            "sources": {name: self.source_of(name) for name in POLICY_FIELDS},
        }
