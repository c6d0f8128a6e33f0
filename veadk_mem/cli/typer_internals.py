"""Every use vmem makes of Typer's private parts, in one module (issue 24 item 7).

Typer 0.29 vendors Click as `typer._click`, and draws an argument's usage from the private
`_usage_display_name`. The rest of cli/ goes through the names below, so a Typer release that
moves them breaks here, and `tests/test_private_internals.py` (pinned to the `typer` range in
pyproject.toml) says which one moved.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from typer._click.exceptions import NoArgsIsHelpError, UsageError
from typer._click.globals import get_current_context

if TYPE_CHECKING:
    from typer._click.core import Context as Context

__all__ = [
    "Context",
    "NoArgsIsHelpError",
    "UsageError",
    "current_context",
    "enable_completion",
    "has_completer",
    "set_completer",
    "set_usage_name",
]


def current_context() -> Any:
    """The Click context of the command running now."""
    return get_current_context()


def set_usage_name(param: Any, name: Callable[[], str]) -> None:
    """Have Typer's usage line and help draw `param` as `name()` returns it."""
    param._usage_display_name = name


def set_completer(param: Any, complete: Callable[[Any, Any, str], list[str]]) -> None:
    """Have Click's completion ask `complete(ctx, param, incomplete)` for `param`'s values."""
    param._custom_shell_complete = complete


def has_completer(param: Any) -> bool:
    """True when `param` has a shell_complete callback (set_completer)."""
    return getattr(param, "_custom_shell_complete", None) is not None


def enable_completion() -> None:
    """Register Typer's bash, zsh and fish completion classes (the app is built without its
    --install-completion), so `_VMEM_COMPLETE=complete_bash` answers."""
    from typer._completion_classes import completion_init

    completion_init()
