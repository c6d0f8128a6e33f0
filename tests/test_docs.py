"""Docs that cannot drift: README reference, completions and examples.toml match the app."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from veadk_mem.cli.docs import ROOT, stale_files


def test_generated_files_are_current() -> None:
    stale = [str(p.relative_to(ROOT)) for p in stale_files()]
    assert stale == [], f"stale generated files {stale}: run `python -m veadk_mem.cli.docs`"


def _bash_complete(line: str) -> list[str]:
    words = line.split(" ")
    script = (
        f"source {ROOT / 'completions' / 'vmem.bash'}\n"
        f"COMP_WORDS=({' '.join(repr(w) for w in words)}); COMP_CWORD={len(words) - 1}\n"
        '_vmem; printf "%s\\n" "${COMPREPLY[@]}"\n'
    )
    out = subprocess.run(["bash", "-c", script], capture_output=True, text=True, check=True)
    return [w for w in out.stdout.splitlines() if w]


def test_bash_completion_knows_commands_and_options() -> None:
    assert _bash_complete("vmem con") == ["config"]
    assert _bash_complete("vmem config ") == ["show", "init", "path"]
    assert _bash_complete("vmem config show --j") == ["--json", "--jsonl"]
    assert _bash_complete("vmem policy test --policy ") == ["default", "all", "custom"]
    assert _bash_complete("vmem --json config p") == ["path"]


@pytest.mark.parametrize(("shell", "name"), [("zsh", "_vmem"), ("fish", "vmem.fish")])
def test_other_shells_parse(shell: str, name: str) -> None:
    exe = shutil.which(shell)
    if exe is None:
        pytest.skip(f"{shell} is not installed here; the bash completion is tested functionally")
    subprocess.run([exe, "-n", str(ROOT / "completions" / name)], check=True)


def test_readme_gives_the_two_commands() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert "bash .ci/test" in readme
    assert "bash .ci/demo" in readme
    run = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert "bash .ci/test" in run


def test_readme_paths_exist() -> None:
    for rel in ("completions/vmem.bash", "completions/_vmem", "completions/vmem.fish", "examples.toml"):
        assert (Path(ROOT) / rel).is_file(), rel


def test_fish_completion_knows_commands_and_options() -> None:
    exe = shutil.which("fish")
    if exe is None:
        pytest.skip("fish is not installed here; .ci/test installs it")
    script = (
        f"source {ROOT / 'completions' / 'vmem.fish'}; complete -C 'vmem config '; complete -C 'vmem config show --j'"
    )
    out = subprocess.run([exe, "-c", script], capture_output=True, text=True, check=True).stdout
    names = [line.split("\t")[0] for line in out.splitlines()]
    assert names == ["init", "path", "show", "--json", "--jsonl"]
    script = f"source {ROOT / 'completions' / 'vmem.fish'}; complete -C 'vmem policy test --policy '"
    out = subprocess.run([exe, "-c", script], capture_output=True, text=True, check=True)
    assert [line.split("\t")[0] for line in out.stdout.splitlines()] == ["all", "custom", "default"]
    assert out.stderr == ""
