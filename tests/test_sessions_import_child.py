"""A large import's write pass read in a child process (`sessions/import_child.py`), against real databases.

The child is forced on for these small files (`worthwhile`); what it writes must be what the
in-process path writes, ADK must read it back, and a failure anywhere must stop the child.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from sessions_helpers import APP, adk_get, adk_view, build, sqlite_url

from veadk_mem.errors import BadInput, StoreError
from veadk_mem.sessions import import_child
from veadk_mem.sessions.import_child import ReaderProcess
from veadk_mem.sessions.importer import import_file
from veadk_mem.sessions.store import SessionStore

SESSIONS = {("alice", "s1"): 12, ("alice", "s2"): 3, ("bob", "s3"): 7, ("bob", "empty"): 0}


@pytest.fixture
def children(monkeypatch: pytest.MonkeyPatch) -> list[ReaderProcess]:
    """Force the child reader on for any file; the list collects the children started."""
    started: list[ReaderProcess] = []
    original = ReaderProcess.__init__

    def init(self: ReaderProcess, *args: Any, **kwargs: Any) -> None:
        original(self, *args, **kwargs)
        started.append(self)

    monkeypatch.setattr(import_child, "worthwhile", lambda source: True)
    monkeypatch.setattr(ReaderProcess, "__init__", init)
    return started


def _export(url: str) -> str:
    async def go() -> str:
        async with SessionStore(url) as store:
            return "".join([p async for p in store.export_jsonl()])

    return asyncio.run(go())


def _lines(text: str) -> list[Any]:
    return sorted((json.loads(line) for line in text.splitlines()), key=lambda d: json.dumps(d, sort_keys=True))


def _dump(tmp_path: Path) -> tuple[str, Path]:
    """An ADK-written database with app and user state, and its export with extra state records."""
    source = sqlite_url(tmp_path / "source.db")
    build(source, SESSIONS)
    dump = tmp_path / "dump.jsonl"
    extra = [
        {"kind": "app_state", "appName": APP, "state": {"tier": "gold"}},
        {"kind": "user_state", "appName": APP, "userId": "alice", "state": {"lang": "zh"}},
    ]
    dump.write_text("".join(json.dumps(r) + "\n" for r in extra) + _export(source), encoding="utf-8")
    return source, dump


@pytest.mark.parametrize("target", ["sqlite", "postgres"])
def test_the_child_writes_what_the_in_process_path_writes(
    target: str,
    tmp_path: Path,
    children: list[ReaderProcess],
    request: pytest.FixtureRequest,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    source, dump = _dump(tmp_path)
    url = sqlite_url(tmp_path / "t.db") if target == "sqlite" else str(request.getfixturevalue("pg_url"))
    report = asyncio.run(import_file(SessionStore(url, create=True), dump))
    assert len(children) == 1 and children[0]._proc.returncode == 0  # the child read the file, and ended
    assert (report.sessions, report.events) == (len(SESSIONS), sum(SESSIONS.values()))

    monkeypatch.setattr(import_child, "worthwhile", lambda source: False)
    in_process = sqlite_url(tmp_path / "in_process.db")
    asyncio.run(import_file(SessionStore(in_process, create=True), dump))
    assert len(children) == 1
    assert _lines(_export(url)) == _lines(_export(in_process))

    async def adk_reads() -> None:
        for user, sid in SESSIONS:
            original, imported = await adk_get(source, APP, user, sid), await adk_get(url, APP, user, sid)
            assert original is not None and imported is not None
            want = adk_view(original)
            want["state"] = {**want["state"], "app:tier": "gold", **({"user:lang": "zh"} if user == "alice" else {})}
            assert adk_view(imported) == want

    asyncio.run(adk_reads())


def test_the_child_names_a_bad_line_and_is_reaped(tmp_path: Path) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text(json.dumps({"id": "s", "appName": "a", "userId": "u"}) + "\n{not json\n", encoding="utf-8")
    child = ReaderProcess(path, "bad.jsonl")
    try:
        with pytest.raises(BadInput, match=r"bad\.jsonl: line 2"):
            list(child.batches())
    finally:
        child.close()
    assert child._proc.returncode is not None


def test_an_import_failing_its_checks_stops_the_child_and_writes_nothing(
    tmp_path: Path, children: list[ReaderProcess]
) -> None:
    _, dump = _dump(tmp_path)
    with dump.open("a", encoding="utf-8") as handle:  # past the end of what the child has read ahead
        handle.write(json.dumps({"id": "x", "appName": "a", "userId": "u", "lastUpdateTime": "soon"}) + "\n")
    db = tmp_path / "t.db"
    with pytest.raises(BadInput, match=r"line \d+: \$\.lastUpdateTime"):
        asyncio.run(import_file(SessionStore(str(db), create=True), dump))
    assert len(children) == 1 and children[0]._proc.returncode is not None
    assert not db.exists()


def test_a_child_that_dies_is_an_error_saying_nothing_was_written(
    tmp_path: Path, children: list[ReaderProcess], monkeypatch: pytest.MonkeyPatch
) -> None:
    _, dump = _dump(tmp_path)
    original = ReaderProcess.batches

    def killed(self: ReaderProcess) -> Any:
        self._proc.kill()
        self._proc.wait()
        return original(self)

    monkeypatch.setattr(ReaderProcess, "batches", killed)
    db = sqlite_url(tmp_path / "t.db")
    with pytest.raises(StoreError, match=r"reader process ended unexpectedly.*nothing was written"):
        asyncio.run(import_file(SessionStore(db, create=True), dump))


@pytest.mark.parametrize("child", [True, False], ids=["child", "thread"])
def test_a_key_given_twice_in_one_batch_keeps_the_later_copy_whole(
    child: bool, tmp_path: Path, children: list[ReaderProcess], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The rows built for the earlier copy are left out: its events must not stay beside the later ones."""
    if not child:
        monkeypatch.setattr(import_child, "worthwhile", lambda source: False)

    def session(n: int, t0: float, state: dict[str, Any]) -> dict[str, Any]:
        events = [
            {"id": f"e{t0:.0f}-{i}", "invocationId": "i", "author": "user", "timestamp": t0 + i} for i in range(n)
        ]
        return {"id": "s", "appName": "a", "userId": "u", "state": state, "events": events, "lastUpdateTime": t0 + n}

    other = {"id": "o", "appName": "a", "userId": "u", "state": {}, "events": [], "lastUpdateTime": 5.0}
    records = [session(3, 100.0, {"first": 1}), other, session(2, 200.0, {"second": 2})]
    dump = tmp_path / "twice.jsonl"
    dump.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    db = sqlite_url(tmp_path / "t.db")
    report = asyncio.run(import_file(SessionStore(db, create=True), dump))
    assert len(children) == (1 if child else 0)
    assert (report.sessions, report.events) == (2, 2)

    async def read() -> Any:
        async with SessionStore(db) as store:
            return await store.get_session("a", "u", "s"), await store.get_session("a", "u", "o")

    kept, untouched = asyncio.run(read())
    assert [e.id for e in kept.events] == ["e200-0", "e200-1"] and kept.state == {"second": 2}
    assert untouched is not None and untouched.events == []


def test_only_a_large_jsonl_file_on_two_cores_is_read_by_a_child(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A JSON list is decoded whole: a child would hold a second copy, so it is read in the thread."""
    from veadk_mem.sessions.import_child import worthwhile

    record = json.dumps({"id": "s", "appName": "a", "userId": "u"})
    jsonl, listed, pretty = tmp_path / "a.jsonl", tmp_path / "a.json", tmp_path / "p.json"
    jsonl.write_text(f"{record}\n{record}\n", encoding="utf-8")
    listed.write_text(f"[{record},\n{record}]", encoding="utf-8")
    pretty.write_text(json.dumps(json.loads(record), indent=2), encoding="utf-8")
    monkeypatch.setattr(import_child, "PROCESS_FROM", 10)
    monkeypatch.setattr(import_child.os, "sched_getaffinity", lambda pid: {0, 1}, raising=False)
    assert worthwhile(jsonl) and not worthwhile(listed) and not worthwhile(pretty)
    assert not worthwhile(tmp_path / "missing.jsonl")
    monkeypatch.setattr(import_child.os, "sched_getaffinity", lambda pid: {0}, raising=False)
    assert not worthwhile(jsonl)  # one core: nothing to gain
    monkeypatch.setattr(import_child.os, "sched_getaffinity", lambda pid: {0, 1}, raising=False)
    monkeypatch.setattr(import_child, "PROCESS_FROM", jsonl.stat().st_size + 1)
    assert not worthwhile(jsonl)  # small: the child's start-up would not be hidden by the check


def test_the_child_cuts_batches_by_rows_and_by_seconds_of_reading(tmp_path: Path) -> None:
    """As the thread path: a batch of large events is cut by time, not only at 20,000 rows."""
    path = tmp_path / "s.jsonl"
    path.write_text(
        "".join(json.dumps({"id": f"s{i}", "appName": "a", "userId": "u"}) + "\n" for i in range(6)), encoding="utf-8"
    )

    def sizes(**cuts: Any) -> list[int]:
        child = ReaderProcess(path, "s.jsonl", **cuts)
        try:
            return [len(columns.heads) for columns in child.batches()]
        finally:
            child.close()

    # an hour for the time cut, so that a slow read on a loaded machine cuts no batch early
    assert sizes(first_rows=1, batch_rows=4, batch_seconds=3600) == [1, 4, 1]
    assert sizes(batch_seconds=0.0) == [1] * 6
    assert sizes(batch_seconds=3600) == [6]


def test_a_frame_naming_a_class_is_refused_not_loaded() -> None:
    """Frames carry data only; anything else on the pipe (a stray write, a crafted pickle) is an error."""
    import io
    import os as os_module
    import pickle
    import struct

    from veadk_mem.sessions.import_child import _read_frame

    def frame(payload: bytes) -> io.BytesIO:
        return io.BytesIO(struct.pack("<Q", len(payload)) + payload)

    data = ("batch", ([], [], {"id": ["s"]}, {"timestamp": [1.5]}))
    assert _read_frame(frame(pickle.dumps(data))) == data
    with pytest.raises(StoreError, match=r"sent \w+\.system"):
        _read_frame(frame(pickle.dumps(("batch", os_module.system))))
    with pytest.raises(StoreError, match="unreadable batch"):
        _read_frame(frame(b"hello, this is not a pickle"))
    assert _read_frame(io.BytesIO(b"\x05\x00")) is None  # cut short: the child ended


def test_a_file_whose_first_line_is_a_long_session_is_read_in_the_child(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`worthwhile` takes a JSONL file whose first line passes 1 MiB (an export of a long
    session first): the test read only its first MiB, found no closing brace, and left the
    bench's million-event import to one process (13.7 s against 8.8 s for 300,000 events).
    A JSON list, and an object written over many lines, still are not."""
    monkeypatch.setattr(import_child, "PROCESS_FROM", 0)
    monkeypatch.setattr(import_child.os, "sched_getaffinity", lambda pid: {0, 1})
    session = {"id": "s", "appName": APP, "userId": "u", "events": [{"id": f"e{i}"} for i in range(1, 80_000)]}
    cases = {
        "long first line": ("\n" + json.dumps(session) + "\n" + json.dumps({**session, "events": []}) + "\n", True),
        "short lines": (json.dumps({**session, "events": []}) + "\n", True),
        "an object over many lines": (json.dumps(session, indent=1), False),
        "a list": (json.dumps([session]), False),
    }
    assert len(json.dumps(session)) > 1 << 20
    for name, (text, want) in cases.items():
        path = tmp_path / "f.jsonl"
        path.write_text(text, encoding="utf-8")
        assert import_child.worthwhile(path) is want, name


def test_the_child_reads_a_long_first_session_as_the_in_process_path_does(
    tmp_path: Path, children: list[ReaderProcess], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A file whose first line is long enough to be streamed (`VMEM_BIG_LINE`) imports through
    the child as it does in this process: the same sessions, ADK reading them back."""
    monkeypatch.setenv("VMEM_BIG_LINE", "4096")
    source, dump = _dump(tmp_path)
    lines = dump.read_text(encoding="utf-8").splitlines(keepends=True)
    long_first = sorted(lines, key=len, reverse=True)
    assert len(long_first[0]) > 4096  # the 12-event session, streamed
    dump.write_text("".join(long_first), encoding="utf-8")
    url = sqlite_url(tmp_path / "t.db")
    report = asyncio.run(import_file(SessionStore(url, create=True), dump))
    assert len(children) == 1 and children[0]._proc.returncode == 0
    assert (report.sessions, report.events) == (len(SESSIONS), sum(SESSIONS.values()))
    monkeypatch.setattr(import_child, "worthwhile", lambda source: False)
    in_process = sqlite_url(tmp_path / "in_process.db")
    asyncio.run(import_file(SessionStore(in_process, create=True), dump))
    assert _lines(_export(url)) == _lines(_export(in_process))
    for user, sid in SESSIONS:
        original, imported = asyncio.run(adk_get(source, APP, user, sid)), asyncio.run(adk_get(url, APP, user, sid))
        assert original is not None and imported is not None
        assert [e.id for e in imported.events] == [e.id for e in original.events]
