"""VeADK's auto-save memory policy: which session events become long-term memories, and why.

`memory_strings` returns exactly the list of strings VeADK 1.1.x's
`LongTermMemory.add_session_to_memory` hands to a backend, and `evaluate` explains the
decision for every event. The package along its seams: `model` (the policy and its
presets), `resolve` (`--policy`, the configuration), `genai` (google-genai's dump of a
Content, replayed without google-genai), `decision` (one event) and `dryrun` (sessions).
"""

from __future__ import annotations

from veadk_mem.policy.decision import Decision, decide, evaluate, memory_gist, memory_strings, part_types
from veadk_mem.policy.dryrun import DryRun, dry_run
from veadk_mem.policy.genai import GENAI_SCHEMA, decode_base64, genai_dump, urlsafe_base64
from veadk_mem.policy.model import (
    EVENT_TYPES,
    POLICY_FIELDS,
    PRESETS,
    ROLES,
    MemoryAutoSavePolicy,
    MemoryAutoSavePreset,
    MemoryEventType,
    MemoryRole,
    ResolvedPolicy,
    Warn,
    preset_policy,
)
from veadk_mem.policy.resolve import configured_policy, policy_from_mapping, resolve_policy

__all__ = [
    "EVENT_TYPES",
    "GENAI_SCHEMA",
    "POLICY_FIELDS",
    "PRESETS",
    "ROLES",
    "Decision",
    "DryRun",
    "MemoryAutoSavePolicy",
    "MemoryAutoSavePreset",
    "MemoryEventType",
    "MemoryRole",
    "ResolvedPolicy",
    "Warn",
    "configured_policy",
    "decide",
    "decode_base64",
    "dry_run",
    "evaluate",
    "genai_dump",
    "memory_gist",
    "memory_strings",
    "part_types",
    "policy_from_mapping",
    "preset_policy",
    "resolve_policy",
    "urlsafe_base64",
]
