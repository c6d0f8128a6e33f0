"""`vmem ltm` and `vmem forget`: long-term memory."""

from __future__ import annotations

import typer

app = typer.Typer(help="Save sessions into long-term memory, search and manage it.", no_args_is_help=True)


def forget(user: str = typer.Argument(..., help="The user to forget.")) -> None:
    """Remove a user's sessions and memories everywhere (right to be forgotten)."""
    from veadk_mem.errors import NotSupported

    raise NotSupported("forget is not implemented yet")
