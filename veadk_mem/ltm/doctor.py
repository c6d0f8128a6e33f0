"""The `vmem doctor` check of long-term memory, through the backend contract's `health()`.

Each backend reports where it is, its server version, whether the index exists, how many
memories it holds and its vector dimension against the configured embedder; the check
fails on any problem it reports or on a VmemError (exit code 4, not supported, skips).
This module imports nothing of `veadk_mem.ops.doctor`, which calls it.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from veadk_mem.check_outcome import Check
from veadk_mem.errors import MissingSdk, VmemError
from veadk_mem.failure import one_line

if TYPE_CHECKING:
    from veadk_mem.config import VmemSettings
    from veadk_mem.ltm.base import BackendHealth


def describe(health: BackendHealth, took_ms: float, index: str = "") -> str:
    """One line for a person: target, then what the backend could tell, then its problems."""
    parts: list[str] = []
    if health.version:
        parts.append(health.version)
    if not health.exists:
        parts.append(f"index {index} not created yet" if index else "index not created yet")
    if health.memories is not None:
        parts.append(f"{health.memories} memories")
    if health.dimension is not None:
        parts.append(f"{health.dimension}-d vectors")
    if health.model:
        parts.append(f"embedder {health.model}")
    parts.extend(health.notes)
    parts.extend(f"problem: {p}" for p in health.problems)
    return f"{health.target}: {', '.join(parts) or 'reachable'} ({took_ms:.0f} ms)"


async def check_ltm(settings: VmemSettings) -> Check:
    """Open the configured backend on its default index and ask it for its health."""
    from veadk_mem.ltm.facade import LongTermMemory

    name = f"long_term_memory ({settings.long_term_memory.backend})"
    started = time.perf_counter()
    ltm = LongTermMemory.from_settings(settings)
    index = ""
    try:
        backend = ltm.backend_for(None)
        index = backend.index
        health = await backend.health(user_id=None)
    except MissingSdk as exc:  # the configured store cannot be used at all: fail, exit 4, with the install line
        return Check(name, "fail", f"{exc.message}; {exc.hint}" if exc.hint else exc.message, exit_code=4)
    except VmemError as exc:
        return Check(name, "skip" if exc.exit_code == 4 else "fail", exc.message)
    except Exception as exc:  # a broken store is a failed check, never a crash
        return Check(name, "fail", f"{type(exc).__name__}: {one_line(exc)}")
    finally:
        await ltm.close()
    took = (time.perf_counter() - started) * 1000
    facts = {
        "index": index,
        "index_exists": health.exists,
        "version": health.version or None,
        "counts": {"memories": health.memories},
        "dimension": health.dimension,
        "model": health.model or None,
        "notes": list(health.notes),
        "problems": list(health.problems),
    }
    status = "fail" if health.problems else "ok"
    return Check(name, status, describe(health, took, index), store=health.target, latency_ms=took, facts=facts)
