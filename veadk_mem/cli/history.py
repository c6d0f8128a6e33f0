"""`vmem history`: every change vmem made to a store, and `vmem history show N`, one entry whole."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from veadk_mem.cli.columns import Column
from veadk_mem.cli.state import JsonOption, get_state
from veadk_mem.cli.wiring import table_shaped
from veadk_mem.errors import BadInput

COLUMNS = [
    Column.id("n", "n"),
    Column.time("when", "when"),
    Column("user", "os_user", no_wrap=True, drop=3),
    Column("command", "command", no_wrap=True),
    Column.text("changed", "changed"),
    Column("outcome", "outcome", no_wrap=True),
    Column.free("store", "store", drop=5),
    Column("host", "host", no_wrap=True, drop=6),
]  # the entry number is the key (`history show N`); host, store, then the user go first


def _row(entry: dict[str, Any]) -> dict[str, Any]:
    from veadk_mem.ops.history import since_epoch, summary

    outcome = entry["outcome"] if entry["outcome"] == "ok" else f"{entry['outcome']} ({entry['exit_code']})"
    return {**entry, "when": since_epoch(entry["at"]), "changed": summary(entry["counts"]), "outcome": outcome}


def _number(words: list[str]) -> int | None:
    """None to list entries; N for `show N`; exit 2 for anything else."""
    if not words:
        return None
    if len(words) == 2 and words[0] == "show" and words[1].isascii() and words[1].isdigit():  # not "²"
        return int(words[1])
    raise BadInput(f"history: expected nothing or 'show N' (N an entry number), got {' '.join(words)!r}")


@table_shaped
def history(
    ctx: typer.Context,
    words: Annotated[
        list[str] | None, typer.Argument(metavar="[show N]", help="Print entry N whole (its receipt included).")
    ] = None,
    since: Annotated[
        str | None, typer.Option("--since", metavar="TIME", help="Entries since: ISO date/time (UTC) or 7d ago.")
    ] = None,
    user: Annotated[str | None, typer.Option("--user", "-u", metavar="USER", help="Only this OS user's.")] = None,
    command: Annotated[
        str | None,
        typer.Option("--command", metavar="COMMAND", help="Only this command's ('session delete'; 'ltm': all ltm)."),
    ] = None,
    limit: Annotated[
        int, typer.Option("--limit", "-n", min=0, metavar="N", help="Show at most N, newest first (0: all).")
    ] = 50,
    json_flag: JsonOption = False,
) -> None:
    """Every change vmem made to a store: when, who, the command, what changed, the outcome.

    Read from the history file ([history] path; default $XDG_DATA_HOME/vmem/history.db).
    `vmem history show N` prints one entry whole, with an erasure's receipt.
    """
    from veadk_mem.ops.history import HistoryLog, history_path
    from veadk_mem.sessions.timespec import parse_time

    state = get_state(ctx, json_flag=json_flag)
    n = _number(words or [])
    log = HistoryLog(history_path(state.loaded.settings.history))
    if n is not None:
        entry = log.entry(n)
        if state.render.json_mode or state.render.fmt is not None:
            state.render.json(entry)
            return
        state.render.fields([(k, v) for k, v in entry.items() if v not in (None, {}, [])], title=f"history entry {n}")
        return
    after = parse_time(since, "--since") if since else None
    entries = log.entries(since=after, user=user, command=command, limit=limit or None)
    state.render.records([_row(e) for e in entries], COLUMNS, json_rows=entries, empty="no changes recorded")
