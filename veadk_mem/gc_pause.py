"""Pausing the cyclic garbage collector around bulk object building (no heavy imports).

A second path: `[tuning] fast_paths` off leaves the collector running.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def bulk_objects() -> Iterator[None]:
    """Pause the cyclic garbage collector while building many small acyclic objects.

    Parsing a 20,000-event session allocates a few hundred thousand objects, and the
    collector's repeated full passes over them cost more than the work itself (a
    20,000-event get: 0.9 s with, 0.4 s without; `policy test`: 1.9 s -> 0.65 s). A long
    session list is the same in small: a summary and its state dicts per session. An
    import keeps a batch alive while it reads the next: with the collector running, its
    collections were a third of the import's time. Reference counting still frees
    everything; what cyclic garbage the layers below make, `collect_young` collects.
    """
    from veadk_mem.config import tuning  # see tests/test_import_graph.DEFERRED

    enabled = gc.isenabled()
    if not tuning().fast_paths:  # the plain path: the collector runs as everywhere else
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def collect_young() -> None:
    """Between the batches of a long `bulk_objects` run: collect the young generations' cycles."""
    if not gc.isenabled():
        gc.collect(1)
