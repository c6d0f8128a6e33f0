"""The bytes a bulk long-term-memory command holds at once: `[tuning] batch_bytes`.

`ltm save` (sessions embedded together), `ltm import` and `ltm copy` (memories waiting for
their batch) and `ltm search --queries` (queries embedded together) cut their batches by
these bytes as well as by their row counts, so a file of a few huge records is held a batch
of bytes at a time, not a batch of rows.
"""

from __future__ import annotations

import os

from veadk_mem.errors import BadInput

BATCH_BYTES = 64 * 1024 * 1024
SMALLEST = 64 * 1024


def batch_bytes() -> int:
    """`$VMEM_BATCH_BYTES` (`[tuning] batch_bytes`) in bytes, at least 64 KiB; else 64 MiB."""
    given = os.environ.get("VMEM_BATCH_BYTES", "").strip()
    if not given:
        return BATCH_BYTES
    try:
        value = int(given)
    except ValueError:
        raise BadInput(f"VMEM_BATCH_BYTES: expected a number of bytes, got {given!r}") from None
    return max(SMALLEST, value)
