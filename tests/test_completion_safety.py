"""Tab-completion never runs a word taken from a config (issue 41 item 5).

A `./vmem.toml` (say in a cloned repository) names policies whose names are shell code for
each shell; `vmem completion bash|zsh|fish` writes them into the script, and pressing TAB at
`vmem policy show ` or `--policy ` in the real shell must neither run them nor insert them
unquoted into the command line (where Enter would run them).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import pty
import select
import shutil
import struct
import subprocess
import termios
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from veadk_mem.cli.app import app


def _hostile(work: Path) -> dict[str, Path]:
    """Policy name -> the file it creates if a shell runs it (one payload per shell's syntax)."""
    return {
        f"x$(touch${{IFS}}{work}/bash-dollar)": work / "bash-dollar",
        f"b`touch {work}/backtick`": work / "backtick",
        f"f(touch {work}/fish-paren)": work / "fish-paren",
        f"z$(touch {work}/dollar-paren)": work / "dollar-paren",
        "it's \\ odd": work / "never-created",
    }


def _scripts(work: Path, names: list[str]) -> dict[str, Path]:
    """`vmem completion SHELL` with ./vmem.toml naming these policies, written into `work`."""
    body = "".join(f'[policy."{name.replace(chr(92), chr(92) * 2)}"]\npreset = "custom"\n' for name in names)
    (work / "vmem.toml").write_text(body, encoding="utf-8")
    out = {}
    for shell, file in (("bash", "vmem.bash"), ("zsh", "_vmem"), ("fish", "vmem.fish")):
        result = CliRunner().invoke(app, ["completion", shell])
        assert result.exit_code == 0, result.output
        assert "odd" in result.stdout  # the config's names are completed, not dropped
        (work / shell).mkdir()
        out[shell] = work / shell / file
        out[shell].write_text(result.stdout, encoding="utf-8")
    return out


@pytest.fixture
def hostile(isolated_env: Path) -> tuple[dict[str, Path], dict[str, Path]]:
    names = _hostile(isolated_env)
    return names, _scripts(isolated_env, list(names))


def _created(names: dict[str, Path]) -> list[str]:
    return sorted(p.name for p in names.values() if p.exists())


def _bash(script: Path, words: list[str]) -> list[str]:
    body = (
        f"source {script}\nCOMP_WORDS=({' '.join(_sh_quote(w) for w in words)}); COMP_CWORD={len(words) - 1}\n"
        '_vmem; printf "%s\\n" "${COMPREPLY[@]}"\n'
    )
    out = subprocess.run(["bash", "--norc", "-c", body], capture_output=True, text=True, check=True, timeout=30)
    return [w for w in out.stdout.splitlines() if w]


def _sh_quote(text: str) -> str:
    return "'" + text.replace("'", "'\\''") + "'"


def test_bash_runs_no_config_word_and_inserts_each_quoted(hostile: tuple[dict[str, Path], dict[str, Path]]) -> None:
    names, scripts = hostile
    lines = ("vmem policy show ", "vmem policy test --policy ", "vmem ltm save -p ")
    for words in (line.split(" ") for line in lines):
        replies = _bash(scripts["bash"], words)
        assert _created(names) == [], words
        assert replies[:3] == ["default", "all", "custom"] and len(replies) == 3 + len(names), replies
        # what readline inserts is one word that, once the user presses Enter, is the name itself
        for reply, name in zip(replies[3:], names, strict=True):
            got = subprocess.run(
                ["bash", "--norc", "-c", f'set -- {reply}; printf "%s" "$#:$1"'],
                capture_output=True,
                text=True,
                check=True,
                timeout=30,
            ).stdout
            assert got == f"1:{name}", (reply, name)
        assert _created(names) == [], words
    assert _bash(scripts["bash"], ["vmem", "policy", "show", "cu"]) == ["custom"]
    assert _bash(scripts["bash"], ["vmem", "policy", "show", "x"]) == [_bash_q(next(iter(names)))]
    assert _created(names) == []


def _bash_q(text: str) -> str:
    """The word as bash's own `printf %q` quotes it."""
    out = subprocess.run(["bash", "--norc", "-c", 'printf "%q" "$1"', "-", text], capture_output=True, text=True)
    return out.stdout


def test_fish_runs_no_config_word(hostile: tuple[dict[str, Path], dict[str, Path]]) -> None:
    names, scripts = hostile
    exe = shutil.which("fish")
    if exe is None:
        pytest.skip("fish is not installed here; .ci/test installs it")
    for line in ("vmem policy show ", "vmem policy test --policy ", "vmem ltm save -p "):
        out = subprocess.run(
            [exe, "--no-config", "-c", f"source {scripts['fish']}; complete -C {_sh_quote(line)}"],
            capture_output=True,
            text=True,
            timeout=30,
        )
        assert out.returncode == 0 and out.stderr == "", out.stderr
        got = sorted(row.split("\t")[0] for row in out.stdout.splitlines())
        assert got == sorted(["default", "all", "custom", *names]), got
        assert _created(names) == [], line


def _pty_session(argv: list[str], env: dict[str, str], steps: list[tuple[bytes, str]], cwd: Path) -> str:
    """Run an interactive shell on a pseudo-terminal; for each step type its keys and wait
    (up to 30 s: the host is shared) until the shell has printed its expected text. Returns
    everything the shell printed."""
    pid, fd = pty.fork()
    if pid == 0:  # the child: the shell, on a terminal wide enough to show a whole command line
        fcntl.ioctl(0, termios.TIOCSWINSZ, struct.pack("HHHH", 50, 1000, 0, 0))
        os.chdir(cwd)
        os.execvpe(argv[0], argv, env)
    out = bytearray()
    seen = [0]  # where the last expected text ended: the next one is looked for after it, so text
    # that came in the same read as the previous answer is not missed (it was, under load)

    def wait_for(text: str, longest: float = 30.0) -> None:
        end = time.monotonic() + longest
        while time.monotonic() < end:
            found = out.find(text.encode(), seen[0])
            if found >= 0:
                seen[0] = found + len(text.encode())
                return
            ready, _, _ = select.select([fd], [], [], 0.2)
            if ready:
                try:
                    chunk = os.read(fd, 65536)
                except OSError:
                    return
                if not chunk:
                    return
                out.extend(chunk)

    try:
        for keys, expected in steps:
            os.write(fd, keys)
            wait_for(expected)
    finally:
        os.close(fd)
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, 9)  # the shell this test started
        os.waitpid(pid, 0)
    return out.decode("utf-8", "replace")


def test_zsh_runs_no_config_word_and_inserts_it_quoted(
    hostile: tuple[dict[str, Path], dict[str, Path]], isolated_env: Path
) -> None:
    """An interactive zsh on a pty: TAB lists and inserts each config word quoted, and Enter hands the
    command the name itself, through both of the script's paths: `_describe` (`policy show NAME`) and
    `compadd` (`-p NAME`). The script before f2abc9b single-quoted its words too (no `$(...)` ran), but
    doubled a backslash inside the quotes, so `-p it<TAB>` gave the command `it's \\\\ odd`."""
    names, scripts = hostile
    exe = shutil.which("zsh")
    if exe is None:
        pytest.skip("zsh is not installed here; .ci/test installs it")
    env = {"PATH": os.environ["PATH"], "HOME": str(isolated_env), "TERM": "dumb", "LANG": "C.UTF-8"}
    setup = (
        f"fpath=({scripts['zsh'].parent} $fpath); autoload -Uz compinit; compinit -u -D; "
        "zstyle ':completion:*' list-prompt ''; vmem() { print -r -- \"ARG<${argv[-1]}>\" }; PS1='READY> '\n"
    ).encode()
    first = next(iter(names))
    typed = _pty_session(
        [exe, "-f", "-i"],
        env,
        [
            (setup, "\rREADY> "),
            (b"vmem policy show \t", "custom"),  # the listing: presets and the config's names
            # ^C, then a command whose output only a fresh prompt can give: the prompt the listing
            # redraws matched "READY> " too, and the next keys raced the ^C under load
            (b"\x03", "\rREADY> "),
            (b"print -r -- ZZ$((6*7))\n", "ZZ42"),
            (b"vmem policy show x\t", "vmem policy show x\\$\\(touch\\$\\{IFS\\}"),  # inserted quoted
            (b"\n", "ARG<"),  # Enter: the name reaches the command as text, nothing runs
            (b"vmem policy test -p f\t", "fish-paren\\)"),
            (b"\n", "ARG<f("),
            (b"vmem policy show it\t", "odd"),  # a quote and a backslash: the name, no more, no less
            (b"\n", "ARG<"),
            (b"vmem policy test -p it\t", "odd"),
            (b"\n", "ARG<"),
        ],
        isolated_env,
    )
    assert "custom" in typed and "default" in typed, typed  # the completion really ran
    assert f"ARG<{first}>" in typed, typed
    assert f"ARG<{next(n for n in names if n.startswith('f('))}>" in typed, typed
    odd = next(n for n in names if n.endswith("odd"))
    got = [line for line in typed.splitlines() if line.startswith("ARG<it")]
    assert got == [f"ARG<{odd}>"] * 2, got  # from `policy show` and from `-p`
    assert _created(names) == [], typed


def test_bash_readline_inserts_a_config_word_quoted_and_enter_runs_nothing(
    hostile: tuple[dict[str, Path], dict[str, Path]], isolated_env: Path
) -> None:
    """The same in an interactive bash on a terminal: TAB, then Enter."""
    names, scripts = hostile
    env = {"PATH": os.environ["PATH"], "HOME": str(isolated_env), "TERM": "dumb", "LANG": "C.UTF-8"}
    setup = (
        f"source {scripts['bash']}; vmem() {{ printf 'ARG<%s>\\n' \"${{@: -1}}\"; }}; bind 'set bell-style none'; "
        "PS1='READY> '\n"
    ).encode()
    first = next(iter(names))
    typed = _pty_session(
        ["bash", "--norc", "--noprofile", "-i"],
        env,
        [
            (setup, "\nREADY> "),
            (b"vmem policy show x\t", "vmem policy show x\\$\\(touch\\$\\{IFS\\}"),  # inserted quoted
            (b"\n", "ARG<"),  # Enter: the name reaches the command as text, nothing runs
            (b"vmem ltm save -p f\t", "fish-paren\\)"),
            (b"\n", "ARG<f("),
        ],
        isolated_env,
    )
    assert f"ARG<{first}>" in typed, typed
    assert f"ARG<{next(n for n in names if n.startswith('f('))}>" in typed, typed
    assert _created(names) == [], typed
