"""Issue 46 item 1: `vmem ltm reembed` moves a local store to another model in place.

Atomic with resumable staging: the new vectors are staged in the store file, then swapped in by
one transaction. A run killed with SIGKILL part-way leaves every vector of the old model (and the
old model recorded), and the next run reuses what was staged. The store records the new model,
so `provider = "auto"` searches with it. Stores that cannot record a model exit 4. Every test
here fails without the command (and the auto test without the facade's MiniLM rule).
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from typer.testing import CliRunner

from veadk_mem.cli.app import app
from veadk_mem.config import EmbeddingSettings
from veadk_mem.embedding import E5_NAME, E5_VECTOR_NAME, MINILM_NAME, create_embedder
from veadk_mem.ltm.convert import searchable_text

FACTS = ["我对海鲜过敏，吃虾会起疹子。", "我每天坐地铁二号线上班。", "My passport expires in August next year."]


def _sessions(path: Path, facts: list[str], user: str = "u", app_name: str = "a") -> Path:
    with path.open("w", encoding="utf-8") as handle:
        for i, fact in enumerate(facts):
            event = {
                "id": f"{user}-e{i}",
                "author": "user",
                "timestamp": 1764403200.0 + i,
                "content": {"role": "user", "parts": [{"text": fact}]},
            }
            session = {"id": f"{user}-s{i}", "appName": app_name, "userId": user, "events": [event]}
            handle.write(json.dumps(session, ensure_ascii=False) + "\n")
    return path


def _rows(db: Path) -> list[tuple[str, str, int, int, bytes]]:
    with sqlite3.connect(db) as conn:
        return conn.execute("SELECT text, model, dim, chunks, vector FROM memories ORDER BY rowid").fetchall()


def _index_model(db: Path, index: str = "a") -> tuple[str, int, int]:
    with sqlite3.connect(db) as conn:
        return conn.execute("SELECT model, dim, generation FROM ltm_indexes WHERE name = ?", (index,)).fetchone()


@pytest.fixture
def store(tmp_path: Path) -> dict[str, str]:
    return {"LONG_TERM_MEMORY_LOCAL_PATH": str(tmp_path / "ltm.db")}


def test_reembed_moves_the_index_to_e5_and_auto_keeps_it(tmp_path: Path, store: dict[str, str]) -> None:
    runner = CliRunner()
    saved = runner.invoke(app, ["--quiet", "ltm", "save", str(_sessions(tmp_path / "s.jsonl", FACTS))], env=store)
    assert saved.exit_code == 0, saved.stderr
    db = Path(store["LONG_TERM_MEMORY_LOCAL_PATH"])
    assert {r[1] for r in _rows(db)} == {MINILM_NAME}
    generation = _index_model(db)[2]

    moved = runner.invoke(app, ["--json", "ltm", "reembed", "--model", E5_NAME], env=store)
    assert moved.exit_code == 0, moved.stderr
    report = json.loads(moved.stdout)
    assert report["model"] == E5_VECTOR_NAME and report["embedded"] == 3 and report["reused"] == 0
    assert report["indexes"] == [{"index": "a", "model": MINILM_NAME, "dim": 384, "users": 1, "memories": 3}]

    rows = _rows(db)
    assert {r[1] for r in rows} == {E5_VECTOR_NAME}
    assert _index_model(db)[:2] == (E5_VECTOR_NAME, 384) and _index_model(db)[2] > generation
    e5 = create_embedder(EmbeddingSettings(provider="local", local_model=E5_NAME))
    stored = np.stack([np.frombuffer(r[4], dtype=np.float32) for r in rows])
    texts = [searchable_text(r[0]) for r in rows]  # a saved Content's text, as a save embeds it
    assert np.allclose(stored, e5.embed(texts), atol=1e-5)  # what a fresh save with e5 stores

    # Default settings (auto, MiniLM configured): the store's own model answers, across languages.
    found = runner.invoke(
        app, ["--json", "ltm", "search", "how do I get to work", "-u", "u", "--mode", "vector"], env=store
    )
    assert found.exit_code == 0, found.stderr
    hits = json.loads(found.stdout)
    assert hits[0]["content"]["parts"][0]["text"] == FACTS[1]
    assert hits[0]["custom_metadata"]["origin"]["model"] == E5_VECTOR_NAME

    again = runner.invoke(app, ["--json", "ltm", "reembed", "--model", E5_NAME], env=store)
    assert again.exit_code == 0, again.stderr
    assert json.loads(again.stdout)["unchanged"] == ["a"] and json.loads(again.stdout)["embedded"] == 0
    assert _rows(db) == rows


def test_a_minilm_store_keeps_minilm_when_e5_is_configured(tmp_path: Path, store: dict[str, str]) -> None:
    runner = CliRunner()
    saved = runner.invoke(app, ["--quiet", "ltm", "save", str(_sessions(tmp_path / "s.jsonl", FACTS))], env=store)
    assert saved.exit_code == 0, saved.stderr
    env = {**store, "MODEL_EMBEDDING_LOCAL_MODEL": E5_NAME}
    found = runner.invoke(app, ["--json", "ltm", "search", "passport", "-u", "u", "--mode", "vector"], env=env)
    assert found.exit_code == 0, found.stderr  # not "holds vectors of all-MiniLM-L6-v2 but the embedder is e5"
    assert json.loads(found.stdout)[0]["custom_metadata"]["origin"]["model"] == MINILM_NAME


def test_dry_run_changes_nothing(tmp_path: Path, store: dict[str, str]) -> None:
    runner = CliRunner()
    runner.invoke(app, ["--quiet", "ltm", "save", str(_sessions(tmp_path / "s.jsonl", FACTS))], env=store)
    db = Path(store["LONG_TERM_MEMORY_LOCAL_PATH"])
    before = _rows(db), _index_model(db)
    planned = runner.invoke(app, ["--json", "ltm", "reembed", "--model", E5_NAME, "--dry-run"], env=store)
    assert planned.exit_code == 0, planned.stderr
    report = json.loads(planned.stdout)
    assert report["dry_run"] is True and report["memories"] == 3 and report["embedded"] == 0
    assert (_rows(db), _index_model(db)) == before


def test_user_scope_refuses_an_index_shared_with_other_users(tmp_path: Path, store: dict[str, str]) -> None:
    runner = CliRunner()
    runner.invoke(app, ["--quiet", "ltm", "save", str(_sessions(tmp_path / "u.jsonl", FACTS[:1]))], env=store)
    runner.invoke(app, ["--quiet", "ltm", "save", str(_sessions(tmp_path / "v.jsonl", FACTS[1:], "v"))], env=store)
    refused = runner.invoke(app, ["ltm", "reembed", "-u", "u", "--model", E5_NAME], env=store)
    assert refused.exit_code == 2
    assert "1 other users" in refused.stderr and "--app a" in refused.stderr
    assert {r[1] for r in _rows(Path(store["LONG_TERM_MEMORY_LOCAL_PATH"]))} == {MINILM_NAME}
    missing = runner.invoke(app, ["ltm", "reembed", "-u", "nobody", "-a", "a", "--model", E5_NAME], env=store)
    assert missing.exit_code == 3


def test_an_unknown_model_name_is_bad_input(tmp_path: Path, store: dict[str, str]) -> None:
    runner = CliRunner()
    runner.invoke(app, ["--quiet", "ltm", "save", str(_sessions(tmp_path / "s.jsonl", FACTS))], env=store)
    refused = runner.invoke(app, ["ltm", "reembed", "--model", "bge-m3"], env=store)
    assert refused.exit_code == 2 and "--model: unknown offline model 'bge-m3'" in refused.stderr


def test_a_store_that_records_no_model_exits_4(redis_prefix: str) -> None:
    runner = CliRunner()
    env = {"LONG_TERM_MEMORY_BACKEND": "redis", "LONG_TERM_MEMORY_INDEX": redis_prefix}
    refused = runner.invoke(app, ["ltm", "reembed", "--model", E5_NAME], env=env)
    assert refused.exit_code == 4, refused.stderr
    assert "cannot re-embed in place" in refused.stderr


def _hash_store(db: Path, count: int) -> None:
    """A store of `count` memories of one user, embedded by the hash embedder (fast to build)."""
    import asyncio

    from veadk_mem.config import VmemSettings
    from veadk_mem.ltm.base import MemoryRecord
    from veadk_mem.ltm.facade import LongTermMemory

    async def build() -> None:
        settings = VmemSettings()
        settings.model.embedding.provider = "hash"
        settings.long_term_memory.local_path = str(db)
        async with LongTermMemory.from_settings(settings) as ltm:
            records = [
                MemoryRecord(text=f"memory {i}: the user mentioned item {i} of the list, " + "word " * 40, user_id="u")
                for i in range(count)
            ]
            await ltm.save_records("u", records, "a")

    asyncio.run(build())


def _ctrl_c_as_at_a_terminal() -> None:
    """In the child before it runs: SIGINT delivered and handled as at a terminal, whatever the test
    runner's parent set (a shell's background job ignores it, and an ignored SIGINT stays ignored
    across exec: vmem then ran on to the swap and exited 0)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})


def _interrupt_while_staging(db: Path, how: signal.Signals) -> tuple[int, int, str]:
    """Start `ltm reembed` to MiniLM, send `how` once it has staged a batch; (staged then, exit code, stderr)."""
    env = {
        **os.environ,
        "LONG_TERM_MEMORY_LOCAL_PATH": str(db),
        "MODEL_EMBEDDING_PROVIDER": "hash",
        "VMEM_BATCH_BYTES": "64KiB",  # batches of about 240 memories: several commits before the swap
    }
    command = [sys.executable, "-m", "veadk_mem", "ltm", "reembed", "--model", MINILM_NAME]
    proc = subprocess.Popen(
        command,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=_ctrl_c_as_at_a_terminal,
    )
    staged = 0
    deadline = time.monotonic() + 120
    try:
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                with sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=1) as conn:
                    staged = conn.execute("SELECT count(*) FROM reembed_stage").fetchone()[0]
            except sqlite3.OperationalError:  # the stage table is not there yet
                staged = 0
            if staged:
                break
            time.sleep(0.01)
        assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
        os.kill(proc.pid, how)
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return staged, proc.returncode, err


def test_ctrl_c_part_way_stops_the_worker_before_the_swap(tmp_path: Path) -> None:
    """SIGINT while staging: exit 130 and nothing changed (the worker thread does not run on to the swap)."""
    db = tmp_path / "ltm.db"
    _hash_store(db, 1200)
    before, old_model = _rows(db), _index_model(db)
    staged, code, err = _interrupt_while_staging(db, signal.SIGINT)
    assert 0 < staged < 1200, staged
    assert code == 130, err
    assert "interrupted: nothing was changed" in err
    assert _rows(db) == before and _index_model(db) == old_model


def test_ctrl_c_after_the_swap_committed_says_the_move_happened(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A Ctrl-C that lands after the swap's commit cannot undo it: vmem says the store moved (exit 0
    with the report), never "nothing was changed" over a store that did change. The SIGINT is sent
    by the worker itself the moment the swap returns, so it always lands after the commit."""
    from veadk_mem.ltm.backends import local_reembed

    db = tmp_path / "ltm.db"
    _hash_store(db, 30)
    real = local_reembed._swap

    def swap_then_ctrl_c(*args: Any, **kwargs: Any) -> bool:
        done = real(*args, **kwargs)
        stop = kwargs.get("stop", args[-1])
        os.kill(os.getpid(), signal.SIGINT)
        deadline = time.monotonic() + 30
        while not stop.late and time.monotonic() < deadline:  # the handler runs in the main thread meanwhile
            time.sleep(0.01)
        return done

    monkeypatch.setattr(local_reembed, "_swap", swap_then_ctrl_c)
    result = CliRunner().invoke(
        app, ["ltm", "reembed", "--model", MINILM_NAME], env={"LONG_TERM_MEMORY_LOCAL_PATH": str(db)}
    )
    assert _index_model(db)[:2] == (MINILM_NAME, 384)  # the swap committed
    assert result.exit_code == 0, result.stderr
    assert "nothing was changed" not in result.stderr
    assert f"moved to {MINILM_NAME} (384-d)" in result.stderr
    assert "Ctrl-C came after the swap had committed: the move is done" in result.stderr


def test_a_kill_part_way_leaves_one_model_and_the_next_run_resumes(tmp_path: Path) -> None:
    db = tmp_path / "ltm.db"
    count = 1200
    _hash_store(db, count)
    before = _rows(db)
    old_model = _index_model(db)
    assert {r[1] for r in before} == {"hash-v1-384"}
    staged, code, _ = _interrupt_while_staging(db, signal.SIGKILL)
    assert code == -signal.SIGKILL
    assert 0 < staged < count, staged

    # Killed while staging: the memories, their vectors and the index's model are as they were.
    assert _rows(db) == before
    assert _index_model(db) == old_model
    runner = CliRunner()
    store = {"LONG_TERM_MEMORY_LOCAL_PATH": str(db)}
    found = runner.invoke(
        app, ["--json", "ltm", "search", "item 7 of the list", "-u", "u", "--mode", "vector"], env=store
    )
    assert found.exit_code == 0, found.stderr
    assert json.loads(found.stdout)[0]["custom_metadata"]["origin"]["model"] == "hash-v1-384"

    with sqlite3.connect(db) as conn:
        staged = conn.execute("SELECT count(*) FROM reembed_stage").fetchone()[0]
    resumed = runner.invoke(app, ["--json", "ltm", "reembed", "--model", MINILM_NAME], env=store)
    assert resumed.exit_code == 0, resumed.stderr
    report = json.loads(resumed.stdout)
    assert report["reused"] == staged and report["embedded"] == count - staged
    rows = _rows(db)
    assert {r[1] for r in rows} == {MINILM_NAME} and _index_model(db)[:2] == (MINILM_NAME, 384)
    minilm = create_embedder(EmbeddingSettings(provider="local"))
    sample = [0, staged - 1, staged, count - 1]  # staged by the killed run and by this one
    stored = np.stack([np.frombuffer(rows[i][4], dtype=np.float32) for i in sample])
    assert np.allclose(stored, minilm.embed([rows[i][0] for i in sample]), atol=1e-5)
    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT count(*) FROM reembed_stage").fetchone()[0] == 0


def test_a_batch_is_cut_by_memories_as_well_as_bytes(tmp_path: Path) -> None:
    """Short memories: 64 MiB of their text would be a million vectors in one batch."""
    from veadk_mem.ltm.backends import local_reembed

    db = tmp_path / "ltm.db"
    _hash_store(db, local_reembed.BATCH_MEMORIES + 52)
    with sqlite3.connect(db) as conn:
        conn.execute(local_reembed.STAGE_SCHEMA)
        sizes = [len(b) for b in local_reembed._batches(conn, ["a"], MINILM_NAME, 64 << 20)]
    assert sizes == [local_reembed.BATCH_MEMORIES, 52]
