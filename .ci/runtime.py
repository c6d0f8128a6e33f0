#!/usr/bin/env python3
"""Compare the runtime dependencies of the test venv with a fresh install of the built wheel.

`.ci/test` installs `dist/*.whl[all extras]` into a clean venv (build/ref-venv) and freezes it:
that freeze is what a user gets. The test venv (.venv) is installed with it as constraints; this
script checks that every package of that freeze has the same version in .venv, so the suite never
runs against a dependency set no user has (issue 20: llama-index once took redis-py down to 5.3.1).

    runtime.py constraints REF_FREEZE OUT   write the freeze without vmem itself: pip's -c file
    runtime.py check REF_FREEZE VENV_FREEZE exit 1 naming each runtime package whose version differs
    runtime.py show REF_FREEZE VENV_FREEZE  one line: the runtime packages and their .venv versions
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

SELF = "veadk-mem"
# Runtime packages whose version a test tool forces, each with the reason. Left out of the
# constraints and of the check (named in its output); the smoke test (.ci/smoke) still runs every
# extra with the user's version. Keep this short: each entry is a difference from the user's set.
FORCED_BY_TEST_TOOLS = {
    "tenacity": "google-genai (a dependency of google-adk, the tests' reference client) needs <9.2; "
    "vmem's own retries (veadk_mem/ltm/failure.py) take >=9.0 and volcengine (viking extra) any >=8",
}


def canonical(name: str) -> str:
    """PEP 503 name: lower case, runs of -_. as one dash."""
    return re.sub(r"[-_.]+", "-", name).lower()


def parse(path: str) -> dict[str, str]:
    """`pip freeze` lines as {canonical name: version}; editable and URL lines map to their text."""
    found: dict[str, str] = {}
    for line in Path(path).read_text().splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        if "==" in line:
            name, version = line.split("==", 1)
            found[canonical(name)] = version.strip()
        elif " @ " in line:
            name, url = line.split(" @ ", 1)
            found[canonical(name)] = "@ " + url.strip()
        elif line.startswith("-e "):
            found[canonical(SELF)] = line
    return found


def runtime(ref: dict[str, str]) -> dict[str, str]:
    return {
        name: version
        for name, version in ref.items()
        if name != SELF and not version.startswith("@") and name not in FORCED_BY_TEST_TOOLS
    }


def main(argv: list[str]) -> int:
    if len(argv) != 4 or argv[1] not in {"constraints", "check", "show"}:
        print(__doc__, file=sys.stderr)
        return 2
    command, ref_path, other = argv[1], argv[2], argv[3]
    ref = runtime(parse(ref_path))
    if not ref:
        print(f"runtime: {ref_path} lists no package: the fresh install failed", file=sys.stderr)
        return 1
    if command == "constraints":
        Path(other).write_text("".join(f"{name}=={version}\n" for name, version in sorted(ref.items())))
        return 0
    venv = parse(other)
    if command == "show":
        print("runtime dependencies in .venv: " + ", ".join(f"{n} {venv.get(n, 'MISSING')}" for n in sorted(ref)))
        return 0
    wrong = [f"{n}: .venv has {venv.get(n, 'nothing')}, a fresh wheel install has {v}" for n, v in sorted(ref.items())
             if venv.get(n) != v]
    for line in wrong:
        print(f"runtime mismatch: {line}", file=sys.stderr)
    for name, why in FORCED_BY_TEST_TOOLS.items():
        user = parse(ref_path).get(name)
        if user is not None and venv.get(name) != user:
            print(f"runtime: {name} is {venv.get(name)} in .venv, {user} for a user: {why} (allowed)")
    if wrong:
        print(f"runtime: {len(wrong)} runtime dependencies of .venv differ from a fresh install of the wheel",
              file=sys.stderr)
        return 1
    print(f"runtime: the {len(ref)} runtime dependencies of .venv are those of a fresh install of the wheel")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
