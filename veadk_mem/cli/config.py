"""`vmem config`: show the effective settings, write a starter file, say which file is used."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from veadk_mem import files
from veadk_mem.cli.columns import Column
from veadk_mem.cli.state import DbUrlOption, JsonOption, get_state
from veadk_mem.cli.wiring import table_shaped
from veadk_mem.errors import BadInput

app = typer.Typer(help="Show and create vmem configuration.", no_args_is_help=True)


@app.command("show")
@table_shaped
def show(
    ctx: typer.Context,
    db_url: DbUrlOption = None,
    json_flag: JsonOption = False,
) -> None:
    """Print every effective setting with its source; secrets are masked."""
    from veadk_mem.config import effective_rows

    state = get_state(ctx, json_flag=json_flag)
    state.use_db_url(db_url)
    rows = effective_rows(state.loaded)
    files = sorted({r["source"][len("file ") :] for r in rows if str(r["source"]).startswith("file ")})
    state.render.records(
        rows,
        [
            Column.id("key", "key"),
            Column.text("value", "value"),
            # the config file is named once in the title, not on every row it set
            Column("source", "source", lambda s: "file" if len(files) == 1 and s == f"file {files[0]}" else s),
            Column("env", "env", no_wrap=True),
        ],
        json_rows={r["key"]: {"value": r["value"], "source": r["source"], "env": r["env"]} for r in rows},
        title=f"config file: {files[0]}" if len(files) == 1 else None,
    )


@app.command("init")
def init(
    ctx: typer.Context,
    path: Annotated[
        Path | None, typer.Argument(metavar="PATH", help="Where to write it (default: the XDG config path).")
    ] = None,
    force: Annotated[bool, typer.Option("--force", help="Overwrite an existing file.")] = False,
) -> None:
    """Write a commented starter config (mode 0600): every key with its default as a comment.

    Nothing is pinned: a key keeps following its default and its environment variable until
    you uncomment its line.
    """
    from veadk_mem.config import config_candidates, starter_toml

    state = get_state(ctx)
    target = path or config_candidates()[-1]
    if (target.exists() or target.is_symlink()) and not force:  # a dangling link too
        raise BadInput(f"{target}: already exists (use --force to overwrite)")
    try:
        target.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    except OSError as exc:
        raise BadInput(f"{target}: cannot write: {exc.strerror}") from None
    # 0600: it has slots for passwords and API keys; --force replaces a link, never writes through it
    files.write_text(target, starter_toml(), replace_link=force)
    state.render.message(f"wrote {target}")
    if state.json_mode:
        state.render.json({"path": str(target)})


@app.command("path")
def path_cmd(
    ctx: typer.Context,
    json_flag: JsonOption = False,
) -> None:
    """Print the config file in use and the places vmem looks for one."""
    from veadk_mem.config import config_candidates, find_config_file

    state = get_state(ctx, json_flag=json_flag)
    used, why = find_config_file(state.config_path)
    searched = [str(p) for p in config_candidates()]
    if state.json_mode:
        state.render.json({"path": str(used) if used else None, "reason": why, "searched": searched})
        return
    if used:
        state.render.text(str(used))
        state.render.message(f"({why})")
    else:
        state.render.message("no config file; defaults and environment apply. Searched: " + ", ".join(searched))
