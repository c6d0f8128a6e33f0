"""Issue 21: long-term import never stores under a wrong hash, replays stay idempotent,
every output is safe for a terminal and every JSON in and out is one reader and one encoder.
Each test here failed on the code before its fix."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import numpy  # noqa: F401  (loaded once here, not first inside a command's worker thread)
import pytest
from store_proxy import StoreProxy
from typer.testing import CliRunner

from veadk_mem.cli.app import app


@pytest.fixture(autouse=True)
def hash_embedder(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MODEL_EMBEDDING_PROVIDER", "hash")


def vmem(runner: CliRunner, *args: str, input: str | bytes | None = None, env: dict[str, str] | None = None) -> Any:
    return runner.invoke(app, list(args), input=input, env=env)


def _session(sid: str = "s1", *, user: str = "u", app_name: str = "a", texts: tuple[str, ...] = ("hi",)) -> dict:
    events = [
        {
            "id": f"{sid}-{i}",
            "author": "user",
            "invocationId": "inv",
            "timestamp": 1_790_000_000.0 + i,
            "content": {"role": "user", "parts": [{"text": text}]},
        }
        for i, text in enumerate(texts)
    ]
    return {"id": sid, "appName": app_name, "userId": user, "state": {}, "events": events}


def _strict(text: str) -> Any:
    def refuse(name: str) -> Any:
        raise AssertionError(f"invalid JSON constant {name}")

    return json.loads(text, parse_constant=refuse)


# --- 5. one JSON reader: deep nesting is bad input everywhere -------------------------------------

DEPTH = 3000


def _deep_session_line() -> str:
    """A session whose state nests 3,000 levels deep, on one line."""
    head = json.dumps(_session("deep"))[:-1]
    return head + ', "x": ' + '{"a":' * DEPTH + "1" + "}" * DEPTH + "}"


@pytest.mark.parametrize("layout", ["one-line", "jsonl-line-2", "list"])
@pytest.mark.parametrize(
    "command",
    [
        ("session", "import", "{file}", "--db-url", "{db}"),
        ("policy", "test", "{file}"),
        ("ltm", "save", "{file}"),
    ],
)
def test_deeply_nested_input_is_bad_input_naming_file_and_line(
    runner: CliRunner, tmp_path: Path, command: tuple[str, ...], layout: str
) -> None:
    deep = _deep_session_line()
    file = tmp_path / "deep.jsonl"
    if layout == "one-line":
        file.write_text(deep + "\n")
        line = 1
    elif layout == "jsonl-line-2":
        file.write_text(json.dumps(_session("ok")) + "\n" + deep + "\n")
        line = 2
    else:
        file.write_text("[\n" + json.dumps(_session("ok")) + ",\n" + deep + "\n]\n")
        line = 3
    args = [a.format(file=file, db=tmp_path / "t.db") for a in command]
    result = vmem(runner, *args, env={"LONG_TERM_MEMORY_LOCAL_PATH": str(tmp_path / "ltm.db")})
    # ltm save reports a failing session and saves the others: exit 2 only when all failed
    mixed = command[1] == "save" and layout == "jsonl-line-2"  # a list is one document
    assert result.exit_code == (1 if mixed else 2), result.output
    assert "RecursionError" not in result.stderr and "unexpected" not in result.stderr
    assert f"{file}: line {line}" in result.stderr and "JSON nested too deeply" in result.stderr
    assert not (tmp_path / "t.db").exists()


def test_deeply_nested_policy_is_bad_input(runner: CliRunner, tmp_path: Path) -> None:
    session = tmp_path / "s.json"
    session.write_text(json.dumps(_session()))
    policy = tmp_path / "deep.json"
    policy.write_text('{"include_roles": ' + "[" * DEPTH + "]" * DEPTH + "}")
    for spec, where in ((str(policy), str(policy)), ('{"x":' * DEPTH + "1" + "}" * DEPTH, "(inline JSON)")):
        result = vmem(runner, "policy", "test", str(session), "-p", spec)
        assert result.exit_code == 2, result.output
        assert f"{where}: line 1" in result.stderr and "JSON nested too deeply" in result.stderr


def test_deeply_nested_ltm_import_line_is_bad_input(runner: CliRunner, tmp_path: Path) -> None:
    file = tmp_path / "deep.jsonl"
    file.write_text('{"kind": "header", "format": "vmem-ltm", "version": 1}\n' + "[" * DEPTH + "]" * DEPTH + "\n")
    result = vmem(runner, "ltm", "import", str(file), env={"LONG_TERM_MEMORY_LOCAL_PATH": str(tmp_path / "l.db")})
    assert result.exit_code == 2, result.output
    assert f"{file}:2: " in result.stderr and "JSON nested too deeply" in result.stderr


def test_the_reader_names_line_and_column() -> None:
    from veadk_mem.errors import BadInput
    from veadk_mem.jsonio import loads

    assert loads('{"a": [1, 2]}', "f") == {"a": [1, 2]}
    assert loads('"\\ud800"', "f") == "\ud800"  # a lone surrogate: json keeps it, so do we
    with pytest.raises(BadInput, match=r"^f: line 7, column 6: invalid JSON: expecting value$"):
        loads('{"a":}', "f", line=7)
    with pytest.raises(BadInput, match=r"^f: NaN is not a JSON number$"):
        loads("[NaN]", "f", finite=True)
    with pytest.raises(BadInput, match=r"^f: line 4, column \d+: JSON nested too deeply$"):
        loads("[" * DEPTH + "]" * DEPTH, "f", line=4)


# --- 7. one JSON encoder: NaN in stored state is null in every output ------------------------------


def test_nan_in_stored_state_is_null_in_every_json_output(runner: CliRunner, tmp_path: Path) -> None:
    import sqlite3

    from sessions_helpers import APP, build, sqlite_url

    db = tmp_path / "veadk.db"
    build(sqlite_url(db), {("alice", "s1"): 2})
    with sqlite3.connect(db) as conn:
        conn.execute("""UPDATE sessions SET state = '{"score": NaN, "top": Infinity, "low": -Infinity}'""")
    runs = {
        "list --json": ["session", "list", "--json"],
        "list --jsonl": ["session", "list", "--jsonl"],
        "get --json": ["session", "get", APP, "alice", "s1", "--json"],
        "get --jsonl": ["session", "get", APP, "alice", "s1", "--jsonl"],
        "export": ["session", "export"],
    }
    for name, args in runs.items():
        result = vmem(runner, *args, "--db-url", str(db))
        assert result.exit_code == 0, (name, result.output)
        documents = [_strict(result.stdout)] if "--json" in args else [_strict(x) for x in result.stdout.splitlines()]
        text = json.dumps(documents)
        assert "NaN" not in text and "Infinity" not in text, name
    listed = _strict(vmem(runner, "session", "list", "--json", "--db-url", str(db)).stdout)
    assert {k: listed[0]["state"][k] for k in ("score", "top", "low")} == {"score": None, "top": None, "low": None}


def test_session_json_outputs_escape_c1_and_bidi_from_stored_state(runner: CliRunner, tmp_path: Path) -> None:
    import sqlite3

    from sessions_helpers import APP, build, sqlite_url

    db = tmp_path / "veadk.db"
    build(sqlite_url(db), {("alice", "s1"): 2})
    hostile = "csi\x9b2J rtl\u202eevil del\x7f"
    with sqlite3.connect(db) as conn:
        conn.execute("UPDATE sessions SET state = ?", (json.dumps({"note": hostile}, ensure_ascii=False),))
    for args in (["session", "get", APP, "alice", "s1", "--json"], ["session", "export"]):
        result = vmem(runner, *args, "--db-url", str(db))
        assert result.exit_code == 0, (args, result.output)
        assert not any(ch in result.stdout for ch in "\x9b\u202e\x7f"), args
        docs = (
            [json.loads(line) for line in result.stdout.splitlines()]
            if args[1] == "export"
            else [json.loads(result.stdout)]
        )
        assert hostile in [d.get("state", {}).get("note") for d in docs], (args, docs)  # escaped, not changed


def test_the_encoder_writes_null_for_nan() -> None:
    from datetime import UTC, datetime

    from veadk_mem.jsonio import dumps

    data = {"a": float("nan"), "b": [float("inf"), 1.5], "t": datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)}
    assert dumps(data, compact=True) == '{"a":null,"b":[null,1.5],"t":"2026-01-02T03:04:05Z"}'
    assert dumps({"x": "ü"}) == '{"x": "ü"}'


# --- 4. terminal escapes never reach a terminal raw ----------------------------------------------

EVIL = {
    "clear": "\x1b[2J",
    "title": "\x1b]0;pwned\x07",
    "csi": "\x9b31m",
    "bidi": "\u202e",
}
RAW = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")
SGR = re.compile(r"\x1b\[[0-9;]*m")  # Rich's own bold header on a forced terminal


def _evil_sessions(tmp_path: Path) -> Path:
    sessions = []
    for n, (name, seq) in enumerate(EVIL.items()):
        s = _session(f"s{n}-{seq}x", texts=(f"remember {name} {seq} here",))
        s["events"][0]["author"] = f"user{seq}"
        sessions.append(s)
    file = tmp_path / "evil.jsonl"
    file.write_text("".join(json.dumps(s) + "\n" for s in sessions))
    return file


@pytest.mark.parametrize("terminal", [False, True], ids=["piped", "terminal"])
def test_escapes_from_memories_are_neutralised_in_human_output(
    runner: CliRunner, tmp_path: Path, terminal: bool
) -> None:
    file = _evil_sessions(tmp_path)
    env = {"LONG_TERM_MEMORY_LOCAL_PATH": str(tmp_path / "ltm.db"), "COLUMNS": "200"}
    if terminal:
        env["TTY_COMPATIBLE"] = "1"
    policy = '{"include_roles": ["user"], "include_authors": null}'
    saved = vmem(runner, "ltm", "save", str(file), "-p", policy, env=env)
    assert saved.exit_code == 0, saved.output
    runs = {
        "ltm list": ["ltm", "list", "-u", "u", "-a", "a"],
        "ltm search": ["ltm", "search", "remember", "-u", "u", "-a", "a", "-k", "10"],
        "policy test": ["policy", "test", str(file), "-p", policy],
        "ltm save --dry-run": ["ltm", "save", str(file), "-p", policy, "--dry-run", "-q"],  # -q: no progress bar
    }
    for name, args in runs.items():
        result = vmem(runner, *args, env=env)
        assert result.exit_code == 0, (name, result.output)
        for stream in (result.stdout, result.stderr):
            found = RAW.findall(SGR.sub("", stream))
            assert not found, f"{name}: raw {found!r} in {stream!r}"
        out = SGR.sub("", result.stdout)
        assert "\\x1b[2J" in out and "\\x9b" in out and "\\u202e" in out, (name, out)


def test_json_output_escapes_every_control_and_keeps_the_text_exactly(runner: CliRunner, tmp_path: Path) -> None:
    """json.dumps(ensure_ascii=False) leaves C1 controls and bidi overrides raw: the encoder escapes them."""
    file = _evil_sessions(tmp_path)
    env = {"LONG_TERM_MEMORY_LOCAL_PATH": str(tmp_path / "ltm.db")}
    assert vmem(runner, "ltm", "save", str(file), env=env).exit_code == 0
    for fmt in ("--json", "--jsonl"):
        result = vmem(runner, "ltm", "list", "-u", "u", "-a", "a", fmt, env=env)
        assert result.exit_code == 0 and not RAW.findall(result.stdout), (fmt, result.stdout)
        lines = [result.stdout] if fmt == "--json" else result.stdout.splitlines()
        entries = [e for line in lines for e in (json.loads(line) if fmt == "--json" else [json.loads(line)])]
        texts = {part["text"] for entry in entries for part in entry["content"]["parts"]}
        assert {f"remember {name} {seq} here" for name, seq in EVIL.items()} <= texts


# --- 2. ltm import recomputes the content hash -----------------------------------------------------


@pytest.fixture(params=["local", pytest.param("redis", marks=pytest.mark.redis)])
def ltm_env(request: pytest.FixtureRequest, tmp_path: Path) -> dict[str, str]:
    """The environment of a long-term store: a local file, or the RediSearch server of the tests."""
    if request.param == "local":
        return {"LONG_TERM_MEMORY_LOCAL_PATH": str(tmp_path / "ltm.db")}
    url = request.getfixturevalue("redis_stack")
    return {"LONG_TERM_MEMORY_BACKEND": "redis", "DATABASE_REDIS_URL": url}


def _memories(runner: CliRunner, env: dict[str, str], app_name: str) -> list[str]:
    result = vmem(runner, "ltm", "list", "-u", "u", "-a", app_name, "--json", env=env)
    assert result.exit_code == 0, result.output
    return sorted(part["text"] for entry in json.loads(result.stdout) for part in entry["content"]["parts"])


def test_an_edited_text_keeping_its_hash_is_refused_or_rehashed(
    runner: CliRunner, tmp_path: Path, ltm_env: dict[str, str]
) -> None:
    import uuid

    from veadk_mem.ltm.base import content_hash

    first, second = f"a{uuid.uuid4().hex[:8]}", f"b{uuid.uuid4().hex[:8]}"
    session = tmp_path / "s.json"
    session.write_text(json.dumps(_session(app_name=first, texts=("my phone is 555-1234",))))
    assert vmem(runner, "ltm", "save", str(session), env=ltm_env).exit_code == 0
    exported = tmp_path / "export.jsonl"
    result = vmem(runner, "ltm", "export", "-u", "u", "-a", first, "-o", str(exported), env=ltm_env)
    assert result.exit_code == 0, result.output
    header, line = (json.loads(x) for x in exported.read_text().splitlines())
    original = line["text"]
    line["text"] = original.replace("555-1234", "[redacted]")  # PII redacted, hash kept
    assert line["content_hash"] == content_hash(original)
    edited = tmp_path / "edited.jsonl"
    edited.write_text(json.dumps(header) + "\n" + json.dumps(line) + "\n")

    # into the store holding the original: not a duplicate, an error naming the line
    result = vmem(runner, "ltm", "import", str(edited), env=ltm_env)
    assert result.exit_code == 2, result.output
    assert f"{edited}:2: field 'content_hash' is not the hash of field 'text'" in result.stderr
    assert "--rehash" in result.stderr
    assert _memories(runner, ltm_env, first) == ["my phone is 555-1234"]
    result = vmem(runner, "ltm", "import", str(edited), "--rehash", "--json", env=ltm_env)
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["saved"] == 1
    assert _memories(runner, ltm_env, first) == ["my phone is 555-1234", "my phone is [redacted]"]

    # into an empty index: stored under its own hash, so saving the real session still stores the original
    result = vmem(runner, "ltm", "import", str(edited), "--index", second, env=ltm_env)
    assert result.exit_code == 2, result.output
    result = vmem(runner, "ltm", "import", str(edited), "--index", second, "--rehash", env=ltm_env)
    assert result.exit_code == 0, result.output
    saved = vmem(runner, "ltm", "save", str(session), "--json", env={**ltm_env, "LONG_TERM_MEMORY_INDEX": second})
    assert saved.exit_code == 0, saved.output
    assert json.loads(saved.stdout)["totals"]["saved"] == 1
    assert _memories(runner, ltm_env, second) == ["my phone is 555-1234", "my phone is [redacted]"]


# --- 9. Redis lost during ltm import: one line, and the count the server acknowledged -------------


@pytest.fixture
def plain_redis(tmp_path: Path) -> Any:
    """A redis-server of our own on a free port (no persistence), stopped afterwards."""
    import shutil
    import socket
    import subprocess
    import time

    binary = shutil.which("redis-server")
    if binary is None:
        pytest.skip("*** redis-server is not on PATH ***")
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    args = [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"]
    process = subprocess.Popen([*args, "--dir", str(tmp_path)], stdout=subprocess.DEVNULL)
    deadline = time.monotonic() + 10
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            break
        except OSError:
            if time.monotonic() > deadline:
                process.kill()
                raise
            time.sleep(0.05)
    yield port
    process.kill()
    process.wait()


def test_redis_lost_mid_import_is_one_line_and_the_count_the_server_holds(
    runner: CliRunner, tmp_path: Path, plain_redis: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    import redis

    from veadk_mem.ltm.base import LongTermMemoryBackend

    monkeypatch.setattr(LongTermMemoryBackend, "retry_delays", (0.01, 0.01, 0.01))  # the policy, briefly

    total = 2000
    file = tmp_path / "big.jsonl"
    lines = [json.dumps({"kind": "header", "format": "vmem-ltm", "version": 1})]
    lines += [json.dumps({"text": f"memory {i} about tea", "user_id": "u", "index": "idx"}) for i in range(total)]
    file.write_text("\n".join(lines) + "\n")
    proxy = StoreProxy(plain_redis).start()
    proxy.cut_after(2_500_000)  # past the first batch of 500, inside a later one
    env = {"LONG_TERM_MEMORY_BACKEND": "redis", "DATABASE_REDIS_URL": f"redis://127.0.0.1:{proxy.port}/0"}
    result = vmem(runner, "ltm", "import", str(file), "--json", env=env)
    assert proxy.cut.is_set(), "the proxy never cut: raise the file size or lower the limit"
    assert result.exit_code == 1, result.output
    errors = [line for line in result.stderr.splitlines() if line.startswith("vmem: error:")]
    assert len(errors) == 1, result.stderr
    assert f"redis://127.0.0.1:{proxy.port}/0" in errors[0] and "****" not in errors[0]  # no secret to mask
    summary = json.loads(result.stdout)
    held = redis.Redis(port=plain_redis).dbsize()
    assert 0 < held < total
    assert summary["saved"] == held and summary["stopped"] is True
    assert summary["failed"] + summary["saved"] <= summary["read"] < total


def test_a_redis_url_is_masked_only_where_it_holds_a_secret(runner: CliRunner, monkeypatch: pytest.MonkeyPatch) -> None:
    import socket

    from veadk_mem.ltm.base import LongTermMemoryBackend

    monkeypatch.setattr(LongTermMemoryBackend, "retry_delays", (0.01,))  # a refused connection is retried, briefly

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # nothing listens here once the socket is closed
    for url, shown in (
        (f"redis://127.0.0.1:{port}/0", f"redis at redis://127.0.0.1:{port}/0 "),
        (f"redis://:s3cret-pw@127.0.0.1:{port}/0", f"redis at redis://:****@127.0.0.1:{port}/0 "),
    ):
        env = {"LONG_TERM_MEMORY_BACKEND": "redis", "DATABASE_REDIS_URL": url}
        result = vmem(runner, "ltm", "list", "-u", "u", "-a", "a", env=env)
        assert result.exit_code == 1, result.output
        assert shown in result.stderr and "s3cret" not in result.stderr, result.stderr


# --- 3. the replay ledger: stores that cannot say what they hold are not sent a memory twice -------


def _hosted_session(tmp: Path, session_id: str = "sess-1") -> Path:
    texts = [("user", "I am allergic to peanuts and I live in Hangzhou."), ("user", "Book me a window seat.")]
    session = {
        "id": session_id,
        "appName": "ltm_demo",
        "userId": "user-42",
        "state": {},
        "events": [
            {
                "id": f"e{n}",
                "invocationId": f"i{n}",
                "author": "user",
                "timestamp": 1764489600.0 + n,
                "content": {"role": role, "parts": [{"text": text}]},
            }
            for n, (role, text) in enumerate(texts)
        ],
    }
    path = tmp / f"{session_id}.json"
    path.write_text(json.dumps(session))
    return path


@pytest.fixture
def tos_server(monkeypatch: pytest.MonkeyPatch) -> Any:
    """The TOS ContextBucket stand-in (tests/hosted_servers.py) for the real tos SDK."""
    tos = pytest.importorskip("tos", reason="*** tos>=2.9.4b1 is not installed: pip install --pre 'veadk-mem[tos]' ***")
    if not hasattr(tos.TosClientV2, "create_context_bucket_memory"):
        pytest.skip("*** the installed tos SDK lacks ContextBucket ***")
    from hosted_servers import ACCOUNT, AK, SK, TosContextServer

    from veadk_mem.ltm.backends.tos_context import TosContextBackend

    srv = TosContextServer().start()
    for name in ("NO_PROXY", "no_proxy"):
        monkeypatch.delenv(name, raising=False)
    for name, value in {
        "HTTP_PROXY": srv.url,
        "http_proxy": srv.url,
        "LONG_TERM_MEMORY_BACKEND": "tos_context",
        "DATABASE_TOS_CONTEXT_ACCOUNT_ID": ACCOUNT,
        "DATABASE_TOS_CONTEXT_CONTROL_ENDPOINT": "http://tos-control.test",
        "DATABASE_TOS_CONTEXT_BUCKET_NAME": "vmem-memory",
        "VOLCENGINE_ACCESS_KEY": AK,
        "VOLCENGINE_SECRET_KEY": SK,
    }.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setattr(TosContextBackend, "retry_delays", (0.01, 0.01, 0.01))
    yield srv
    srv.stop()


def test_a_tos_context_replay_sends_nothing_twice(runner: CliRunner, tmp_path: Path, tos_server: Any) -> None:
    session = _hosted_session(tmp_path)
    first = vmem(runner, "ltm", "save", str(session), "--json")
    assert first.exit_code == 0, first.output
    assert json.loads(first.stdout)["totals"]["saved"] == 2
    assert len(tos_server.calls("/v1/memories")) == 1
    ledger = Path.home() / ".local" / "share" / "vmem" / "ledger.db"
    assert ledger.is_file() and ledger.stat().st_mode & 0o077 == 0

    dry = vmem(runner, "ltm", "save", str(session), "--dry-run")
    assert dry.exit_code == 0, dry.output
    assert "ledger_skipped" in dry.stdout  # piped: --tsv's names (#45 item 11)
    assert "ledger: ltm_demo/user-42/sess-1: sent before, skipped: events e0, e1" in dry.stderr
    second = vmem(runner, "ltm", "save", str(session), "--json")
    assert second.exit_code == 0, second.output
    totals = json.loads(second.stdout)["totals"]
    assert (totals["saved"], totals["ledger_skipped"]) == (0, 2)
    assert json.loads(second.stdout)["sessions"][0]["ledger_skipped_events"] == ["e0", "e1"]
    assert len(tos_server.calls("/v1/memories")) == 1  # nothing was sent the second time

    # one new memory in a later session: only it is sent
    grown = json.loads(session.read_text())
    grown["events"].append({**grown["events"][0], "id": "e2", "content": {"role": "user", "parts": [{"text": "new"}]}})
    session.write_text(json.dumps(grown))
    third = vmem(runner, "ltm", "save", str(session), "--json")
    assert json.loads(third.stdout)["totals"]["saved"] == 1
    posts = tos_server.calls("/v1/memories")
    assert len(posts) == 2 and [m["content"] for m in posts[-1].body["messages"]] == ["new"]


def test_an_import_into_tos_context_twice_sends_nothing_the_second_time(
    runner: CliRunner, tmp_path: Path, tos_server: Any
) -> None:
    file = tmp_path / "export.jsonl"
    lines = [{"kind": "header", "format": "vmem-ltm", "version": 1}]
    lines += [{"text": f"memory {i}", "user_id": "user-42", "index": "ltm_demo"} for i in range(3)]
    file.write_text("".join(json.dumps(x) + "\n" for x in lines))
    first = vmem(runner, "ltm", "import", str(file), "--json")
    assert first.exit_code == 0 and json.loads(first.stdout)["saved"] == 3, first.output
    second = vmem(runner, "ltm", "import", str(file), "--json")
    assert second.exit_code == 0, second.output
    summary = json.loads(second.stdout)
    assert (summary["saved"], summary["ledger_skipped"]) == (0, 3)
    assert len(tos_server.calls("/v1/memories")) == 1
    table = vmem(runner, "ltm", "import", str(file))
    assert "skipped_by_ledger" in table.stderr  # the summary: stderr, piped: one-word headers


def test_the_ledger_keeps_stores_users_and_indexes_apart(tmp_path: Path) -> None:
    from veadk_mem.ltm.ledger import Ledger, Scope

    ledger = Ledger(tmp_path / "l.db")
    a = Scope("tos_context", "bucket-1", "app", "u1")
    ledger.record(a, [("h1", "id1", "s1"), ("h2", "", "s2")])
    assert ledger.sent(a, ["h1", "h2", "h3"]) == {"h1", "h2"}
    for other in (Scope("tos_context", "bucket-2", "app", "u1"), Scope("tos_context", "bucket-1", "x", "u1")):
        assert ledger.sent(other, ["h1"]) == set()
    assert ledger.sent(Scope("tos_context", "bucket-1", "app", "u2"), ["h1"]) == set()
    assert ledger.forget(a, ids=["id1"]) == 1 and ledger.sent(a, ["h1", "h2"]) == {"h2"}
    assert ledger.forget(a, sessions=["s2"]) == 1 and ledger.sent(a, ["h2"]) == set()
    ledger.record(a, [("h1", "", "")])
    assert ledger.forget(a, everything=True) == 1
    assert not Ledger(tmp_path / "none.db").sent(a, ["h1"]) and not (tmp_path / "none.db").exists()


@pytest.fixture
def viking_server(monkeypatch: pytest.MonkeyPatch) -> Any:
    pytest.importorskip("vikingdb", reason="*** vikingdb-python-sdk is not installed ***")
    from hosted_servers import AK, SK, VikingMemoryServer

    from veadk_mem.ltm.backends.viking import VikingBackend

    srv = VikingMemoryServer().start()
    monkeypatch.setenv("LONG_TERM_MEMORY_BACKEND", "viking")
    monkeypatch.setenv("DATABASE_VIKINGMEM_BASE_URL", srv.url)
    monkeypatch.setenv("VOLCENGINE_ACCESS_KEY", AK)
    monkeypatch.setenv("VOLCENGINE_SECRET_KEY", SK)
    monkeypatch.setattr(VikingBackend, "retry_delays", (0.01, 0.01, 0.01))
    yield srv
    srv.stop()


@pytest.mark.parametrize("how", ["delete --all", "delete --session", "forget"])
def test_deleting_takes_memories_out_of_the_ledger(
    runner: CliRunner, tmp_path: Path, viking_server: Any, how: str
) -> None:
    """VikingDB memory can delete but not say what it holds: a delete makes the next save resend."""
    session = _hosted_session(tmp_path)
    adds = "/api/memory/session/add"
    assert vmem(runner, "ltm", "save", str(session)).exit_code == 0
    assert vmem(runner, "ltm", "save", str(session)).exit_code == 0
    assert len(viking_server.calls(adds)) == 1
    args = {
        "delete --all": ["ltm", "delete", "-u", "user-42", "-a", "ltm_demo", "--all", "-y"],
        "delete --session": ["ltm", "delete", "-u", "user-42", "-a", "ltm_demo", "--session", "sess-1", "-y"],
        "forget": ["forget", "user-42", "-a", "ltm_demo", "-y", "--db-url", str(tmp_path / "none.db")],
    }[how]
    result = vmem(runner, *args)
    assert result.exit_code == 0, result.output
    again = vmem(runner, "ltm", "save", str(session), "--json")
    assert again.exit_code == 0, again.output
    assert json.loads(again.stdout)["totals"]["saved"] == 2
    assert len(viking_server.calls(adds)) == 2
