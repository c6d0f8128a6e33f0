"""The `vmem` Typer app: global options, command groups, and the error-to-exit-code mapping."""

from __future__ import annotations

import copy
import functools
import os
import sys
from typing import TYPE_CHECKING, Annotated, Any

import typer
from typer.core import TyperGroup

from veadk_mem import __version__
from veadk_mem.cli.names import attach as attach_names
from veadk_mem.cli.state import AppState, get_state, library_warnings
from veadk_mem.cli.terminal import terminal_safe, write_text
from veadk_mem.cli.typer_internals import NoArgsIsHelpError, UsageError, enable_completion
from veadk_mem.cli.wiring import add_global_options, usage_error, wire_commands
from veadk_mem.errors import VmemError

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from veadk_mem.cli.typer_internals import Context as ClickContext


FIRST_COMMANDS = ("session", "ltm", "policy")  # listed first in `vmem --help`
YOUNG_OBJECTS = 200_000  # net allocations between two collections of the youngest generation


class VmemGroup(TyperGroup):
    """Root group that turns every VmemError, and Click's usage errors, into a one-line
    message and its exit code, and gives every command its examples and metavars (wiring.py)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        wire_commands(self)
        attach_names(self)  # apps, users and session ids complete from the session database

    def list_commands(self, ctx: Any) -> list[str]:
        """session, ltm and policy first (what people come for), then the rest as registered."""
        first = [name for name in FIRST_COMMANDS if name in self.commands]
        return first + [name for name in self.commands if name not in first]

    def make_context(self, info_name: str | None, args: list[str], parent: Any = None, **extra: Any) -> Any:

        given = [info_name or "vmem", *args]  # before parsing takes it apart: the history's command line
        try:
            ctx = super().make_context(info_name, args, parent=parent, **extra)
            if not isinstance(ctx.obj, AppState):
                ctx.obj = AppState()
            ctx.obj.argv = given
            return ctx
        except NoArgsIsHelpError:
            raise
        except UsageError as exc:
            usage_error(exc, AppState())
            raise typer.Exit(2) from None

    def invoke(self, ctx: ClickContext) -> Any:

        try:
            return super().invoke(ctx)
        except NoArgsIsHelpError:
            raise
        except UsageError as exc:
            usage_error(exc, ctx.obj if isinstance(ctx.obj, AppState) else AppState())
            raise typer.Exit(2) from None
        except VmemError as exc:
            from veadk_mem.config import redact

            if isinstance(ctx.obj, AppState) and ctx.obj.verbose:
                _traceback(exc)
            _report(ctx, redact(exc.message), exc.hint, getattr(exc, "candidates", ()))
            raise typer.Exit(exc.exit_code) from None
        except (typer.TyperException, typer.Exit, typer.Abort):
            raise
        except KeyboardInterrupt:
            _report(ctx, "interrupted", None)
            raise typer.Exit(130) from None
        except BrokenPipeError:  # `vmem ... | head` closed the pipe: stop quietly, as Unix tools do
            _silence_stdout()
            raise typer.Exit(141) from None
        except Exception as exc:  # the last line of defence
            state = ctx.obj if isinstance(ctx.obj, AppState) else AppState()
            from veadk_mem.config import redact

            if state.verbose:
                import traceback

                write_text(sys.stderr, redact(traceback.format_exc()))  # no secret, even in a traceback
            _report(ctx, redact(f"unexpected {type(exc).__name__}: {exc}"), "run again with --verbose for a traceback")
            raise typer.Exit(1) from None


def _traceback(exc: VmemError) -> None:
    """--verbose: the traceback of what a vmem error stands for (a driver's or SDK's own exception,
    which the one-line message replaced with `raise ... from None`), secrets redacted."""
    import traceback

    from veadk_mem.config import redact

    cause = exc.__cause__ or exc.__context__
    shown = cause if cause is not None else exc
    write_text(sys.stderr, redact("".join(traceback.format_exception(shown))))


def _silence_stdout() -> None:
    """Point stdout at /dev/null so flushing it at exit raises no second BrokenPipeError."""
    import os

    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):  # not a real file (a test runner's buffer)
        pass
    finally:
        os.close(devnull)


def _report(ctx: ClickContext, message: str, hint: str | None, candidates: Sequence[str] = ()) -> None:
    """The error line, the candidates an ambiguous name matched (one a line, even with --quiet), the hint."""
    state = ctx.obj if isinstance(ctx.obj, AppState) else AppState()
    state.render.error(message)
    if candidates:
        write_text(sys.stderr, "".join(f"{terminal_safe(c)}\n" for c in candidates))
    if hint:
        state.render.hint(hint)


def _version(value: bool) -> None:
    if value:
        AppState().render.text(f"vmem {__version__}")
        raise typer.Exit()


def root(
    ctx: typer.Context,
    config: Annotated[
        str | None,
        typer.Option("--config", "-c", metavar="FILE", help="TOML config file (else $VMEM_CONFIG, ./vmem.toml, XDG)."),
    ] = None,
    json_mode: Annotated[bool, typer.Option("--json", help="Print stable JSON on stdout.")] = False,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="Only data and errors; no progress or notes.")] = False,
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Tracebacks and extra detail on errors.")] = False,
    version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="Print the version and exit.")
    ] = False,
) -> None:
    """Administer the memory of VeADK / Google ADK agents."""
    state = get_state(ctx)
    state.config_path = config
    state.json_mode = json_mode
    state.quiet = quiet
    state.verbose = verbose
    library_warnings(verbose)  # again, after the subcommand's own flags (wiring.apply_flags)


@functools.cache  # it adds commands to a shared group: once per process, however often the app is built
def _session() -> list[tuple[str, Any]]:
    from veadk_mem.cli import retention as retention_cmd
    from veadk_mem.cli import session as session_cmd

    session_cmd.app.command("prune")(retention_cmd.prune)
    session_cmd.app.command("vacuum")(retention_cmd.vacuum)
    session_cmd.app.command("index")(retention_cmd.index)
    return [("session", session_cmd.app)]


@functools.cache  # it adds commands to a shared group: once per process, however often the app is built
def _ltm() -> list[tuple[str, Any]]:
    from veadk_mem.cli import erasure as erasure_cmd
    from veadk_mem.cli import ltm as ltm_cmd
    from veadk_mem.cli import ltm_reembed, ltm_sync, ltm_transfer

    ltm_cmd.app.command("show")(erasure_cmd.show)
    ltm_cmd.app.command("export")(ltm_transfer.export)
    ltm_cmd.app.command("import")(ltm_transfer.import_)
    ltm_cmd.app.command("copy")(ltm_transfer.copy)
    ltm_cmd.app.command("reembed")(ltm_reembed.reembed)
    ltm_cmd.app.command("sync")(ltm_sync.sync)
    return [("ltm", ltm_cmd.app)]


def _policy() -> list[tuple[str, Any]]:
    from veadk_mem.cli import policy as policy_cmd

    return [("policy", policy_cmd.app)]


def _config() -> list[tuple[str, Any]]:
    from veadk_mem.cli import config as config_cmd

    return [("config", config_cmd.app)]


def _retention() -> list[tuple[str, Any]]:
    from veadk_mem.cli import retention as retention_cmd

    return [("retention", retention_cmd.app)]


def _doctor() -> list[tuple[str, Any]]:
    from veadk_mem.cli import doctor as doctor_cmd

    return [("doctor", doctor_cmd.doctor)]


def _forget() -> list[tuple[str, Any]]:
    from veadk_mem.cli import ltm as ltm_cmd

    return [("forget", ltm_cmd.forget)]


def _history() -> list[tuple[str, Any]]:
    from veadk_mem.cli import history as history_cmd

    return [("history", history_cmd.history)]


def _completion() -> list[tuple[str, Any]]:
    from veadk_mem.cli import completion as completion_cmd

    return [("completion", completion_cmd.completion)]


def _browse() -> list[tuple[str, Any]]:
    from veadk_mem.cli import browse as browse_cmd

    return [("browse", browse_cmd.browse)]


# The top-level commands in registration order, each with the function that imports its module
# (once: the sub-apps are module state) and gives its Typer sub-app or command function.
# `completion` prints the script of the whole tree, so it is never loaded alone (see `_wanted`).
COMMANDS: dict[str, Callable[[], list[tuple[str, Any]]]] = {
    "session": functools.cache(_session),
    "ltm": functools.cache(_ltm),
    "policy": functools.cache(_policy),
    "config": functools.cache(_config),
    "retention": functools.cache(_retention),
    "doctor": functools.cache(_doctor),
    "forget": functools.cache(_forget),
    "history": functools.cache(_history),
    "completion": functools.cache(_completion),
    "browse": functools.cache(_browse),
}
ALONE = frozenset(COMMANDS) - {"completion"}  # commands that run with the rest of the tree unloaded


def build_app(only: str | None = None, sub: str | None = None) -> typer.Typer:
    """The vmem Typer app: every command, or (`only`) the one top-level command a run invokes,
    and of a command group (`sub`) the one subcommand it names.

    Importing a command module imports what its commands need (the session store's modules,
    the long-term backends' registry, the erasure job ...): `vmem session list` need not pay
    for the ltm, policy and sync modules, which only `vmem --help` and the docs list, nor
    Typer's reading of the signatures of `session import`, `export` and the rest (#45 item 13).
    """
    root_app = typer.Typer(
        cls=VmemGroup,
        name="vmem",
        help="Administer the memory of VeADK / Google ADK agents: sessions, long-term memory, save policies.",
        no_args_is_help=True,
        add_completion=False,
        pretty_exceptions_enable=False,
        context_settings={"help_option_names": ["-h", "--help"]},
        rich_markup_mode=None,
    )
    root_app.callback()(root)
    for name, load in COMMANDS.items():
        if only is not None and name != only:
            continue
        for cmd_name, target in load():
            if isinstance(target, typer.Typer):
                root_app.add_typer(_narrowed(target, sub if only is not None else None), name=cmd_name)
            else:
                root_app.command(cmd_name)(target)
    add_global_options(root_app)
    return root_app


def _narrowed(group: typer.Typer, sub: str | None) -> typer.Typer:
    """`group` holding only its command named `sub`; the whole group when it has none by that
    name (a typo, which Click answers with "did you mean" from every name) or `sub` is None.
    A copy: the group itself (module state, shared by every build) keeps all its commands."""
    chosen = [info for info in group.registered_commands if sub is not None and info.name == sub]
    if not chosen or group.registered_groups:
        return group
    view = copy.copy(group)
    view.registered_commands = chosen
    return view


@functools.cache
def _whole_app() -> typer.Typer:
    return build_app()


def __getattr__(name: str) -> typer.Typer:
    """`app`, the whole vmem app (docs, tests, `typer.main.get_command(app)`), built on first use."""
    if name == "app":
        return _whole_app()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _wanted(words: Sequence[str]) -> str | None:
    """The top-level command a command line invokes, when it can run alone; else None (all).

    Skips the root's options (`--config FILE` and `-c FILE` take a value); the first other word
    names the command. Anything else (no command, `--help`, a typo Click should answer with
    "did you mean", `completion`) loads the whole tree.
    """
    rest = _from_command(words)
    return rest[0] if rest and rest[0] in ALONE else None


def _wanted_sub(words: Sequence[str]) -> str | None:
    """The word after the top-level command: the subcommand of a group (`list` in `session
    list`), or None when an option (`--help`) or nothing follows it."""
    rest = _from_command(words)
    return rest[1] if len(rest) > 1 and not rest[1].startswith("-") else None


def _from_command(words: Sequence[str]) -> Sequence[str]:
    """The words from the top-level command on, the root's options skipped; empty when none
    is named (no word but options, or `--` first)."""
    skip = False
    for i, word in enumerate(words):
        if skip:
            skip = False
        elif word == "--":
            return ()
        elif word.startswith("-"):
            skip = word in ("--config", "-c") or (not word.startswith("--") and word.endswith("c"))
        else:
            return words[i:]
    return ()


def main() -> None:
    """Console-script entry point: builds the part of the app the command line invokes."""
    _spare_the_collector()
    words = sys.argv[1:]
    if os.environ.get("_VMEM_COMPLETE"):  # the scripts in completions/ ask for names this way
        enable_completion()
        # bash passes the words in COMP_WORDS, zsh and fish in _TYPER_COMPLETE_ARGS; the first is `vmem`
        given = os.environ.get("COMP_WORDS") or os.environ.get("_TYPER_COMPLETE_ARGS") or ""
        words = given.split()[1:]
    build_app(_wanted(words), _wanted_sub(words))(prog_name="vmem")


def _spare_the_collector() -> None:
    """Fewer, cheaper cyclic collections for a short-lived process.

    What is loaded by now (Typer, pydantic, vmem's modules) lives as long as the process, so it
    is frozen out of every later collection; and the youngest generation is collected every
    YOUNG_OBJECTS net allocations rather than 700. A command's own imports (SQLAlchemy, the
    store, the settings models: about 100,000 objects, all living as long as the process) fit
    under that, so `session list` or `get` runs no collection at all; a long command collects
    each young object once, whatever the threshold, rather than everything loaded again and again.
    Reference counting still frees all that is not cyclic; the rest waits for a collection.
    """
    import gc

    gc.freeze()
    gc.set_threshold(YOUNG_OBJECTS, 20, 20)
