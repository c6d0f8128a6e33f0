"""`vmem browse`: a keyboard browser of sessions and memories in the terminal (extra `[tui]`).

Only this command imports Textual, and only when it runs (`tui.py`); without the extra it
exits 4 with the install line. What it shows and does is `data.py`, the CLI's own core calls.
"""

from __future__ import annotations

from typing import Annotated

import typer

from veadk_mem.cli.state import DbUrlOption
from veadk_mem.errors import BadInput, missing_extra


def browse(
    ctx: typer.Context,
    db_url: DbUrlOption = None,
    app_name: Annotated[str | None, typer.Option("--app", "-a", metavar="APP", help="Only this app.")] = None,
    user: Annotated[str | None, typer.Option("--user", "-u", metavar="USER", help="Only this user.")] = None,
    read_only: Annotated[
        bool, typer.Option("--read-only", help="Look only: every action (delete, export) is turned off.")
    ] = False,
) -> None:
    """Browse sessions and memories in the terminal: apps, users, sessions, timelines, memories.

    Keys are in the footer, ? shows them all, q quits. Deleting and exporting show the plan
    the matching command prints and ask first; --read-only turns them off. Needs the extra:
    pip install 'veadk-mem[tui]'.
    """
    import importlib.util
    import sys

    from veadk_mem.cli.state import get_state, run

    if importlib.util.find_spec("textual") is None:
        raise missing_extra("textual", "tui")
    if not (sys.stdin.isatty() and sys.stdout.isatty()):
        raise BadInput("browse needs a terminal: stdin and stdout are not both one")
    state = get_state(ctx)
    state.use_db_url(db_url)
    from veadk_mem.sessions.store import SessionStore

    async def probe() -> None:  # the one-line error and exit code of every command, before the screen
        async with SessionStore.from_settings(state.loaded.settings):
            pass

    run(probe())
    from veadk_mem.cli.browse.tui import BrowseApp

    BrowseApp(state, app_name=app_name, user_id=user, read_only=read_only).run()
