"""`vmem policy`: dry-run VeADK's auto-save memory policy on sessions, and show a resolved policy."""

from __future__ import annotations

from itertools import chain
from typing import TYPE_CHECKING, Annotated, Any

import typer

from veadk_mem.cli.columns import KEY, Column
from veadk_mem.cli.state import AppState, DbUrlOption, JsonOption, get_state, run
from veadk_mem.cli.wiring import table_shaped
from veadk_mem.errors import BadInput

if TYPE_CHECKING:
    from veadk_mem.events import Session
    from veadk_mem.policy import DryRun, ResolvedPolicy

app = typer.Typer(help="Dry-run and show VeADK auto-save memory policies.", no_args_is_help=True)

PolicyOption = Annotated[
    str | None,
    typer.Option(
        "--policy",
        "-p",
        metavar="POLICY",
        help="Preset (default, all, custom), a [policy.NAME] from the config, a JSON/TOML file, or inline JSON. "
        "Default: [policy] default of the config.",
    ),
]
AssistantOption = Annotated[
    bool,
    typer.Option(
        "--include-assistant", help="Add the assistant role to the default preset, as VeADK does for openviking."
    ),
]


def _resolve(state: AppState, spec: str | None, include_assistant: bool) -> ResolvedPolicy:
    """The policy named on the command line, else the configured default, with warnings on stderr."""
    from veadk_mem.policy import configured_policy

    return configured_policy(spec, state.loaded.settings, include_assistant=include_assistant, warn=state.render.warn)


def _shown(value: Any) -> str:
    if value is None:
        return "null (no filter)"
    if isinstance(value, list):
        return "[" + ", ".join(str(v) for v in value) + "]"
    return str(value).lower() if isinstance(value, bool) else str(value)


@app.command("test")
@table_shaped
def test_cmd(
    ctx: typer.Context,
    source: Annotated[
        list[str] | None,
        typer.Argument(
            metavar="FILE|- or APP USER ID",
            help="One ADK session JSON file (one session, a list, or JSONL) or - for stdin. "
            "With --from-store: APP USER ID.",
            show_default=False,
        ),
    ] = None,
    from_store: Annotated[
        bool, typer.Option("--from-store", help="Read the session APP USER ID from the session database.")
    ] = False,
    db_url: DbUrlOption = None,
    policy: PolicyOption = None,
    include_assistant: AssistantOption = False,
    json_flag: JsonOption = False,
) -> None:
    """What VeADK would save from a session, and why.

    One row per event (saved or dropped, with the reason and a preview), then a summary
    on stderr. --json prints {"policy", "saved", "events"}; "saved" is exactly the list
    of strings VeADK hands to the long-term-memory backend.
    """
    from veadk_mem.events import read_sessions
    from veadk_mem.policy import dry_run

    state = get_state(ctx, json_flag=json_flag)
    state.use_db_url(db_url)
    args = source or []
    if from_store:
        if len(args) != 3:
            raise BadInput("--from-store APP USER ID: give exactly three values")
    elif len(args) != 1:
        raise BadInput("give one session JSON file or '-' (or --from-store APP USER ID)")
    elif db_url:
        raise BadInput("--db-url names the session database: use it with --from-store")
    resolved = _resolve(state, policy, include_assistant)
    sessions = [_stored_session(state, *args)] if from_store else read_sessions(args[0])
    result = dry_run(sessions, resolved, warn=state.render.warn)
    if state.json_mode:
        state.render.pieces(chain(result.json_pieces(), "\n"))
    else:
        _table(state, result)


def _stored_session(state: AppState, app_name: str, user: str, session_id: str) -> Session:
    """One session straight from the configured session database (NotFound: exit 3)."""
    from veadk_mem.sessions.store import SessionStore

    async def load() -> Session:
        async with SessionStore.from_settings(state.loaded.settings) as store:
            return await store.get_session(app_name, user, session_id)

    result: Session = run(load())
    return result


def _table(state: AppState, result: DryRun) -> None:
    """One row per event for people, then the summary line on stderr."""
    from veadk_mem.policy import memory_gist

    several = len(result.session_ids) > 1
    rows = [
        {
            "n": index,
            "session": d.session_id,
            "time": d.event.timestamp or None,
            "author": d.event.author,
            "role": d.role,
            "types": ", ".join(d.types),
            "decision": "saved" if d.saved else "dropped",
            "reason": d.reason,
            "memory": memory_gist(d.memory),
        }
        for index, d in enumerate(result.decisions(), 1)
    ]
    columns = [
        Column("#", "n", justify="right", kind=KEY),
        *([Column("session", "session", no_wrap=True, drop=1)] if several else []),
        Column.time("time", "time", clock=True, drop=3),
        Column("author", "author", drop=2),
        Column("role", "role", drop=5),
        Column("types", "types", drop=4),
        Column("decision", "decision"),
        Column.free("reason", "reason"),
        Column.text("memory", "memory", max_width=60),
    ]  # on a narrow terminal: role, types, time, author, then the session go first; the reason is elided
    state.render.table(rows, columns, title=f"policy: {result.policy.origin}", empty="no events")
    state.render.message(result.summary())


@app.command("show")
@table_shaped
def show_cmd(
    ctx: typer.Context,
    policy: Annotated[
        str | None,
        typer.Argument(
            metavar="POLICY", help="Preset, [policy.NAME], JSON/TOML file or inline JSON (default: the configured one)."
        ),
    ] = None,
    include_assistant: AssistantOption = False,
    json_flag: JsonOption = False,
) -> None:
    """Print a resolved policy, field by field.

    Each field says whether the preset or an override set it.
    """
    state = get_state(ctx, json_flag=json_flag)
    resolved = _resolve(state, policy, include_assistant)
    described = resolved.describe()
    rows = [
        {"field": name, "value": _shown(value), "source": described["sources"][name]}
        for name, value in described["policy"].items()
    ]
    state.render.records(
        rows,
        [Column.id("field", "field"), Column.text("value", "value"), Column.free("source", "source")],
        json_rows=described,
        title=f"policy: {resolved.origin}",
    )
