"""Docs that cannot drift: the command reference (docs/commands.md), completions and
examples.toml match the app; links resolve."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from veadk_mem.cli.app import app
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


def _commands() -> list[tuple[str, Any]]:
    """Every command of the app, groups included, by path ('' is vmem itself)."""
    import typer

    from veadk_mem.cli.app import app

    found: list[tuple[str, Any]] = []

    def walk(cmd: Any, path: str) -> None:
        found.append((path, cmd))
        for name, sub in getattr(cmd, "commands", {}).items():
            walk(sub, f"{path} {name}".strip())

    walk(typer.main.get_command(app), "")
    return found


@pytest.mark.parametrize(("path", "cmd"), _commands(), ids=lambda v: v if isinstance(v, str) else "")
def test_every_help_ends_with_real_examples(path: str, cmd: Any) -> None:
    """Each --help ends with two or three examples of that very command, whose options it takes."""
    import shlex

    from veadk_mem.cli.examples import EXAMPLES

    examples = EXAMPLES.get(path, [])
    assert 2 <= len(examples) <= 3, f"`vmem {path}` needs two or three examples in veadk_mem/cli/examples.py"
    help_text = CliRunner().invoke(app, [*path.split(), "--help"], env={"COLUMNS": "60"}).output
    flat = " ".join(help_text.split())
    assert flat.endswith(" ".join(examples[-1][1].split())), help_text
    for comment, line in examples:
        assert f"# {comment} {' '.join(line.split())}" in flat
        assert max(map(len, line.splitlines())) <= 58, f"{line!r}: longer than a 60-column terminal gives it"
        match = re.search(r"vmem [^|)>]*", line.replace("\\\n", " "))
        assert match, f"{line!r} runs no vmem command"
        words = shlex.split(match.group())[1:]
        if path:
            assert words[: len(path.split())] == path.split(), f"{line!r} is not an example of `vmem {path}`"
        # the line parses: every option exists and every required argument is there
        leaf, rest = typer.main.get_command(app), list(words)
        while rest and rest[0] in getattr(leaf, "commands", {}):
            leaf = leaf.commands[rest.pop(0)]
        assert not getattr(leaf, "commands", None), f"{line!r} names a group, not a command"
        assert leaf.make_context(leaf.name, rest) is not None


def test_root_help_lists_session_ltm_policy_first_and_cuts_no_summary() -> None:
    out = CliRunner().invoke(app, ["--help"], env={"COLUMNS": "60"}).output
    listing = out.split("Commands:")[1].split("Examples:")[0]
    listed = [line.split()[0] for line in listing.splitlines() if line[2:3].strip()]
    assert listed[:3] == ["session", "ltm", "policy"]
    for path, _ in _commands():
        sub = CliRunner().invoke(app, [*path.split(), "--help"], env={"COLUMNS": "60"}).output
        listing = sub.split("Commands:")[1] if "Commands:" in sub else ""
        assert "..." not in listing and "…" not in sub, f"`vmem {path} --help` cuts a summary"


def test_metavars_are_one_word_per_thing() -> None:
    """USER, APP, INDEX, BACKEND, N: never U, A, I, B, K."""
    for path, cmd in _commands():
        for param in getattr(cmd, "params", []):
            metavar = getattr(param, "metavar", None)
            assert metavar not in {"U", "A", "I", "I1", "I2", "B", "B1", "B2", "K"}, f"vmem {path}: {param.opts}"


DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FENCE = re.compile(r"^```.*?^```", re.S | re.M)


def _links(text: str) -> list[str]:
    """Every link target of a Markdown text outside code fences: inline and reference-style."""
    text = FENCE.sub("", text)
    inline = re.findall(r"\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)", text)
    reference = re.findall(r"^\s*\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+\"[^\"]*\")?\s*$", text, re.M)
    return inline + reference


def test_every_relative_link_in_the_docs_resolves() -> None:
    """A link to a file or folder of the checkout names one that exists (a renamed bench
    script or a moved doc breaks the link, not silently the reader's trust)."""
    broken = []
    for doc in DOCS:
        for target in _links(doc.read_text(encoding="utf-8")):
            if re.match(r"^[a-z][a-z0-9+.-]*:", target) or target.startswith("#"):
                continue  # a URL, a mail address, an anchor in the same page
            path = target.split("#", 1)[0]
            if not (doc.parent / path).exists():
                broken.append(f"{doc.relative_to(ROOT)}: {target}")
    assert broken == []
    assert _links("[a](docs/x.md) [b](https://e.org) `[c](no)`\n```\n[d](no)\n```\n[e]: ./y.py\n") == [
        "docs/x.md",
        "https://e.org",
        "no",  # inline code is text a reader sees as a link: checked too
        "./y.py",
    ]


def test_sessions_doc_lists_each_command_once() -> None:
    """docs/sessions.md's synopsis names every `vmem session` command, each once."""
    text = (ROOT / "docs" / "sessions.md").read_text(encoding="utf-8")
    block = text.split("## Commands", 1)[1].split("```", 2)[1]
    named = re.findall(r"^vmem session (\w+)", block, re.M)
    group = typer.main.get_command(app).commands["session"]  # type: ignore[attr-defined]
    assert sorted(named) == sorted(group.commands), named


def test_the_demo_echoes_each_command_so_that_it_can_be_pasted() -> None:
    """Each command .ci/demo echoes, pasted into a shell, runs the same words (a query with
    spaces and quotes keeps them)."""
    (step,) = [
        line for line in (ROOT / ".ci" / "demo").read_text(encoding="utf-8").splitlines() if line.startswith("step()")
    ]
    words = ["printf", "<%s>", "recommend a dish", "it's", "$HOME", "*"]
    script = f"{step}\nstep {' '.join(_sh_quote(w) for w in words)}"
    out = subprocess.run(["bash", "-c", script], capture_output=True, text=True, check=True).stdout
    echoed = next(line for line in out.splitlines() if line.startswith("$ "))
    ran = out.split(echoed + "\n", 1)[1]
    pasted = subprocess.run(["bash", "-c", echoed[2:]], capture_output=True, text=True, check=True).stdout
    assert pasted == ran == "<recommend a dish><it's><$HOME><*>"


def _sh_quote(word: str) -> str:
    import shlex

    return shlex.quote(word)


def test_the_command_reference_is_its_own_page_and_the_readme_links_it() -> None:
    from veadk_mem.cli.completion import walk
    from veadk_mem.cli.docs import command_tree

    page = (ROOT / "docs" / "commands.md").read_text(encoding="utf-8")
    for node in walk(command_tree()):
        title = "vmem" + (" " + node.key if node.path else "")
        assert f"## `{title}`\n" in page, title
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert "(docs/commands.md)" in readme
    assert "Usage: vmem" not in readme  # the tour, not the reference
