"""`vmem completion bash|zsh|fish`: the shell completion script for the installed vmem.

The scripts are generated from the Click tree of the app, so they know every command and
option; option values are completed where vmem knows them (policy presets and the config's
named policies, backend names, shells). `completions/` in the checkout is written by the same code
(`python -m veadk_mem.cli.docs`).
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any

import typer

from veadk_mem import files
from veadk_mem.cli.typer_internals import has_completer
from veadk_mem.errors import BadInput, VmemError
from veadk_mem.ltm.registry import BUILTIN

HEADER = "generated from the vmem app by `python -m veadk_mem.cli.docs`; do not edit"
SHELLS = ("bash", "zsh", "fish")
POLICY_OPTIONS = ("--policy", "-p")  # options whose value is a policy name
BACKEND_OPTIONS = ("--backend", "-b", "--from-backend", "--to-backend")  # options whose value is a backend name


@dataclass
class Node:
    """One command or group of the CLI tree, as the generators need it."""

    path: tuple[str, ...]
    help: str
    options: list[tuple[str, str]] = field(default_factory=list)
    children: list[Node] = field(default_factory=list)
    takes_files: bool = False
    command: Any = None
    option_values: dict[str, list[str]] = field(default_factory=dict)  # option -> the values it takes
    arg_values: list[str] = field(default_factory=list)  # values of a positional argument
    named_args: bool = False  # positional names (apps, users, session ids) asked of vmem at TAB
    named_options: list[str] = field(default_factory=list)  # options whose names are asked of vmem

    @property
    def key(self) -> str:
        return " ".join(self.path)


def _first_line(text: str | None) -> str:
    return (text or "").strip().splitlines()[0].strip() if (text or "").strip() else ""


def build_tree(root_cmd: Any, policies: Sequence[str] = ()) -> Node:
    """Walk the Click tree of the app (`root_cmd`, as `typer.main.get_command` or the running
    context's root gives it) into Nodes, commands in their registration order; `policies` are
    the named policies of a config, completed beside the presets."""
    from veadk_mem.policy import PRESETS

    return _node(root_cmd, (), [*PRESETS, *policies])


def _backends() -> tuple[str, ...]:

    return tuple(sorted(BUILTIN))


def _node(cmd: Any, path: tuple[str, ...], policies: list[str]) -> Node:
    node = Node(path, _first_line(cmd.help), command=cmd)
    for param in cmd.params:
        if param.param_type_name == "option":
            if param.name in ("install_completion", "show_completion"):
                continue
            choices = _choices(param)
            for opt in [*param.opts, *param.secondary_opts]:
                node.options.append((opt, _first_line(param.help)))
                if opt in POLICY_OPTIONS:
                    node.option_values[opt] = policies
                elif opt in BACKEND_OPTIONS:
                    node.option_values[opt] = list(_backends())
                elif choices:
                    node.option_values[opt] = choices
                elif has_completer(param):
                    node.named_options.append(opt)
        elif param.param_type_name == "argument":
            if has_completer(param):
                node.named_args = True
            elif path == ("completion",):
                node.arg_values = list(SHELLS)
            elif path == ("policy", "show"):
                node.arg_values = policies
            else:
                node.takes_files = True
    for name, sub in getattr(cmd, "commands", {}).items():
        node.children.append(_node(sub, (*path, name), policies))
    return node


_METAVAR_CHOICES = re.compile(r"[a-z0-9_-]+(\|[a-z0-9_-]+)+")  # a metavar listing the values: app|user|day


def _choices(param: Any) -> list[str]:
    """The values an option takes, where it says: a Choice type, or a metavar like `app|user|day`."""
    desc = getattr(param, "type_descriptor", None)
    choices = getattr(desc, "choices", None) if getattr(desc, "is_choice", False) else None
    if choices:
        return [str(getattr(c, "value", c)) for c in choices]
    metavar = getattr(param, "metavar", None) or ""
    return metavar.split("|") if _METAVAR_CHOICES.fullmatch(metavar) else []


# What a script runs at TAB for a name from the session database: Click's completion protocol
# (`vmem.cli.names`), its answer one name a line, inserted quoted and never evaluated.
ASK_BASH = '_VMEM_COMPLETE=complete_bash COMP_WORDS="${COMP_WORDS[*]}" COMP_CWORD="$COMP_CWORD" "${COMP_WORDS[0]}"'


def walk(node: Node) -> list[Node]:
    """The node and all its descendants, depth first."""
    out = [node]
    for child in node.children:
        out.extend(walk(child))
    return out


_PLAIN = re.compile(r"[A-Za-z0-9_./-]+")  # a word no shell expands: written as it is


def _sq(text: str) -> str:
    """One word for a POSIX shell (bash, zsh): single-quoted unless plain, so nothing in it is expanded."""
    return text if _PLAIN.fullmatch(text) else "'" + text.replace("'", "'\\''") + "'"


def _words(values: Sequence[str]) -> str:
    """A bash array's elements, each single-quoted: a config's policy name is data, never code."""
    return " ".join(_sq(v) for v in values)


def bash_completion(tree: Node) -> str:
    """A bash completion function knowing every command path and its options."""
    nodes = walk(tree)
    known = "|".join(f'" {n.key}"' for n in nodes if n.path)
    lines = [
        f"# bash completion for vmem; {HEADER}.",
        "# Install: source this file from ~/.bashrc, or copy it to",
        "# ~/.local/share/bash-completion/completions/vmem",
        "_vmem() {",
        '  local cur="${COMP_WORDS[COMP_CWORD]}" path="" w q i',
        '  local prev="${COMP_WORDS[COMP_CWORD-1]}"',
        "  local -a opts=() cmds=() words=()",
        "  local named=",
        "  for ((i = 1; i < COMP_CWORD; i++)); do",
        '    w="${COMP_WORDS[i]}"',
        '    case "$path $w" in',
        f'      {known}) path="$path $w" ;;',
        "    esac",
        "  done",
        '  case "$path" in',
    ]
    values = []
    for node in nodes:
        opts = _words([opt for opt, _ in node.options])
        cmds = _words([*(c.path[-1] for c in node.children), *node.arg_values])
        key = f'" {node.key}"' if node.path else '""'
        named = "; named=1" if node.named_args else ""
        lines.append(f"    {key}) opts=({opts}); cmds=({cmds}){named} ;;")
        where = (" " + node.key) if node.path else ""
        for opt, vals in node.option_values.items():
            values.append(f"""    "{where} {opt}") cmds=({_words(vals)}); opts=(); named= ;;""")
        for opt in node.named_options:
            values.append(f"""    "{where} {opt}") cmds=(); opts=(); named=1 ;;""")
    lines += ["  esac"]
    if values:
        lines += ['  case "$path $prev" in', *values, "  esac"]
    lines += [
        '  if [[ -n "$named" && "$cur" != -* ]]; then',
        f"    mapfile -t cmds < <({ASK_BASH} 2>/dev/null)",
        "  fi",
    ]
    # No `compgen -W`: it expands its word list, so a `$(...)` in a config's policy name would
    # run at every TAB. Words are matched as plain text and handed to readline quoted.
    lines += [
        '  if [[ "$cur" == -* ]]; then words=("${opts[@]}"); else words=("${cmds[@]}"); fi',
        "  COMPREPLY=()",
        '  for w in "${words[@]}"; do',
        '    [[ -n "$w" ]] || continue',
        '    printf -v q "%q" "$w"',
        '    if [[ "$w" == "$cur"* || "$q" == "$cur"* ]]; then COMPREPLY+=("$q"); fi',
        "  done",
        "}",
        "complete -o default -o bashdefault -F _vmem vmem",
        "",
    ]
    return "\n".join(lines)


def _is_leaf(node: Node) -> bool:
    return not node.children


def _zq(text: str) -> str:
    return text.replace("\\", "\\\\").replace(":", "\\:").replace("'", "'\\''")


def zsh_completion(tree: Node) -> str:
    """A zsh completion function with descriptions for commands and options."""
    nodes = walk(tree)
    known = "|".join(f'" {n.key}"' for n in nodes if n.path)
    lines = [
        "#compdef vmem",
        f"# zsh completion for vmem; {HEADER}.",
        "# Install: copy to a directory on $fpath as _vmem (e.g. ~/.zfunc/_vmem), then",
        "# `fpath=(~/.zfunc $fpath); autoload -Uz compinit && compinit` in ~/.zshrc.",
        "_vmem_names() {",
        "  local -a names",
        '  names=("${(@f)$(_VMEM_COMPLETE=complete_bash COMP_WORDS="${words[1,CURRENT]}" '
        'COMP_CWORD=$((CURRENT-1)) $words[1] 2>/dev/null)}")',
        '  compadd -- "${names[@]}"',
        "}",
        "_vmem() {",
        '  local path_="" w prev=${words[CURRENT-1]} named=',
        "  local -a cmds opts",
        "  for w in ${words[2,CURRENT-1]}; do",
        '    case "$path_ $w" in',
        f'      ({known}) path_="$path_ $w" ;;',
        "    esac",
        "  done",
        '  case "$path_" in',
    ]
    values = []
    for node in nodes:
        key = f'" {node.key}"' if node.path else '""'
        cmds = " ".join(
            [*(f"'{_zq(c.path[-1])}:{_zq(c.help)}'" for c in node.children), *(f"'{_zq(v)}'" for v in node.arg_values)]
        )
        opts = " ".join(f"'{_zq(opt)}:{_zq(desc)}'" for opt, desc in node.options)
        files = "1" if _is_leaf(node) and node.takes_files and not node.named_args else "0"
        named = "; named=1" if node.named_args else ""
        lines.append(f"    ({key}) cmds=({cmds}); opts=({opts}); local files={files}{named} ;;")
        where = (" " + node.key) if node.path else ""
        for opt, vals in node.option_values.items():
            values.append(f"""    ("{where} {opt}") compadd -- {_words(vals)}; return ;;""")
        for opt in node.named_options:
            values.append(f"""    ("{where} {opt}") _vmem_names; return ;;""")
    lines += ["  esac"]
    if values:
        lines += ['  case "$path_ $prev" in', *values, "  esac"]
    lines += [
        '  if [[ -n $named && "$PREFIX" != -* ]]; then',
        "    _vmem_names; return",
        "  fi",
        '  if [[ "$PREFIX" == -* ]]; then',
        "    _describe -t options 'option' opts",
        "  elif (( ${#cmds} )); then",
        "    _describe -t commands 'command' cmds",
        "  elif [[ $files == 1 ]]; then",
        "    _files",
        "  fi",
        "}",
        '_vmem "$@"',
        "",
    ]
    return "\n".join(lines)


def _fq(text: str) -> str:
    return text.replace("\\", "\\\\").replace("'", "\\'")


def _fish_values(values: Sequence[str]) -> str:
    """The argument of `complete -a`, which fish expands at every TAB: each value is quoted
    inside it (a config's `(cmd)` or `$(cmd)` stays text), then the whole is quoted once more."""
    inner = " ".join(v if _PLAIN.fullmatch(v) else f"'{_fq(v)}'" for v in values)
    return f"'{_fq(inner)}'"


def fish_completion(tree: Node) -> str:
    """fish `complete` lines for every command and option."""
    lines = [
        f"# fish completion for vmem; {HEADER}.",
        "# Install: copy to ~/.config/fish/completions/vmem.fish",
        "function __vmem_path",
        "    set -l tokens (commandline -opc)",
        "    set -l path",
        "    for t in $tokens[2..-1]",
        "        switch (string join -- ' ' $path $t)",
    ]
    nodes = walk(tree)
    for node in nodes:
        if node.path:
            lines.append(f"            case '{_fq(node.key)}'")
            lines.append("                set path $path $t")
    lines += [
        "        end",
        "    end",
        "    string join -- ' ' $path",
        "end",
        "function __vmem_at",
        "    set -l p (__vmem_path)",
        '    test "$p" = "$argv[1]"',
        "end",
        "function __vmem_names",
        "    set -l words (commandline -opc) (commandline -ct)",
        "    set -l cword (math (count $words) - 1)",
        '    env _VMEM_COMPLETE=complete_bash COMP_WORDS="$words" COMP_CWORD=$cword $words[1] 2>/dev/null',
        "end",
        "complete -c vmem -f",
    ]
    for node in nodes:
        cond = f"-n \"__vmem_at '{_fq(node.key)}'\""
        for child in node.children:
            lines.append(f"complete -c vmem {cond} -a {_fish_values([child.path[-1]])} -d '{_fq(child.help)}'")
        for opt, desc in node.options:
            flag = f"-l '{_fq(opt[2:])}'" if opt.startswith("--") else f"-s '{_fq(opt[1:])}'"
            vals = node.option_values.get(opt)
            if vals:
                flag += f" -x -a {_fish_values(vals)}"
            elif opt in node.named_options:
                flag += " -x -a '(__vmem_names)'"
            lines.append(f"complete -c vmem {cond} {flag} -d '{_fq(desc)}'")
        if node.arg_values:
            lines.append(f"complete -c vmem {cond} -a {_fish_values(node.arg_values)}")
        if node.named_args:
            lines.append(f"complete -c vmem {cond} -a '(__vmem_names)'")
        if _is_leaf(node) and node.takes_files and not node.named_args:
            lines.append(f"complete -c vmem {cond} -F")
    return "\n".join(lines) + "\n"


def script(shell: str, root_cmd: Any, policies: Sequence[str] = ()) -> str:
    """The completion script for `shell` (bash, zsh or fish) of the app whose Click tree is `root_cmd`."""
    tree = build_tree(root_cmd, policies)
    return {"bash": bash_completion, "zsh": zsh_completion, "fish": fish_completion}[shell](tree)


INSTALL = {
    "bash": "vmem completion bash > ~/.local/share/bash-completion/completions/vmem",
    "zsh": "vmem completion zsh > ~/.zfunc/_vmem  (with fpath=(~/.zfunc $fpath); compinit in ~/.zshrc)",
    "fish": "vmem completion fish > ~/.config/fish/completions/vmem.fish",
}


# Where the bash-completion package keeps the script that loads per-user completion files
# (Debian/Ubuntu, Fedora, Arch, Alpine, macOS with Homebrew, FreeBSD)
BASH_COMPLETION_SCRIPTS = (
    "/usr/share/bash-completion/bash_completion",
    "/etc/bash_completion",
    "/usr/local/share/bash-completion/bash_completion",
    "/opt/homebrew/share/bash-completion/bash_completion",
    "/opt/homebrew/etc/profile.d/bash_completion.sh",
    "/usr/local/etc/profile.d/bash_completion.sh",
)
BASH_COMPLETION_INSTALL = (
    "apt install bash-completion, dnf install bash-completion, apk add bash-completion or "
    "brew install bash-completion@2"
)


def bash_completion_present() -> bool:
    """True when the bash-completion package is installed: only it loads
    ~/.local/share/bash-completion/completions/, where `--install` writes."""
    return any(Path(p).is_file() for p in BASH_COMPLETION_SCRIPTS)


def install_path(shell: str) -> Path:
    """Where each shell looks for a user's completion file (zsh: a folder that must be on fpath)."""
    home = Path.home()
    if shell == "bash":
        data = Path(os.environ.get("XDG_DATA_HOME") or home / ".local" / "share")
        return data / "bash-completion" / "completions" / "vmem"
    if shell == "zsh":
        return home / ".zfunc" / "_vmem"
    config = Path(os.environ.get("XDG_CONFIG_HOME") or home / ".config")
    return config / "fish" / "completions" / "vmem.fish"


def completion(
    ctx: typer.Context,
    shell: Annotated[str, typer.Argument(metavar="SHELL", help="bash, zsh or fish.", show_default=False)],
    install: Annotated[
        bool, typer.Option("--install", help="Write it where the shell looks for it instead of printing it.")
    ] = False,
) -> None:
    """Print the shell completion script for this vmem.

    Commands, options and known option values (policy presets and the config's named
    policies, shells). Install: vmem completion bash --install (or redirect the output).
    """
    from veadk_mem.cli.state import get_state

    state = get_state(ctx)
    if shell not in SHELLS:
        raise BadInput(f"completion: unknown shell {shell!r}: choose bash, zsh or fish")
    try:
        policies = list(state.loaded.settings.policy.named())
    except Exception:  # a broken config must not break completion; presets still complete
        policies = []
    text = script(shell, ctx.find_root().command, policies)
    if not install:
        state.render.text(text)
        state.render.message(f"install: {INSTALL[shell]}")
        return
    target = install_path(shell)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise VmemError(f"completion: cannot write {target}: {exc.strerror}") from None
    files.write_text(target, text if text.endswith("\n") else text + "\n")  # refuses a link there
    state.render.message(f"wrote {target}")
    if shell == "zsh":
        state.render.message("zsh: have fpath=(~/.zfunc $fpath) before compinit in ~/.zshrc, then start a new shell")
    elif shell == "bash" and not bash_completion_present():
        state.render.warn(
            f"bash-completion is not installed, and without it bash does not load {target}: "
            f"install it ({BASH_COMPLETION_INSTALL}), or add `source {target}` to ~/.bashrc"
        )
    else:
        state.render.message("start a new shell to use it")
