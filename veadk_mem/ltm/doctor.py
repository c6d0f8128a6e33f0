"""The `vmem doctor` check of long-term memory: can the configured backend be opened and used."""

from __future__ import annotations

import time

from veadk_mem.config import VmemSettings
from veadk_mem.doctor import Check
from veadk_mem.errors import VmemError


async def check_ltm(settings: VmemSettings) -> Check:
    """Open the configured backend on its default index; for `local`, report its size and model."""
    from veadk_mem.ltm.facade import LongTermMemory

    name = f"long_term_memory ({settings.long_term_memory.backend})"
    started = time.perf_counter()
    ltm = LongTermMemory.from_settings(settings)
    try:
        backend = ltm.backend_for(None)
        stats = getattr(backend, "stats", None)
        missing = getattr(backend, "_missing", None)
        if missing is not None and missing():
            return Check(name, "ok", f"{getattr(backend, 'path', '')}: no store yet (created by the first save)")
        if stats is None:
            return Check(name, "ok", f"index {backend.index}")
        info = stats()
        models = ", ".join(info["models"]) or "no vectors yet"
        where = getattr(backend, "path", "")
        took = (time.perf_counter() - started) * 1000
        return Check(
            name,
            "ok",
            f"{where}: {info['memories']} memories of {info['users']} users in {info['indexes']} indexes, "
            f"{models} ({took:.0f} ms)",
        )
    except VmemError as exc:
        return Check(name, "skip" if exc.exit_code == 4 else "fail", exc.message)
    except Exception as exc:  # a broken store is a failed check, never a crash
        return Check(name, "fail", f"{type(exc).__name__}: {str(exc)[:200]}")
    finally:
        await ltm.close()
