"""`vmem policy test --json` is written as it is decided (issue 39 item 4): the same bytes as the
whole document, and for a session read from the store, memory that does not grow with it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sessions_helpers import sqlite_url
from test_sessions_export_paged import vmem_import
from test_sessions_import_stream import APP, big_session

from veadk_mem.events import Event, Session
from veadk_mem.jsonio import dumps
from veadk_mem.policy import dry_run, preset_policy, resolve_policy
from veadk_mem.policy.model import ResolvedPolicy

ROOT = Path(__file__).resolve().parents[1]

texts = st.text(st.characters(codec="utf-8", exclude_categories=["Cs"]), max_size=12)
parts = st.one_of(
    st.builds(lambda t: {"text": t}, texts),
    st.builds(lambda t: {"text": t, "thought": True}, texts),
    st.builds(lambda n: {"functionCall": {"name": n or "f", "args": {"x": [1, {"y": None}]}}}, texts),
)
events = st.builds(
    lambda i, author, role, ps: Event.model_validate(
        {"id": f"e{i}", "author": author, "timestamp": float(i), "content": {"role": role, "parts": ps}}
    ),
    st.integers(0, 10_000),
    st.sampled_from(["user", "agent", "tool"]),
    st.sampled_from(["user", "model"]),
    st.lists(parts, max_size=3),
)


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.lists(events, max_size=6), max_size=3), st.sampled_from(["default", "all"]))
def test_the_pieces_are_the_whole_document(sessions: list[list[Event]], preset: str) -> None:
    """Empty lists, no saved memory, several sessions, nested values: byte for byte `dumps(indent=2)`."""
    policy = resolve_policy(preset)
    listed = [Session(id=f"s{i}", app_name="a", user_id="u", events=evs) for i, evs in enumerate(sessions)]
    run = dry_run(listed, policy)
    assert "".join(run.json_pieces()) == dumps(run.to_dict(), indent=2)


def test_warnings_are_given_once_however_often_it_is_read() -> None:
    event = Event.model_validate(
        {"id": "e1", "author": "user", "content": {"role": "user", "parts": [{"text": "a\ud800b"}]}}
    )
    heard: list[str] = []
    run = dry_run(
        [Session(id="s", app_name="a", user_id="u", events=[event])],
        ResolvedPolicy(preset_policy("all")),
        warn=heard.append,
    )
    "".join(run.json_pieces())
    run.summary()
    list(run.decisions())
    assert len(heard) == 1 and "lone surrogate" in heard[0]
    assert run.summary().startswith("1 saved / 1 events")


def _policy_test(url: str, sid: str) -> tuple[str, int]:
    """`vmem policy test --from-store --json` in its own process: its stdout and peak RSS in KB."""
    code = (
        "import resource, subprocess, sys\n"
        "done = subprocess.run(sys.argv[1:], check=True, stdout=subprocess.PIPE, text=True)\n"
        "sys.stdout.write(done.stdout)\n"
        "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)\n"
    )
    command = [sys.executable, "-m", "veadk_mem", "policy", "test", "--from-store", APP, "u-big", sid]
    command += ["--policy", "all", "--json", "--db-url", url]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "NO_COLOR": "1"}
    done = subprocess.run([sys.executable, "-c", code, *command], env=env, capture_output=True, text=True, check=True)
    out, _, peak = done.stdout.rstrip("\n").rpartition("\n")
    return out + "\n", int(peak)


@pytest.mark.slow
def test_a_long_stored_session_is_decided_in_flat_memory(tmp_path: Path) -> None:
    source = tmp_path / "in.jsonl"
    with source.open("w", encoding="utf-8") as out:
        for sid, n in (("short", 5_000), ("long", 100_000)):
            out.write(json.dumps(big_session(sid, n)) + "\n")
    url = sqlite_url(tmp_path / "s.db")
    vmem_import(source, url)
    _, short_peak = _policy_test(url, "short")
    text, long_peak = _policy_test(url, "long")
    document: dict[str, Any] = json.loads(text)
    assert len(document["events"]) == 100_000 and len(document["saved"]) > 0
    assert text == dumps(document, indent=2) + "\n"  # laid out as the whole document is
    # 20x the events: the decisions are not held (before, about 1 KB an event more)
    assert long_peak < short_peak * 1.5, f"{short_peak // 1024} MB at 5,000 events, {long_peak // 1024} MB at 100,000"
