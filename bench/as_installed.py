"""Time vmem as pip installs it: with its bytecode compiled.

A wheel install compiles every module at install time, as google-adk's were. An editable
checkout only caches bytecode on first import, and not at all under PYTHONDONTWRITEBYTECODE=1
(which this machine sets), so every run would compile vmem's modules from source: about
30 ms of each whole-process figure that no installed vmem pays.
"""

from __future__ import annotations

import compileall
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def compile_vmem() -> None:
    """Write the bytecode of every vmem module, as pip does for a wheel."""
    compileall.compile_dir(str(ROOT / "veadk_mem"), quiet=1)
