"""What every vmem command gets without declaring it: the global flags (-c, -q, -v, --json,
and the table layout: --wide, --records, --time-format) before or after the subcommand,
--jsonl/--csv/--tsv on table-shaped commands, real metavars
in help, and Click's usage errors in vmem's own one-line form.

The flags are shared `Annotated` options that `add_global_options` adds to each command's
signature before Typer reads it (Typer has no options that subcommands inherit); examples and
metavars are set on the Click tree Typer builds (`wire_commands`). Both are done once, for the
whole app, so a command added later gets all of it for free.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Annotated, Any

import typer

from veadk_mem.cli.examples import epilog
from veadk_mem.cli.typer_internals import UsageError, current_context, set_usage_name
from veadk_mem.errors import BadInput

if TYPE_CHECKING:
    from veadk_mem.cli.state import AppState

TABLE_SHAPED = "__vmem_table_shaped__"


def table_shaped(func: Callable[..., Any]) -> Callable[..., Any]:
    """Mark a command whose data is a table: it takes --jsonl, --csv and --tsv."""
    setattr(func, TABLE_SHAPED, True)
    return func


ConfigOption = Annotated[
    str | None,
    typer.Option("--config", "-c", metavar="FILE", help="TOML config file (else $VMEM_CONFIG, ./vmem.toml, XDG)."),
]
GlobalJsonOption = Annotated[bool, typer.Option("--json", help="Print stable JSON on stdout.")]
QuietOption = Annotated[bool, typer.Option("--quiet", "-q", help="Only data and errors; no progress or notes.")]
VerboseOption = Annotated[bool, typer.Option("--verbose", "-v", help="Tracebacks and extra detail on errors.")]
JsonlOption = Annotated[bool, typer.Option("--jsonl", help="One JSON object per line on stdout.")]
CsvOption = Annotated[bool, typer.Option("--csv", help="CSV on stdout: a header line, a row a record.")]
TsvOption = Annotated[bool, typer.Option("--tsv", help="TSV on stdout: a header line, a row a record.")]
WideOption = Annotated[bool, typer.Option("--wide", help="Tables on a terminal: every column, values whole (wrapped).")]
RecordsOption = Annotated[bool, typer.Option("--records", help="Tables on a terminal: one block per row.")]
TimeFormatOption = Annotated[
    str | None,
    typer.Option(
        "--time-format",
        metavar="compact|local|iso",
        help="Times in tables on a terminal: 3d ago, local time or ISO UTC.",
    ),
]

# The global flags, also accepted after the subcommand; and the formats of table-shaped commands.
GLOBAL_OPTIONS: dict[str, tuple[Any, Any]] = {
    "g_config": (ConfigOption, None),
    "g_json": (GlobalJsonOption, False),
    "g_quiet": (QuietOption, False),
    "g_verbose": (VerboseOption, False),
    "g_wide": (WideOption, False),
    "g_records": (RecordsOption, False),
    "g_time_format": (TimeFormatOption, None),
}
FORMAT_OPTIONS: dict[str, tuple[Any, Any]] = {
    "g_jsonl": (JsonlOption, False),
    "g_csv": (CsvOption, False),
    "g_tsv": (TsvOption, False),
}


def _option_names(annotation: Any) -> set[str]:
    """The option strings (`--json`, `-c`) an `Annotated[..., typer.Option(...)]` declares."""
    from typing import get_args

    names: set[str] = set()
    for info in get_args(annotation)[1:]:
        decls = getattr(info, "param_decls", None) or ()
        default = getattr(info, "default", ...)
        names.update(d for d in (*([default] if isinstance(default, str) else []), *decls) if d.startswith("-"))
    return names


def with_global_options(func: Callable[..., Any]) -> Callable[..., Any]:
    """`func` as a command that also takes the global flags (and, when table-shaped, the
    formats) it does not declare itself: shared `Annotated` options added to its signature,
    which Typer turns into Click options as it does the command's own, and applied to the
    invocation's state before `func` runs."""
    import functools
    import inspect
    from typing import get_type_hints

    if getattr(func, "_vmem_global_options", False):
        return func
    hints = get_type_hints(func, include_extras=True)
    signature = inspect.signature(func)
    own = [p.replace(annotation=hints.get(p.name, p.annotation)) for p in signature.parameters.values()]
    taken = set().union(*(_option_names(p.annotation) for p in own))
    wanted = dict(GLOBAL_OPTIONS)
    if getattr(func, TABLE_SHAPED, False):
        wanted |= FORMAT_OPTIONS
    extra = [
        inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=annotation)
        for name, (annotation, default) in wanted.items()
        if not _option_names(annotation) & taken
    ]
    names = {p.name for p in extra}

    @functools.wraps(func)
    def command(*args: Any, **kwargs: Any) -> Any:
        from veadk_mem.cli.state import get_state

        flags = {name: kwargs.pop(name) for name in names if name in kwargs}
        apply_flags(get_state(current_context()), **flags)
        return func(*args, **kwargs)

    command.__signature__ = signature.replace(parameters=[*own, *extra])  # type: ignore[attr-defined]
    command.__annotations__ = {p.name: p.annotation for p in [*own, *extra]}
    command._vmem_global_options = True  # type: ignore[attr-defined]
    return command


def add_global_options(app: typer.Typer) -> None:
    """Give every command registered under `app`, in sub-apps too, the global flags (see
    `with_global_options`): done once on the Typer app, so a command added later gets them for free."""
    for info in app.registered_commands:
        if info.callback is not None:
            info.callback = with_global_options(info.callback)
    for group in app.registered_groups:
        if group.typer_instance is not None:
            add_global_options(group.typer_instance)


def wire_commands(group: Any, path: str = "") -> None:
    """Give every command, groups included, its examples (examples.py), a whole one-line
    summary in its parent's command list, and real metavars in its help."""
    _teach(group, path)
    for name, cmd in getattr(group, "commands", {}).items():
        sub = f"{path} {name}".strip()
        if getattr(cmd, "commands", None) is not None:
            wire_commands(cmd, sub)
        else:
            _teach(cmd, sub)
            _guard_values(cmd)
            for p in cmd.params:
                if p.param_type_name == "argument":
                    _real_metavar(p)


def _guard_values(cmd: Any) -> None:
    """An option's value that is one of the command's own options (`--db-url -n 3`, from an
    empty `$DB`) is exit 2 "--db-url needs a value", not `-n` taken as the URL (#45 item 10)."""
    valued = {o for p in cmd.params if p.param_type_name == "option" and not p.is_flag for o in p.opts}
    known = {o for p in cmd.params if p.param_type_name == "option" for o in [*p.opts, *p.secondary_opts]}
    known |= {"--help"}
    parse = cmd.parse_args

    def parse_args(ctx: Any, args: list[str]) -> Any:
        for i, arg in enumerate(args[:-1]):
            if arg == "--":
                break
            if arg in valued and args[i + 1] in known:
                raise UsageError(f"{arg} needs a value (got the option {args[i + 1]}: an empty variable?)", ctx)
        return parse(ctx, args)

    cmd.parse_args = parse_args


def _teach(cmd: Any, path: str) -> None:
    """The examples at the end of --help, and the summary Click would cut with '...' at 45
    characters given whole (the command list wraps it instead)."""

    cmd.epilog = cmd.epilog or epilog(path)
    if not cmd.short_help and cmd.help:
        first = cmd.help.split("\n\n", 1)[0]
        cmd.short_help = " ".join(first.replace("\b", "").split())


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
    g_wide: bool = False,
    g_records: bool = False,
    g_time_format: str | None = None,
) -> None:
    """Global flags given after the subcommand count as if given before it."""

    if g_config is not None:
        state.use_config(g_config)
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
    if g_wide and g_records:
        raise BadInput("--wide and --records: choose one table layout")
    from veadk_mem.cli.render import TIME_FORMATS

    if g_time_format is not None and g_time_format not in TIME_FORMATS:
        raise BadInput(f"--time-format: expected one of {', '.join(TIME_FORMATS)}, got {g_time_format!r}")
    state.wide, state.records = state.wide or g_wide, state.records or g_records
    state.time_format = g_time_format or state.time_format
    state.renew_renderer()


def _real_metavar(param: Any) -> None:
    """Usage shows APP, [PATH], FILE... rather than {APP}, [[PATH]]; help drops '<str>'."""

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
