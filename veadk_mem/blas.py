"""What OpenBLAS needs to know before numpy loads it, worked out without importing numpy.

A foundation module of its own, not part of `veadk_mem.embedding`: the CLI imports it before
every command, which then imported the embedding package (its registry and the API embedders'
modules) for these few lines, whether the command embeds or not (#45 item 13)."""

from __future__ import annotations

import os
import sys
from collections.abc import MutableMapping

# Each variable vmem sets, and the variables that, when the user set any of them, already
# decide it: OpenBLAS reads OPENBLAS_NUM_THREADS, then GOTO_NUM_THREADS, then
# OMP_NUM_THREADS; MKL (numpy from conda) reads MKL_NUM_THREADS, then OMP_NUM_THREADS.
THREAD_VARIABLES = {
    "OPENBLAS_NUM_THREADS": ("OPENBLAS_NUM_THREADS", "GOTO_NUM_THREADS", "OMP_NUM_THREADS"),
    "MKL_NUM_THREADS": ("MKL_NUM_THREADS", "OMP_NUM_THREADS"),
}

# The AVX-512 subsets that OpenBLAS's SkylakeX kernels use.
SKYLAKEX_FLAGS = frozenset({"avx512f", "avx512bw", "avx512vl", "avx512dq", "avx512cd"})


def cpu_flags() -> frozenset[str]:
    """The CPU flags Linux reports (empty elsewhere): those the kernel has enabled, too."""
    try:
        with open("/proc/cpuinfo", encoding="ascii", errors="replace") as cpuinfo:
            return frozenset(next((line.split() for line in cpuinfo if line.startswith("flags")), []))
    except OSError:
        return frozenset()


def kernel_env() -> dict[str, str]:
    """OPENBLAS_CORETYPE for this CPU when OpenBLAS's own guess can be wrong, else nothing.

    OpenBLAS picks its kernels by CPU model: the 0.3.23 in numpy 1.26's wheels (the numpy
    that redisvl's pin gives on Python 3.11) takes a Sapphire Rapids for a Prescott and
    multiplies matrices 5x slower. Every AVX-512 target shares SkylakeX's float32 kernels,
    so naming it loses nothing where the guess is right.
    """
    return {"OPENBLAS_CORETYPE": "SkylakeX"} if cpu_flags() >= SKYLAKEX_FLAGS else {}


def prepare_blas(environ: MutableMapping[str, str] | None = None) -> bool:
    """Before numpy loads: one BLAS thread and OpenBLAS's kernels for this CPU, unless the user chose.

    BLAS libraries read these once, when numpy loads them, so this must run before anything
    imports numpy: the console entry point calls it first (veadk_mem/cli/__init__.py), the
    offline model again for library use. One query at a time gains nothing from BLAS
    threads and pays ~0.2 s to start them; on a machine busy with other work a save with
    BLAS threads ran 3-5x slower (bench/blas_threads.py). The offline model runs batches
    one per core on its own threads instead. A variable the user set wins. Returns False
    (and changes nothing) when numpy is already loaded, where it would only leak into
    child processes.
    """
    if "numpy" in sys.modules:
        return False
    env = os.environ if environ is None else environ
    for name, chosen_by in THREAD_VARIABLES.items():
        if not any(env.get(v) for v in chosen_by):
            env[name] = "1"
    for key, value in kernel_env().items():
        env.setdefault(key, value)
    return True
