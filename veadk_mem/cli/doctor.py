"""`vmem doctor`: can vmem reach every store the configuration names?"""

from __future__ import annotations

import typer

from veadk_mem.cli.render import Column
from veadk_mem.cli.state import JsonOption, get_state, run


def doctor(
    ctx: typer.Context,
    json_flag: JsonOption = False,
) -> None:
    """Check the reachability of every configured store; exit 1 when one fails."""
    from veadk_mem.doctor import run_checks

    state = get_state(ctx, json_flag=json_flag)
    results = run(run_checks(state.loaded.settings))
    rows = [r.as_dict() for r in results]
    state.render.records(rows, [Column("check", "name"), Column("status", "status"), Column("detail", "detail")])
    if any(r.status == "fail" for r in results):
        raise typer.Exit(1)
