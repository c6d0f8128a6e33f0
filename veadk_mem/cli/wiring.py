"""What every vmem command gets without declaring it: the global flags (-c, -q, -v, --json)
before or after the subcommand, --jsonl/--csv/--tsv on table-shaped commands, real metavars
in help, and Click's usage errors in vmem's own one-line form.

Done once on the Click tree Typer builds, so a command added later gets all of it for free.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cache
from typing import TYPE_CHECKING, Annotated, Any

import typer

if TYPE_CHECKING:
    from veadk_mem.cli.state import AppState

TABLE_SHAPED = "__vmem_table_shaped__"


def table_shaped(func: Callable[..., Any]) -> Callable[..., Any]:
    """Mark a command whose data is a table: it takes --jsonl, --csv and --tsv."""
    setattr(func, TABLE_SHAPED, True)
    return func


def _global_template(
    g_config: Annotated[
        str | None,
        typer.Option("--config", "-c", metavar="FILE", help="TOML config file (else $VMEM_CONFIG, ./vmem.toml, XDG)."),
    ] = None,
    g_json: Annotated[bool, typer.Option("--json", help="Print stable JSON on stdout.")] = False,
    g_quiet: Annotated[bool, typer.Option("--quiet", "-q", help="Only data and errors; no progress or notes.")] = False,
    g_verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Tracebacks and extra detail on errors.")] = False,
) -> None:
    """The global flags, also accepted after the subcommand."""


def _format_template(
    g_jsonl: Annotated[bool, typer.Option("--jsonl", help="One JSON object per line on stdout.")] = False,
    g_csv: Annotated[bool, typer.Option("--csv", help="CSV on stdout: a header line, a row a record.")] = False,
    g_tsv: Annotated[bool, typer.Option("--tsv", help="TSV on stdout: a header line, a row a record.")] = False,
) -> None:
    """The formats of table-shaped commands."""


@cache
def _params(template: Callable[..., None]) -> list[Any]:
    """The Click parameters Typer makes of a template function's signature."""
    tmp = typer.Typer(add_completion=False)
    tmp.command()(template)
    return list(typer.main.get_command(tmp).params)


def wire_commands(group: Any, path: str = "") -> None:
    """Give every leaf command under `group` the global flags it lacks, the format flags when
    table-shaped, and real metavars in its help; and every command, groups included, its
    examples (examples.py) and a whole one-line summary in its parent's command list."""
    _teach(group, path)
    for name, cmd in getattr(group, "commands", {}).items():
        sub = f"{path} {name}".strip()
        if getattr(cmd, "commands", None) is not None:
            wire_commands(cmd, sub)
        else:
            _teach(cmd, sub)
            if not getattr(cmd, "_vmem_wired", False):
                _wire(cmd)


def _teach(cmd: Any, path: str) -> None:
    """The examples at the end of --help, and the summary Click would cut with '...' at 45
    characters given whole (the command list wraps it instead)."""
    from veadk_mem.cli.examples import epilog

    cmd.epilog = cmd.epilog or epilog(path)
    if not cmd.short_help and cmd.help:
        first = cmd.help.split("\n\n", 1)[0]
        cmd.short_help = " ".join(first.replace("\b", "").split())


def _wire(cmd: Any) -> None:
    taken = {opt for p in cmd.params for opt in [*getattr(p, "opts", []), *getattr(p, "secondary_opts", [])]}
    extra = [p for p in _params(_global_template) if not set(p.opts) & taken]
    if getattr(cmd.callback, TABLE_SHAPED, False):
        extra += [p for p in _params(_format_template) if not set(p.opts) & taken]
    help_at = next((i for i, p in enumerate(cmd.params) if "--help" in getattr(p, "opts", [])), len(cmd.params))
    cmd.params[help_at:help_at] = extra
    names = {p.name for p in extra}
    inner = cmd.callback

    def callback(**kwargs: Any) -> Any:
        from veadk_mem.cli.state import get_state

        flags = {name: kwargs.pop(name) for name in names if name in kwargs}
        apply_flags(get_state(_ctx()), **flags)
        return inner(**kwargs)

    cmd.callback = callback
    cmd._vmem_wired = True
    for p in cmd.params:
        if p.param_type_name == "argument":
            _real_metavar(p)


def _ctx() -> Any:
    from veadk_mem.cli.typer_internals import current_context

    return current_context()


def apply_flags(
    state: AppState,
    *,
    g_config: str | None = None,
    g_json: bool = False,
    g_quiet: bool = False,
    g_verbose: bool = False,
    g_jsonl: bool = False,
    g_csv: bool = False,
    g_tsv: bool = False,
) -> None:
    """Global flags given after the subcommand count as if given before it."""
    from veadk_mem.errors import BadInput

    if g_config is not None:
        state.config_path = g_config
        state._loaded = None
    state.json_mode = state.json_mode or g_json
    state.quiet = state.quiet or g_quiet
    state.verbose = state.verbose or g_verbose
    from veadk_mem.cli.state import library_warnings

    library_warnings(state.verbose)
    formats = [name for name, on in (("jsonl", g_jsonl), ("csv", g_csv), ("tsv", g_tsv)) if on]
    if len(formats) > 1 or (formats and state.json_mode):
        chosen = ["--json"] * state.json_mode + [f"--{f}" for f in formats]
        raise BadInput(f"{' and '.join(chosen)}: choose one output format")
    if formats:
        state.fmt = formats[0]
    state._renderer = None


def _real_metavar(param: Any) -> None:
    """Usage shows APP, [PATH], FILE... rather than {APP}, [[PATH]]; help drops '<str>'."""
    from veadk_mem.cli.typer_internals import set_usage_name

    bare = (param.metavar or param.name.upper()).strip("[]")

    def usage_name() -> str:
        name = bare
        if param.nargs != 1 and not name.endswith("...") and " " not in name:
            name += "..."
        return name if param.required else f"[{name}]"

    set_usage_name(param, usage_name)
    param.display_type_rich = lambda ctx: None
    param.display_type = lambda ctx: None


def usage_error(exc: Any, state: AppState) -> None:
    """Click's usage error as vmem's own: `vmem: error: ...` and a hint naming the help."""
    ctx = exc.ctx
    where = ctx.command_path if ctx is not None else "vmem"
    message = exc.format_message()
    if ctx is not None and ctx.info_name and where != "vmem":
        message = f"{where.removeprefix('vmem ')}: {message}"
    state.render.error(message)
    if any(flag in message for flag in ("--install-completion", "--show-completion")):
        # Typer's own flags, which vmem replaces (the wheel carries no completion files)
        state.render.hint("vmem completion bash|zsh|fish prints the script; add --install to put it in place")
        return
    state.render.hint(f"see '{where} --help'")
