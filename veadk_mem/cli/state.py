"""Per-invocation state shared by every command: global flags, settings and the renderer."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Annotated, Any

import typer

from veadk_mem.cli.render import Renderer
from veadk_mem.errors import BadInput

if TYPE_CHECKING:
    from contextlib import AbstractContextManager

    from veadk_mem.config import LoadedSettings
    from veadk_mem.ops.history import Change


@dataclass
class AppState:
    """Global options, with settings loaded on first use so `--help` never reads config."""

    config_path: str | None = None
    json_mode: bool = False
    quiet: bool = False
    verbose: bool = False
    fmt: str | None = None  # jsonl, csv or tsv on a table-shaped command
    wide: bool = False  # tables on a terminal: every column, every character
    records: bool = False  # tables on a terminal: one block per row
    time_format: str | None = None  # tables on a terminal: compact, local or iso
    overrides: dict[str, Any] = field(default_factory=dict)
    argv: list[str] = field(default_factory=list)  # the command line as given, for the history
    _loaded: LoadedSettings | None = None
    _renderer: Renderer | None = None

    @property
    def loaded(self) -> LoadedSettings:
        if self._loaded is None:
            from veadk_mem.config import load_settings

            self._loaded = load_settings(self.config_path, self.overrides)
        return self._loaded

    @property
    def render(self) -> Renderer:
        if self._renderer is None:
            self._renderer = Renderer(
                json_mode=self.json_mode,
                quiet=self.quiet,
                verbose=self.verbose,
                fmt=self.fmt,
                wide=self.wide,
                records=self.records,
                time_format=self.time_format,
            )
        return self._renderer

    def use_config(self, path: str) -> None:
        """Read settings from this file (a -c given after the subcommand); call before they are read."""
        self.config_path = path
        self._loaded = None

    def renew_renderer(self) -> None:
        """Build the renderer again on next use: the output flags changed."""
        self._renderer = None

    def override(self, dotted: str, value: Any) -> None:
        """Let a command flag win over env and file; call before settings are read."""
        if value is not None:
            self.overrides[dotted] = value
            self._loaded = None

    def recording(self, command: str, store: str, *, dry_run: bool = False) -> AbstractContextManager[Change]:
        """The history entry of the change this command is about to make to `store` (ops/history.py):
        fill it with counts and ids; it is written when the block ends, unless a dry run."""
        from veadk_mem.ops.history import recording

        argv = self.argv or ["vmem"]
        return recording(
            self.loaded.settings.history, command, store, argv=argv, warn=self.render.warn, dry_run=dry_run
        )

    def use_db_url(self, db_url: str | None) -> None:
        """Make `--db-url` win; an empty value is refused, never a fall-back to the configured database."""
        if db_url is not None and not db_url.strip():
            raise BadInput("--db-url: empty; give a database URL or sqlite path, or leave the option out")
        self.override("short_term_memory.db_url", db_url)


JsonOption = Annotated[bool, typer.Option("--json", help="Print JSON on stdout.")]
DbUrlOption = Annotated[
    str | None,
    typer.Option(
        "--db-url", metavar="URL", help="SQLAlchemy URL or sqlite file path; wins over config and environment."
    ),
]


def get_state(ctx: typer.Context, *, json_flag: bool = False) -> AppState:
    """The AppState of this invocation; a command's own --json turns JSON mode on."""
    root = ctx.find_root()
    if not isinstance(root.obj, AppState):
        root.obj = AppState()
    state: AppState = root.obj
    if json_flag and not state.json_mode:
        if state.fmt is not None:
            raise BadInput(f"--json and --{state.fmt}: choose one output format")
        state.json_mode = True
        state.renew_renderer()
    return state


def library_warnings(verbose: bool) -> None:
    """Keep third-party warnings (Python warnings, and log records that would reach stderr
    through logging's last resort) out of the user's terminal unless --verbose; vmem's own
    warnings go through the renderer and are not affected. -W or PYTHONWARNINGS still win."""
    import logging
    import sys
    import warnings

    if not sys.warnoptions:
        warnings.simplefilter("default" if verbose else "ignore")
    root = logging.getLogger()
    if verbose:
        root.handlers = [h for h in root.handlers if not isinstance(h, logging.NullHandler)]
    elif not root.handlers:
        root.addHandler(logging.NullHandler())  # no last-resort "WARNING ..." lines from libraries


def run(coro: Any) -> Any:
    """Run a core coroutine to completion from a synchronous Typer command."""
    import asyncio

    return asyncio.run(coro)


def confirm_deletion(state: AppState, question: str, *, yes: bool) -> None:
    """Ask before deleting. --yes skips the question; with no terminal to ask on it is a
    usage error (exit 2); a 'no' exits 1. Either way nothing has been deleted."""
    import sys

    if yes:
        return
    if not sys.stdin.isatty():
        raise BadInput("confirmation needed but stdin is not a terminal: pass --yes (nothing was deleted)")
    if not state.render.confirm(question):
        state.render.message("aborted: nothing was deleted")
        raise typer.Exit(1)
