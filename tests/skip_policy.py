"""No silent green: under CI=true a skipped test fails the run unless the allow-list names it.

The allow-list is `tests/skip-allowlist.txt` (or the file `VMEM_SKIP_ALLOWLIST` names): one
`PATTERN  # reason` per line, PATTERN an fnmatch pattern of pytest node ids (a module-level skip
has the module's path as its id). A line without a reason is refused: every allowed skip says why.
`VMEM_STRICT_SKIPS=1` turns the check on outside CI; `VMEM_STRICT_SKIPS=0` turns it off.
`tests/conftest.py` imports these hooks; `tests/test_skip_policy.py` runs them through pytester.
"""

from __future__ import annotations

import fnmatch
import os
from pathlib import Path

import pytest

ALLOWLIST = Path(__file__).with_name("skip-allowlist.txt")


def strict() -> bool:
    """True under CI=true, unless VMEM_STRICT_SKIPS says otherwise."""
    flag = os.environ.get("VMEM_STRICT_SKIPS")
    if flag is not None:
        return flag == "1"
    return os.environ.get("CI", "").lower() == "true"


def load_allowlist(path: Path) -> list[str]:
    """The patterns of the allow-list; a UsageError naming the line when one has no reason."""
    patterns: list[str] = []
    if not path.is_file():
        return patterns
    for number, raw in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        pattern, _, reason = line.partition("#")
        if not pattern.strip() or not reason.strip():
            raise pytest.UsageError(f"{path}:{number}: an allowed skip needs `PATTERN  # reason`")
        patterns.append(pattern.strip())
    return patterns


def _allowlist_path() -> Path:
    return Path(os.environ.get("VMEM_SKIP_ALLOWLIST") or ALLOWLIST)


class SkipPolicy:
    """Collects the skips the allow-list does not name; fails an otherwise green run on them."""

    def __init__(self) -> None:
        self.path = _allowlist_path()
        self.patterns = load_allowlist(self.path)  # a malformed list stops the run before any test
        self.unlisted: list[tuple[str, str]] = []

    def _note(self, report: pytest.CollectReport | pytest.TestReport) -> None:
        if not report.skipped or hasattr(report, "wasxfail"):
            return
        if any(fnmatch.fnmatchcase(report.nodeid, p) for p in self.patterns):
            return
        longrepr = report.longrepr
        reason = longrepr[2] if isinstance(longrepr, tuple) else str(longrepr)
        self.unlisted.append((report.nodeid, reason))

    def pytest_collectreport(self, report: pytest.CollectReport) -> None:
        self._note(report)

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        self._note(report)

    def pytest_terminal_summary(self, terminalreporter: pytest.TerminalReporter) -> None:
        if not self.unlisted:
            return
        terminalreporter.section("skipped tests not in the allow-list (CI=true: these fail the run)", red=True)
        for nodeid, reason in self.unlisted:
            terminalreporter.line(f"SKIPPED {nodeid}: {reason}")
        terminalreporter.line(f"allow one with `PATTERN  # reason` in {self.path}, or make it run")

    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        if self.unlisted and exitstatus == pytest.ExitCode.OK:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_configure(config: pytest.Config) -> None:
    if strict():
        config.pluginmanager.register(SkipPolicy(), "vmem-skip-policy")
