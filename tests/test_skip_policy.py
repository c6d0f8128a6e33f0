"""The no-silent-green hook (tests/skip_policy.py), run through pytester on small test files."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

pytest_plugins = ["pytester"]

SUITE = """
import pytest

def test_runs():
    pass

def test_needs_a_server():
    pytest.skip("server down")

@pytest.mark.xfail(reason="known")
def test_expected_failure():
    assert False
"""


def _run(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, allow: str, *, ci: str = "true"
) -> pytest.RunResult:
    allowlist = pytester.path / "allow.txt"
    allowlist.write_text(allow)
    monkeypatch.setenv("CI", ci)
    monkeypatch.delenv("VMEM_STRICT_SKIPS", raising=False)
    monkeypatch.setenv("VMEM_SKIP_ALLOWLIST", str(allowlist))
    pytester.makeini("[pytest]\nasyncio_default_fixture_loop_scope = function\n")
    pytester.makeconftest("from skip_policy import pytest_configure")
    pytester.makepyfile(test_suite=SUITE)
    # The inner run is in this process: pytest-textual-snapshot's session hooks would put their
    # own directory in TEXTUAL_SNAPSHOT_TEMPDIR and delete it, and the outer run's report then
    # reads a directory that is gone (the whole suite failed at its end, in one process).
    snapshots = os.environ.get("TEXTUAL_SNAPSHOT_TEMPDIR")
    result = pytester.runpytest("-p", "no:textual-snapshot")
    assert os.environ.get("TEXTUAL_SNAPSHOT_TEMPDIR") == snapshots
    assert snapshots is None or Path(snapshots).is_dir()
    return result


def test_an_unlisted_skip_fails_the_run_under_ci(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    result = _run(pytester, monkeypatch, "")
    result.assert_outcomes(passed=1, skipped=1, xfailed=1)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(["*not in the allow-list*", "SKIPPED test_suite.py::test_needs_a_server: *server down"])


def test_a_listed_skip_passes(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    result = _run(pytester, monkeypatch, "test_suite.py::test_needs_*  # no server in this sandbox\n")
    assert result.ret == pytest.ExitCode.OK


def test_outside_ci_a_skip_is_a_skip(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    result = _run(pytester, monkeypatch, "", ci="")
    assert result.ret == pytest.ExitCode.OK


def test_a_module_level_skip_counts(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    pytester.makepyfile(test_gone='import pytest\npytest.importorskip("no_such_module_vmem")\n')
    result = _run(pytester, monkeypatch, "")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(["SKIPPED test_gone.py: *no_such_module_vmem*"])


def test_an_entry_without_a_reason_is_refused(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    result = _run(pytester, monkeypatch, "test_suite.py::test_needs_a_server\n")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*allow.txt:1: an allowed skip needs*"])


def test_the_project_allowlist_is_well_formed() -> None:
    from skip_policy import ALLOWLIST, load_allowlist

    assert all(load_allowlist(Path(ALLOWLIST)))
