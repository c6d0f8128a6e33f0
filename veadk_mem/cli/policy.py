"""`vmem policy`: dry-run VeADK's auto-save memory policy."""

from __future__ import annotations

import typer

app = typer.Typer(help="Dry-run and show VeADK auto-save memory policies.", no_args_is_help=True)
