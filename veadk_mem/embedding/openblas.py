"""What OpenBLAS needs to know before numpy loads it, worked out without importing numpy."""

from __future__ import annotations

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
