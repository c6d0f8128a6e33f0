"""`vmem doctor`: can vmem reach every store the configuration names?"""

from __future__ import annotations

import typer

from veadk_mem.cli.columns import Column
from veadk_mem.cli.state import DbUrlOption, JsonOption, get_state, run
from veadk_mem.cli.wiring import table_shaped


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
    state.render.records(
        rows, [Column.id("check", "name"), Column("status", "status"), Column.text("detail", "detail")]
    )
    codes = {r.exit_code for r in results if r.status == "fail"}
    if codes:
        raise typer.Exit(1 if 1 in codes else max(codes))
