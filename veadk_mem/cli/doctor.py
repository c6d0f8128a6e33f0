"""`vmem doctor`: can vmem reach every store the configuration names?"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import typer

from veadk_mem.cli.columns import Column
from veadk_mem.cli.state import DbUrlOption, JsonOption, get_state, run
from veadk_mem.cli.terminal import terminal_safe, wrap_words
from veadk_mem.cli.wiring import table_shaped

if TYPE_CHECKING:
    from veadk_mem.cli.render import Renderer

STATUS_STYLE = {"ok": "green", "fail": "bold red", "warn": "yellow", "skip": "yellow"}  # NO_COLOR: none (Rich)


@table_shaped
def doctor(
    ctx: typer.Context,
    db_url: DbUrlOption = None,
    json_flag: JsonOption = False,
) -> None:
    """Check the reachability of every configured store; exit 1 when one fails.

    When the configured backend's SDK is not installed, that check fails with the install
    line and the exit code is 4.
    """
    from veadk_mem.ops.doctor import run_checks

    state = get_state(ctx, json_flag=json_flag)
    state.use_db_url(db_url)
    with state.render.spinner("checking the stores"):
        results = run(run_checks(state.loaded.settings))
    rows = [r.as_dict() for r in results]
    if state.render.machine or not state.render.out.is_terminal or state.render.as_records:
        state.render.records(
            rows, [Column.id("check", "name"), Column("status", "status"), Column.text("detail", "detail")]
        )
    else:
        _for_people(state.render, rows)
    codes = {r.exit_code for r in results if r.status == "fail"}
    if codes:
        raise typer.Exit(1 if 1 in codes else max(codes))


def _for_people(render: Renderer, rows: list[dict[str, Any]]) -> None:
    """On a terminal: each check's status (coloured) and name on a line, its detail under it
    wrapped between words, so a URL or path is never cut (one longer than the line stands
    alone on its own); the detail is what a person runs doctor for, never elided."""
    from rich.text import Text

    width = render.out.width - 1
    for row in rows:
        status = str(row["status"])
        line = Text()
        line.append(status.ljust(6), style=STATUS_STYLE.get(status, ""))
        line.append(terminal_safe(str(row["name"])), style="bold")
        render.out.print(line, crop=False, soft_wrap=True)
        detail = wrap_words(" " * 6 + terminal_safe(str(row["detail"])), width, indent=" " * 6)
        render.out.print(Text(detail), crop=False, soft_wrap=True)
