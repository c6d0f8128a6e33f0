"""`ltm save --dry-run` predicts what the real run saves (issue 45 item 4): a memory repeated
within one replay (twice in a session, or in two sessions of the user) is new once, in the
prediction as in the save."""

from __future__ import annotations

import asyncio
import copy
import json
from pathlib import Path
from typing import Any

import pytest

from veadk_mem.config import load_settings
from veadk_mem.events import read_sessions
from veadk_mem.ltm.facade import LongTermMemory
from veadk_mem.ltm.replay import replay

EXAMPLES = Path(__file__).resolve().parents[1] / "docs" / "examples" / "sessions"


def _repeating(tmp_path: Path) -> Path:
    """The demo session, a copy under another id (every memory again), and one whose first
    event comes twice more (a repeat inside one session), for two users."""
    first = json.loads((EXAMPLES / "ltm_demo-session-1.json").read_text(encoding="utf-8"))
    docs: list[dict[str, Any]] = []
    for user in ("user-42", "user-7"):
        a = {**copy.deepcopy(first), "userId": user}
        b = {**copy.deepcopy(a), "id": "session-copy"}
        c = {**copy.deepcopy(a), "id": "session-again"}
        again = copy.deepcopy(c["events"][0])
        c["events"] += [{**again, "id": f"evt-again-{i}", "timestamp": 1764409999.0 + i} for i in range(2)]
        docs += [a, b, c]
    path = tmp_path / "repeats.jsonl"
    path.write_text("".join(json.dumps(d) + "\n" for d in docs), encoding="utf-8")
    return path


async def _saved(ltm: LongTermMemory, path: Path, *, dry_run: bool) -> int:
    async def items() -> Any:
        for session in read_sessions(path):
            yield (str(path), session)

    summary = await replay(ltm, items(), ltm.resolve_policy(), dry_run=dry_run)
    assert not summary.codes
    return sum(r.saved for r in summary.reports)


@pytest.mark.parametrize("backend", ["memory", "local"])
def test_a_dry_run_counts_what_the_real_run_saves(
    backend: str, isolated_env: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MODEL_EMBEDDING_PROVIDER", "hash")
    monkeypatch.setenv("LONG_TERM_MEMORY_BACKEND", backend)
    path = _repeating(isolated_env)
    ltm = LongTermMemory.from_settings(load_settings().settings)
    assert ltm.backend_name == backend
    predicted = asyncio.run(_saved(ltm, path, dry_run=True))
    saved = asyncio.run(_saved(ltm, path, dry_run=False))
    assert predicted == saved > 0
    assert asyncio.run(_saved(ltm, path, dry_run=True)) == 0  # all there now: the next run saves nothing
