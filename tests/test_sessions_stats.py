"""`vmem session stats`: every figure equals what ADK's own get_session gives, on sqlite,
PostgreSQL and MariaDB, for sessions written by the real google-adk (usage_metadata,
function calls and responses, compaction events); v0 and SqliteSessionService layouts."""

from __future__ import annotations

import csv
import io
import json
import sqlite3
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from sessions_helpers import build_v0, sqlite_url
from stats_samples import LAYOUT, MIDNIGHT, edge_events, expected, write, write_events
from typer.testing import CliRunner

from veadk_mem.cli.app import app

KEYS = list(LAYOUT)


@pytest.fixture(params=["sqlite", "postgres", "mysql"])
def db(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return sqlite_url(tmp_path / "adk.db")
    return str(request.getfixturevalue("pg_url" if request.param == "postgres" else "mysql_url"))


def _stats(runner: CliRunner, url: str, *args: str) -> dict[str, Any]:
    result = runner.invoke(app, ["session", "stats", "--db-url", url, "--json", *args])
    assert result.exit_code == 0, result.stderr + result.stdout
    data: dict[str, Any] = json.loads(result.stdout)
    return data


def _sum(figures: dict[str, Any], keys: list[str], field: str) -> Counter[str]:
    total: Counter[str] = Counter()
    for k in keys:
        total.update(figures[k][field])
    return total


def test_stats_equal_what_adk_reads(runner: CliRunner, db: str) -> None:
    write(db)
    want = expected(db, KEYS)
    names = [f"{a}/{u}/{s}" for a, u, s in KEYS]
    got = _stats(runner, db, "--top", "100", "--by", "user")
    totals = got["totals"]
    assert got["unavailable"] == []
    assert totals["apps"] == 2 and totals["users"] == 3 and totals["sessions"] == len(KEYS)
    assert totals["events"] == sum(want[n]["events"] for n in names)
    tokens = _sum(want, names, "tokens")
    assert totals["tokens"] == {k: tokens[k] for k in ("prompt", "candidates", "thoughts", "total")}
    kinds = _sum(want, names, "kinds")
    assert totals["kinds"] == {k: kinds[k] for k in totals["kinds"]}
    assert totals["kinds"]["compaction"] == 4 and totals["kinds"]["function_call"] == 10  # the sample holds them
    # the largest sessions, each with its own figures
    top = {f"{r['app_name']}/{r['user_id']}/{r['id']}": r for r in got["top"]}
    assert set(top) == set(names)
    for n in names:
        assert top[n]["events"] == want[n]["events"]
        assert top[n]["total_tokens"] == want[n]["tokens"]["total"]
        assert top[n]["prompt_tokens"] == want[n]["tokens"]["prompt"]
        assert top[n]["update_time"] == pytest.approx(want[n]["update_time"], abs=1e-3)
    sizes = [r["bytes"] for r in got["top"]]
    assert sizes == sorted(sizes, reverse=True) and sizes[0] > 0
    assert sum(sizes) == totals["bytes"]
    # grouped by user: the sums of that user's sessions
    groups = {(g["app_name"], g["user_id"]): g for g in got["groups"]}
    for app_name, user in {(a, u) for a, u, _ in KEYS}:
        mine = [f"{a}/{u}/{s}" for a, u, s in KEYS if (a, u) == (app_name, user)]
        g = groups[(app_name, user)]
        assert g["sessions"] == len(mine)
        assert g["events"] == sum(want[n]["events"] for n in mine)
        assert g["total_tokens"] == _sum(want, mine, "tokens")["total"]
        assert g["function_response"] == _sum(want, mine, "kinds")["function_response"]


def test_a_session_over_midnight_with_mixed_parts(runner: CliRunner, db: str) -> None:
    """A session's figures added up from its rows of two UTC days; kinds that need every part
    (a call after text), the role (a response under user, text under none) or a thought; token
    counts of which usage_metadata holds only some."""
    key = ("edge", "dana", "midnight")
    write_events(db, key, edge_events())
    want = expected(db, [key])["edge/dana/midnight"]
    assert want["kinds"] == {"user_text": 1, "function_call": 1, "function_response": 1, "other": 1, "model_text": 1}
    got = _stats(runner, db, "--by", "day")
    totals = got["totals"]
    assert totals["events"] == want["events"] == 5
    assert totals["kinds"] == {k: want["kinds"][k] for k in totals["kinds"]}
    assert totals["tokens"] == {k: want["tokens"][k] for k in ("prompt", "candidates", "thoughts", "total")}
    assert totals["tokens"] == {"prompt": 40, "candidates": 3, "thoughts": 5, "total": 52}
    [top] = got["top"]
    assert (top["events"], top["total_tokens"], top["bytes"]) == (5, 52, totals["bytes"])
    days = {g["day"]: g for g in got["groups"] if g["events"]}
    before = datetime.fromtimestamp(MIDNIGHT - 1, tz=UTC).strftime("%Y-%m-%d")
    after = datetime.fromtimestamp(MIDNIGHT, tz=UTC).strftime("%Y-%m-%d")
    assert {d: g["events"] for d, g in days.items()} == {before: 2, after: 3}
    assert (days[before]["user_text"], days[before]["function_call"], days[before]["total_tokens"]) == (1, 1, 47)
    assert (days[after]["function_response"], days[after]["other"], days[after]["model_text"]) == (1, 1, 1)
    assert days[before]["bytes"] + days[after]["bytes"] == totals["bytes"]


def test_bytes_are_the_stored_event_data(runner: CliRunner, tmp_path: Path) -> None:
    path = tmp_path / "adk.db"
    write(sqlite_url(path))
    with sqlite3.connect(path) as conn:
        stored = sum(len(row[0].encode()) for row in conn.execute("SELECT event_data FROM events"))
    assert _stats(runner, str(path))["totals"]["bytes"] == stored


def test_filters_days_and_ages(runner: CliRunner, db: str) -> None:
    write(db)
    want = expected(db, KEYS)
    one = _stats(runner, db, "--app", "shop", "--user", "alice")
    assert one["totals"]["sessions"] == 2
    assert one["totals"]["events"] == want["shop/alice/a1"]["events"] + want["shop/alice/a2"]["events"]
    # --since/--until select by last update, as `session list` does
    cut = datetime.fromtimestamp(1_790_200_000, tz=UTC).isoformat()
    newer = [n for n in want if want[n]["update_time"] >= 1_790_200_000]
    after = _stats(runner, db, "--since", cut)
    assert after["totals"]["sessions"] == len(newer)
    assert after["totals"]["events"] == sum(want[n]["events"] for n in newer)
    before = _stats(runner, db, "--until", cut)
    assert before["totals"]["sessions"] == len(want) - len(newer)
    # per UTC day: the events ADK timestamped that day
    days = _stats(runner, db, "--by", "day")
    per_day: Counter[str] = Counter()
    for turns, start in LAYOUT.values():
        per_day.update(
            datetime.fromtimestamp(start + 100 * i + k, tz=UTC).strftime("%Y-%m-%d")
            for i in range(turns)
            for k in range(6 if i % 2 else 5)
        )
    assert {g["day"]: g["events"] for g in days["groups"] if g["events"]} == dict(per_day)
    assert [g["day"] for g in days["groups"]] == sorted((g["day"] for g in days["groups"]), reverse=True)
    weeks = _stats(runner, db, "--by", "week")
    assert sum(g["events"] for g in weeks["groups"]) == sum(per_day.values())
    # ages by last update: the sample's sessions were last updated in 2026-09, the empty one now
    ages = {a["age"]: a for a in days["ages"]}
    assert ages["<1d"]["sessions"] == 1 and ages["<1d"]["events"] == 0  # ADK stamps an empty session now
    assert ages[">365d"]["older_sessions"] == ages[">365d"]["sessions"]
    assert ages["<1d"]["older_sessions"] == 5 and ages["<1d"]["older_bytes"] == days["totals"]["bytes"]
    assert sum(a["sessions"] for a in days["ages"]) == 5


def test_machine_formats_print_records(runner: CliRunner, tmp_path: Path) -> None:
    url = str(tmp_path / "adk.db")
    write(sqlite_url(tmp_path / "adk.db"))
    totals = runner.invoke(app, ["session", "stats", "--db-url", url, "--csv"])
    assert totals.exit_code == 0, totals.stderr
    rows = list(csv.DictReader(io.StringIO(totals.stdout)))
    assert len(rows) == 1 and rows[0]["sessions"] == "5" and rows[0]["compaction"] == "4"
    ages = runner.invoke(app, ["session", "stats", "--db-url", url, "--by", "age", "--tsv"])
    lines = ages.stdout.splitlines()
    assert lines[0].split("\t")[:4] == ["age", "sessions", "events", "bytes"] and len(lines) == 7
    assert "█" not in ages.stdout  # bars are for people only
    top = runner.invoke(app, ["session", "stats", "--db-url", url, "--top", "2", "--jsonl"])
    assert [json.loads(line)["id"] for line in top.stdout.splitlines()] == ["c1", "a1"]
    piped = runner.invoke(app, ["session", "stats", "--db-url", url])
    assert "2680 total" in piped.stdout and "c1" in piped.stdout
    assert not any(glyph in piped.stdout for glyph in [*"█▁▂▃▄▅▆▇", " KB", " B\t"])  # plain numbers (#45 item 11)
    tsv_top = runner.invoke(app, ["session", "stats", "--db-url", url, "--top", "10", "--tsv"]).stdout.splitlines()
    assert tsv_top[0] in piped.stdout.splitlines()  # the largest sessions' piped header is --tsv's
    bad = runner.invoke(app, ["session", "stats", "--db-url", url, "--by", "month"])
    assert bad.exit_code == 2 and "--by" in bad.stderr


def test_v0_layout_says_what_it_cannot_count(runner: CliRunner, db: str) -> None:
    url = db
    build_v0(url, {})
    write(url)
    want = expected(url, KEYS)
    got = _stats(runner, url)
    assert got["layout"] == "v0"
    assert any(u.startswith("compaction") for u in got["unavailable"])
    assert got["totals"]["events"] == sum(w["events"] for w in want.values())
    assert got["totals"]["tokens"]["total"] == sum(w["tokens"]["total"] for w in want.values())
    assert got["totals"]["kinds"]["function_call"] == 10 and got["totals"]["kinds"]["compaction"] == 0


def test_sqlite_session_service_file(runner: CliRunner, tmp_path: Path) -> None:
    path = str(tmp_path / "service.db")
    write(path)  # a plain path: ADK's SqliteSessionService
    want = expected(path, KEYS)
    got = _stats(runner, path, "--by", "day")
    assert got["layout"] == "sqlite"
    assert got["totals"]["events"] == sum(w["events"] for w in want.values())
    assert got["totals"]["kinds"]["compaction"] == 4
    assert got["totals"]["tokens"]["prompt"] == sum(w["tokens"]["prompt"] for w in want.values())
    assert sum(g["events"] for g in got["groups"]) == got["totals"]["events"]


@pytest.mark.parametrize("version", ["1.10.0", "1.18.0", "1.22.1"])
def test_databases_of_old_adk_releases(runner: CliRunner, tmp_path: Path, version: str) -> None:
    """What each layout can tell: 1.10's v0 table has no usage_metadata column; no v0 can count compactions."""
    from test_sessions_old_adk import write_with

    _, path, adk = write_with(version, tmp_path)
    got = _stats(runner, str(path))
    assert got["totals"]["events"] == sum(len(s["events"]) for s in adk.values())
    assert got["totals"]["sessions"] == len(adk)
    assert sum(got["totals"]["kinds"].values()) == got["totals"]["events"]
    unavailable = " ".join(got["unavailable"])
    assert ("tokens" in unavailable) == (version == "1.10.0")
    assert ("compaction" in unavailable) == (version != "1.22.1")
    calls = sum(
        1
        for s in adk.values()
        for e in s["events"]
        if any("function_call" in p or "functionCall" in p for p in (e.get("content") or {}).get("parts") or [])
    )
    assert calls and got["totals"]["kinds"]["function_call"] == calls


def _set_count(url: str, column: str, sid: str, name: str, old: int, new: str) -> str:
    """The SQL that rewrites one token count of one session's event in its stored JSON text, as a
    hand-edited or foreign writer's row could hold it (ADK itself never writes these)."""
    old_text, new_text = f'"{name}": {old}', f'"{name}": {new}'
    if url.startswith("postgresql"):
        value = f"replace({column}::text, '{old_text}', '{new_text}')::jsonb"
    else:
        value = f"replace({column}, '{old_text}', '{new_text}')"
    return f"UPDATE events SET {column} = {value} WHERE session_id = '{sid}'"


@pytest.mark.parametrize("layout", ["v1", "v0"])
def test_odd_token_counts_are_skipped_and_reported(runner: CliRunner, db: str, layout: str) -> None:
    """A token count that is no whole number in range (1.5, true, 2^63, -1) is skipped and
    counted as odd, the first session holding one named; every other count (a string of digits
    too, which ADK reads as its number) adds up as before
    (at 5fdd7a4 sqlite and PostgreSQL failed the whole run, MariaDB summed a wrong total)."""
    import asyncio

    from sessions_helpers import run_sql

    if layout == "v0":
        build_v0(db, {})
    write(db)
    want = expected(db, KEYS)
    column = "usage_metadata" if layout == "v0" else "event_data"
    odd = [  # in c1 (four turns): each value occurs once in that session
        ("prompt_token_count", 101, "1.5"),
        ("candidates_token_count", 22, "true"),
        ("total_token_count", 131, "9223372036854775808"),
        ("thoughts_token_count", 1, "-1"),  # three events of c1
        ("candidates_token_count", 27, '"27"'),  # a string of digits: counted, as ADK reads it
    ]
    asyncio.run(run_sql(db, *(_set_count(db, column, "c1", *o) for o in odd)))
    result = runner.invoke(app, ["session", "stats", "--db-url", db, "--json", "--top", "100"])
    assert result.exit_code == 0, result.stderr + result.stdout
    got = json.loads(result.stdout)
    tokens = _sum(want, list(want), "tokens")
    assert got["totals"]["tokens"] == {
        "prompt": tokens["prompt"] - 101,
        "candidates": tokens["candidates"] - 22,
        "thoughts": tokens["thoughts"] - 3,
        "total": tokens["total"] - 131,
    }
    assert got["odd_token_counts"] == 6
    [c1] = [t for t in got["top"] if t["id"] == "c1"]
    assert c1["total_tokens"] == want["bank/carol/c1"]["tokens"]["total"] - 131
    assert got["totals"]["events"] == sum(w["events"] for w in want.values())
    [line] = [line for line in result.stderr.splitlines() if "token count" in line]
    assert "6 token counts" in line and "bank/carol/c1" in line
    people = runner.invoke(app, ["session", "stats", "--db-url", db])
    assert people.exit_code == 0 and "6 token counts" in people.stderr
