"""`vmem session`: short-term memory on ADK's own session databases."""

from __future__ import annotations

import typer

app = typer.Typer(help="Inspect, clean, back up and migrate ADK session databases.", no_args_is_help=True)
