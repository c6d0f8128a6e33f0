"""`vmem ltm edit` (issue #42 item 5) on the local backend: the text replaced and re-embedded,
a new content hash, the source kept, the old text in the history; exit 3 and 4 where it cannot."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from veadk_mem.cli.app import app
from veadk_mem.ltm.base import content_hash
from veadk_mem.ops.history import HistoryLog, default_path


@pytest.fixture(autouse=True)
def hash_embedder(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MODEL_EMBEDDING_PROVIDER", "hash")


def vmem(*args: str) -> Any:
    return CliRunner().invoke(app, list(args))


def saved(tmp_path: Path) -> list[dict[str, Any]]:
    """alice's memories after `ltm save` of one session with two user events."""
    events = [
        {
            "id": f"e{i}",
            "author": "user",
            "invocationId": f"i{i}",
            "timestamp": 1_700_000_000.0 + i,
            "content": {"role": "user", "parts": [{"text": text}]},
        }
        for i, text in enumerate(["I am allergic to peanuts", "I live in Lisbon"])
    ]
    session = {"appName": "app", "userId": "alice", "id": "s1", "state": {}, "events": events, "lastUpdateTime": 1.7e9}
    file = tmp_path / "s.json"
    file.write_text(json.dumps(session))
    assert vmem("ltm", "save", str(file)).exit_code == 0
    return json.loads(vmem("ltm", "list", "-u", "alice", "--json").stdout)  # type: ignore[no-any-return]


def text_of(entry: dict[str, Any]) -> str:
    return str(entry["content"]["parts"][0]["text"])


def test_edit_replaces_the_text_keeps_the_source_and_the_old_text_in_history(tmp_path: Path) -> None:
    before = saved(tmp_path)
    old = next(m for m in before if "peanuts" in text_of(m))
    dry = vmem("ltm", "edit", old["id"], "-u", "alice", "--text", "I am allergic to tree nuts", "--dry-run")
    assert dry.exit_code == 0, dry.stderr
    assert "I am allergic to peanuts" in dry.stdout and "I am allergic to tree nuts" in dry.stdout
    assert json.loads(vmem("ltm", "list", "-u", "alice", "--json").stdout) == before  # nothing changed
    assert HistoryLog(default_path()).entries(command="ltm edit") == []

    result = vmem("--json", "ltm", "edit", old["id"], "-u", "alice", "--text", "I am allergic to tree nuts")
    assert result.exit_code == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["old_text"] == '{"parts": [{"text": "I am allergic to peanuts"}], "role": "user"}'
    assert report["new_text"] == '{"parts": [{"text": "I am allergic to tree nuts"}], "role": "user"}'
    assert report["new_content_hash"] == content_hash(report["new_text"]) != report["old_content_hash"]

    after = json.loads(vmem("ltm", "list", "-u", "alice", "--json").stdout)
    assert old["id"] not in {m["id"] for m in after} and len(after) == 2
    new = next(m for m in after if m["id"] == report["new_id"])
    assert text_of(new) == "I am allergic to tree nuts"
    assert new["source"] == old["source"]  # session, event ids, policy and saved-at, as they were
    assert new["source"]["session_id"] == "s1" and new["source"]["event_ids"] == ["e0"]
    hits = json.loads(vmem("ltm", "search", "tree nuts allergy", "-u", "alice", "--json").stdout)
    assert text_of(hits[0]) == "I am allergic to tree nuts"  # re-embedded: found by its new text

    [entry] = HistoryLog(default_path()).entries(command="ltm edit")
    assert entry["details"]["old_text"] == report["old_text"] and entry["details"]["new_text"] == report["new_text"]
    assert entry["ids"] == [old["id"], report["new_id"]] and entry["store"] == "local index app"


def test_edit_finds_the_user_when_none_is_named(tmp_path: Path) -> None:
    old = saved(tmp_path)[0]
    result = vmem("ltm", "edit", old["id"], "--text", "corrected")
    assert result.exit_code == 0, result.stderr
    assert "corrected" in {text_of(m) for m in json.loads(vmem("ltm", "list", "-u", "alice", "--json").stdout)}


def test_unknown_id_is_exit_3_and_nothing_changes(tmp_path: Path) -> None:
    before = saved(tmp_path)
    assert vmem("ltm", "edit", "no-such-id", "-u", "alice", "--text", "x").exit_code == 3
    assert vmem("ltm", "edit", "no-such-id", "--text", "x").exit_code == 3
    assert json.loads(vmem("ltm", "list", "-u", "alice", "--json").stdout) == before
    assert HistoryLog(default_path()).entries(command="ltm edit") == []


def test_same_or_empty_text_is_exit_2(tmp_path: Path) -> None:
    old = saved(tmp_path)[0]
    assert vmem("ltm", "edit", old["id"], "-u", "alice", "--text", "  ").exit_code == 2
    assert vmem("ltm", "edit", old["id"], "-u", "alice", "--text", text_of(old)).exit_code == 2


@pytest.mark.parametrize("backend", ["viking", "tos_context", "openviking"])
def test_a_service_that_rewrites_memories_is_exit_4_naming_it(backend: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LONG_TERM_MEMORY_BACKEND", backend)
    result = vmem("ltm", "edit", "m1", "-u", "alice", "--text", "x")
    assert result.exit_code == 4, result.stderr
    assert f"the {backend} backend cannot edit a memory" in result.stderr


def test_a_delete_failing_after_the_save_says_both_are_there_and_what_to_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The corrected memory is saved, then the local store refuses the old one's delete (a real
    sqlite error through the backend's own failure path): one line saying both texts are in the
    store, naming both ids and the command that finishes the edit; the history records the save.
    Running that command leaves the corrected memory alone."""
    import sqlite3

    from veadk_mem.ltm.backends.local import LocalBackend

    before = saved(tmp_path)
    old = next(m for m in before if "peanuts" in text_of(m))
    real = LocalBackend.delete_memories

    async def locked(self: LocalBackend, user_id: str, ids: list[str]) -> int:
        raise self._failed(sqlite3.OperationalError("database is locked"), "deleting memories")

    monkeypatch.setattr(LocalBackend, "delete_memories", locked)
    result = vmem("ltm", "edit", old["id"], "-u", "alice", "--text", "I am allergic to tree nuts")
    assert result.exit_code == 1, result.stderr
    [line] = result.stderr.strip().splitlines()
    after = json.loads(vmem("ltm", "list", "-u", "alice", "--json").stdout)
    new = next(m for m in after if text_of(m) == "I am allergic to tree nuts")
    assert {m["id"] for m in after} == {*(m["id"] for m in before), new["id"]}  # both texts are there
    assert "database is locked" in line and "both" in line and new["id"] in line
    command = f"vmem ltm delete --user alice --app app --id {old['id']} --yes"
    assert command in line
    [entry] = HistoryLog(default_path()).entries(command="ltm edit")
    assert (entry["outcome"], entry["exit_code"]) == ("failed", 1)
    assert entry["counts"] == {"memories": 1} and entry["ids"] == [new["id"]]

    monkeypatch.setattr(LocalBackend, "delete_memories", real)
    assert vmem(*command.split()[1:]).exit_code == 0
    left = json.loads(vmem("ltm", "list", "-u", "alice", "--json").stdout)
    assert sorted(text_of(m) for m in left) == ["I am allergic to tree nuts", "I live in Lisbon"]


def test_a_store_that_cannot_list_its_users_is_exit_4_for_edit_and_show_alike(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without --user the memory's owner is looked up across the store's users: a backend that
    cannot list them is 'not supported' (exit 4, DESIGN.md), the same one lookup for `ltm edit`
    and `ltm show` (edit said exit 2); with --user both find it."""
    from veadk_mem.ltm.backends.local import LocalBackend
    from veadk_mem.ltm.base import Capability

    old = saved(tmp_path)[0]
    monkeypatch.setattr(LocalBackend, "capabilities", LocalBackend.capabilities - {Capability.USERS})
    for args in (["ltm", "edit", old["id"], "--text", "corrected"], ["ltm", "show", old["id"]]):
        result = vmem(*args)
        assert result.exit_code == 4, (args, result.stderr)
        assert "the local backend cannot list its users" in result.stderr and "--user" in result.stderr
    assert vmem("ltm", "show", old["id"], "-u", "alice").exit_code == 0
    result = vmem("ltm", "edit", old["id"], "-u", "alice", "--text", "corrected")
    assert result.exit_code == 0, result.stderr
    assert "corrected" in {text_of(m) for m in json.loads(vmem("ltm", "list", "-u", "alice", "--json").stdout)}
