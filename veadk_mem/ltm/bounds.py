"""The bytes a bulk long-term-memory command holds at once: `[tuning] batch_bytes`.

`ltm save` (sessions embedded together), `ltm import` and `ltm copy` (memories waiting for
their batch) and `ltm search --queries` (queries embedded together) cut their batches by
these bytes as well as by their row counts, so a file of a few huge records is held a batch
of bytes at a time, not a batch of rows.
"""

from __future__ import annotations

BATCH_BYTES = 64 * 1024 * 1024
SMALLEST = 64 * 1024


def batch_bytes() -> int:
    """`[tuning] batch_bytes` (`VMEM_BATCH_BYTES`) in bytes, at least 64 KiB."""
    from veadk_mem.config import tuning  # the settings models (pydantic): loaded once a command runs

    return max(SMALLEST, tuning().batch_bytes)
