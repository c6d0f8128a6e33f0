"""BLAS threading is set before numpy loads, on every path of the installed `vmem`.

OpenBLAS (and MKL) read their thread variables once, when numpy loads them; set later,
they do nothing, and a save on a busy machine ran 3-5x slower with a BLAS thread per core
(bench/blas_threads.py). These tests run the installed console script with a
`sitecustomize` that notes the environment at the moment numpy is imported.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
WATCHED = ("OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "OMP_NUM_THREADS", "GOTO_NUM_THREADS")

# Imported by Python at start-up (site.py) from PYTHONPATH: an audit hook that records the
# thread variables when `numpy` is first imported, and writes them out at exit.
SITECUSTOMIZE = """
import atexit, json, os, sys

_seen = {}

def _hook(event, args):
    if event == "import" and args[0] == "numpy" and "numpy" not in _seen:
        _seen["numpy"] = {k: os.environ.get(k) for k in %r}

sys.addaudithook(_hook)
atexit.register(lambda: open(os.environ["VMEM_TEST_NUMPY_ENV"], "w").write(json.dumps(_seen)))
"""


def _installed_vmem() -> str:
    found = shutil.which("vmem", path=str(Path(sys.executable).parent))
    assert found, "the vmem console script is not installed next to this Python"
    return found


def _env_when_numpy_loaded(tmp_path: Path, args: list[str], **given: str) -> dict[str, str | None]:
    """Run `args` with a clean BLAS environment plus `given`; the thread variables numpy loaded with."""
    hook = tmp_path / "hook"
    hook.mkdir(exist_ok=True)
    (hook / "sitecustomize.py").write_text(SITECUSTOMIZE % (WATCHED,))
    seen = tmp_path / "seen.json"
    env = {k: v for k, v in os.environ.items() if k not in WATCHED}
    env.update(given)
    env["PYTHONPATH"] = os.pathsep.join([str(hook), str(ROOT)])
    env["VMEM_TEST_NUMPY_ENV"] = str(seen)
    session = tmp_path / "s.json"
    events = [
        {"id": f"e{i}", "author": "user", "content": {"role": "user", "parts": [{"text": t}]}}
        for i, t in enumerate(["I like green tea", "my dog is called Rex"])
    ]
    session.write_text(json.dumps({"id": "s1", "appName": "shop", "userId": "u1", "events": events}))
    env.update(
        {
            "LONG_TERM_MEMORY_BACKEND": "local",
            "LONG_TERM_MEMORY_LOCAL_PATH": str(tmp_path / "ltm.db"),
            "MODEL_EMBEDDING_PROVIDER": "hash",
            "SHORT_TERM_MEMORY_BACKEND": "local",
        }
    )
    argv = [str(session) if a == "SESSION" else a for a in args]
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    loaded = json.loads(seen.read_text())
    assert "numpy" in loaded, "the command never imported numpy: it tests nothing"
    return loaded["numpy"]  # type: ignore[no-any-return]


@pytest.mark.parametrize("entry", [["VMEM"], [sys.executable, "-m", "veadk_mem"]], ids=["console-script", "python-m"])
def test_ltm_save_loads_numpy_with_one_blas_thread(entry: list[str], tmp_path: Path) -> None:
    entry = [_installed_vmem() if a == "VMEM" else a for a in entry]
    seen = _env_when_numpy_loaded(tmp_path, [*entry, "ltm", "save", "SESSION"])
    assert seen["OPENBLAS_NUM_THREADS"] == "1" and seen["MKL_NUM_THREADS"] == "1"


def test_ltm_search_loads_numpy_with_one_blas_thread(tmp_path: Path) -> None:
    _env_when_numpy_loaded(tmp_path, [_installed_vmem(), "ltm", "save", "SESSION"])  # something to search
    seen = _env_when_numpy_loaded(tmp_path, [_installed_vmem(), "ltm", "search", "tea", "--user", "u1"])
    assert seen["OPENBLAS_NUM_THREADS"] == "1"


def test_a_users_own_setting_wins(tmp_path: Path) -> None:
    vmem = _installed_vmem()
    (tmp_path / "a").mkdir(), (tmp_path / "b").mkdir()
    seen = _env_when_numpy_loaded(tmp_path / "a", [vmem, "ltm", "save", "SESSION"], OPENBLAS_NUM_THREADS="3")
    assert seen["OPENBLAS_NUM_THREADS"] == "3" and seen["MKL_NUM_THREADS"] == "1"
    seen = _env_when_numpy_loaded(tmp_path / "b", [vmem, "ltm", "save", "SESSION"], OMP_NUM_THREADS="2")
    # OMP_NUM_THREADS is what both libraries fall back on: vmem leaves them to it.
    assert seen["OMP_NUM_THREADS"] == "2"
    assert seen["OPENBLAS_NUM_THREADS"] is None and seen["MKL_NUM_THREADS"] is None


def test_prepare_blas_changes_nothing_once_numpy_is_loaded(monkeypatch: pytest.MonkeyPatch) -> None:
    import numpy  # noqa: F401

    from veadk_mem.blas import THREAD_VARIABLES, prepare_blas

    env: dict[str, str] = {}
    assert prepare_blas(env) is False and env == {}
    monkeypatch.delitem(sys.modules, "numpy")  # as if not loaded yet (the module object stays imported)
    env = {"GOTO_NUM_THREADS": "4"}
    assert prepare_blas(env) is True
    assert env["MKL_NUM_THREADS"] == "1" and "OPENBLAS_NUM_THREADS" not in env
    assert set(THREAD_VARIABLES) == {"OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"}
