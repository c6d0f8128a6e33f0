"""Contract tests of the `tos_context` backend: the real `tos` 2.9.4b1 SDK against a local ContextBucket server.

The SDK sends control-plane calls to `{account_id}.{control endpoint host}`, which a
loopback test reaches through the client's HTTP proxy (`HTTP_PROXY`, honoured by the
SDK's requests session). The server checks the TOS4-HMAC-SHA256 signature header,
x-tos-date and x-tos-account-id, keeps buckets, context sets and memories, and answers
searches from them.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path

import pytest
import tos  # the tos extra is a runtime dependency of the test venv: no skip when it is missing
from hosted_servers import ACCOUNT, AK, SK, STS, TosContextServer
from typer.testing import CliRunner

from veadk_mem.cli.app import app
from veadk_mem.config import load_settings
from veadk_mem.errors import BadInput, StoreError
from veadk_mem.ltm.backends.tos_context import TosContextBackend

pytestmark = pytest.mark.contract
CONTROL = "http://tos-control.test"
BUCKET = "vmem-memory"


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch) -> Iterator[TosContextServer]:
    """A ContextBucket control plane behind a local proxy; vmem configured for it."""
    srv = TosContextServer().start()
    for name in ("NO_PROXY", "no_proxy"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HTTP_PROXY", srv.url)
    monkeypatch.setenv("http_proxy", srv.url)
    monkeypatch.setenv("LONG_TERM_MEMORY_BACKEND", "tos_context")
    monkeypatch.setenv("DATABASE_TOS_CONTEXT_ACCOUNT_ID", ACCOUNT)
    monkeypatch.setenv("DATABASE_TOS_CONTEXT_CONTROL_ENDPOINT", CONTROL)
    monkeypatch.setenv("DATABASE_TOS_CONTEXT_BUCKET_NAME", BUCKET)
    monkeypatch.setenv("VOLCENGINE_ACCESS_KEY", AK)
    monkeypatch.setenv("VOLCENGINE_SECRET_KEY", SK)
    monkeypatch.setattr(TosContextBackend, "retry_delays", (0.01, 0.01, 0.01))
    yield srv
    srv.stop()


def session_file(tmp: Path, session_id: str = "sess-1", user: str = "user-42") -> Path:
    texts = [
        ("user", "I am allergic to peanuts and I live in Hangzhou."),
        ("model", "Noted."),
        ("user", "Book me a window seat on trains."),
    ]
    session = {
        "id": session_id,
        "appName": "ltm_demo",
        "userId": user,
        "state": {},
        "lastUpdateTime": 1764489600.0,
        "events": [
            {
                "id": f"e{n}",
                "invocationId": f"i{n}",
                "author": "user" if role == "user" else "agent",
                "timestamp": 1764489600.0 + n,
                "content": {"role": role, "parts": [{"text": text}]},
            }
            for n, (role, text) in enumerate(texts)
        ],
    }
    path = tmp / f"{session_id}.json"
    path.write_text(json.dumps(session))
    return path


def other_session(tmp: Path, session_id: str) -> Path:
    """A session with a text not saved before (vmem's replay ledger skips what it sent already)."""
    path = session_file(tmp, session_id)
    data = json.loads(path.read_text())
    data["events"][0]["content"]["parts"][0]["text"] = f"I moved to Shanghai ({session_id})."
    path.write_text(json.dumps(data))
    return path


def invoke(runner: CliRunner, *args: str) -> tuple[int, str, str]:
    result = runner.invoke(app, list(args))
    return result.exit_code, result.stdout, result.stderr


def no_secret(*texts: str) -> None:
    for text in texts:
        for secret in (AK, SK, STS):
            assert secret not in text


def test_save_creates_bucket_and_memory_set_then_one_request(server: TosContextServer, runner: CliRunner) -> None:
    code, out, err = invoke(runner, "ltm", "save", str(session_file(Path.cwd())))
    assert code == 0, err
    paths = [(r.method, r.path) for r in server.requests]
    assert paths == [
        ("POST", "/GetContextBucket"),
        ("POST", "/CreateContextBucket"),
        ("POST", "/GetContextSet"),
        ("POST", "/CreateContextSet"),
        ("POST", "/v1/memories"),
    ]
    create_set = server.calls("/CreateContextSet")[0].body
    assert create_set == {
        "context_bucket_name": BUCKET,
        "context_set_name": "user-42/",
        "enable": True,
        "scenes": ["memory"],
    }
    memory = server.calls("/v1/memories")[0]
    assert memory.body == {
        "user_id": f"{BUCKET}/user-42/",
        "messages": [
            {"role": "user", "content": "I am allergic to peanuts and I live in Hangzhou."},
            {"role": "user", "content": "Book me a window seat on trains."},
        ],
        "infer": True,
    }
    headers = memory.headers
    assert headers["Host"] == f"{ACCOUNT}.tos-control.test"
    assert headers["x-tos-account-id"] == ACCOUNT
    assert headers["Authorization"].startswith(f"TOS4-HMAC-SHA256 Credential={AK}/")
    assert "/cn-beijing/tos/request" in headers["Authorization"]
    no_secret(out, err)


def test_second_save_reuses_bucket_and_set(server: TosContextServer, runner: CliRunner) -> None:
    invoke(runner, "ltm", "save", str(session_file(Path.cwd())))
    server.requests.clear()
    code, _, err = invoke(runner, "ltm", "save", str(other_session(Path.cwd(), "sess-2")))
    assert code == 0, err
    assert [r.path for r in server.requests] == ["/GetContextBucket", "/GetContextSet", "/v1/memories"]


def test_infer_off_region_and_sts(server: TosContextServer, runner: CliRunner, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DATABASE_TOS_CONTEXT_INFER", "false")
    monkeypatch.setenv("REGION", "cn-shanghai")
    monkeypatch.setenv("VOLCENGINE_SESSION_TOKEN", STS)
    code, out, err = invoke(runner, "ltm", "save", str(session_file(Path.cwd())))
    assert code == 0, err
    memory = server.calls("/v1/memories")[0]
    assert memory.body["infer"] is False
    assert "/cn-shanghai/tos/request" in memory.headers["Authorization"]
    assert memory.headers["x-tos-security-token"] == STS
    no_secret(out, err)


def test_search_and_list(server: TosContextServer, runner: CliRunner) -> None:
    invoke(runner, "ltm", "save", str(session_file(Path.cwd())))
    invoke(runner, "ltm", "save", str(session_file(Path.cwd(), "sess-7", user="user-7")))
    code, out, err = invoke(runner, "ltm", "search", "peanuts allergic", "--user", "user-42", "--json")
    assert code == 0, err
    entries = json.loads(out)
    assert [e["content"]["parts"][0]["text"] for e in entries] == ["I am allergic to peanuts and I live in Hangzhou."]
    assert entries[0]["custom_metadata"]["score"] == 1.0 and entries[0]["id"].startswith("mem-")
    search = server.calls("/v1/memories/search")[0].body
    assert search == {"user_id": f"{BUCKET}/user-42/", "query": "peanuts allergic", "limit": 5}
    code, out, err = invoke(runner, "ltm", "list", "--user", "user-42", "--json")
    assert code == 0, err
    assert len(json.loads(out)) == 2
    assert server.calls("/v1/memories")[-1].method == "GET"


def test_search_of_a_user_without_a_set_is_empty_and_creates_nothing(
    server: TosContextServer, runner: CliRunner
) -> None:
    code, out, _ = invoke(runner, "ltm", "search", "anything", "--user", "nobody", "--json")
    assert code == 0 and json.loads(out) == []
    assert server.calls("/CreateContextSet") == [] and server.calls("/CreateContextBucket") == []


def test_a_set_not_enabled_for_memory_is_refused(server: TosContextServer, runner: CliRunner) -> None:
    server.buckets[BUCKET] = 1
    server.sets[(BUCKET, "user-42/")] = {"enable": True, "scenes": ["workspace"]}
    code, _, err = invoke(runner, "ltm", "search", "x", "--user", "user-42")
    assert code == 2
    assert "context set 'user-42' of TOS ContextBucket 'vmem-memory' is not enabled for memory" in err
    assert server.calls("/v1/memories/search") == []


def test_delete_is_not_supported(server: TosContextServer, runner: CliRunner) -> None:
    invoke(runner, "ltm", "save", str(session_file(Path.cwd())))
    code, _, err = invoke(runner, "ltm", "delete", "--user", "user-42", "--all", "-y")
    assert code == 4 and "has no call to delete a memory" in err


def test_required_settings_are_checked_first(runner: CliRunner, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LONG_TERM_MEMORY_BACKEND", "tos_context")
    code, _, err = invoke(runner, "ltm", "search", "x", "--user", "u")
    assert code == 2 and "DATABASE_TOS_CONTEXT_ACCOUNT_ID is not set" in err
    monkeypatch.setenv("DATABASE_TOS_CONTEXT_ACCOUNT_ID", ACCOUNT)
    code, _, err = invoke(runner, "ltm", "search", "x", "--user", "u")
    assert code == 2 and "DATABASE_TOS_CONTEXT_CONTROL_ENDPOINT is not set" in err
    monkeypatch.setenv("DATABASE_TOS_CONTEXT_CONTROL_ENDPOINT", CONTROL)
    code, _, err = invoke(runner, "ltm", "search", "x", "--user", "u", "--app", "my-app")
    assert code == 2 and "no TOS credentials: set VOLCENGINE_ACCESS_KEY and VOLCENGINE_SECRET_KEY" in err


@pytest.mark.parametrize("name", ["ab", "Upper", "under_score", "-lead", "trail-", "x" * 64])
def test_bucket_naming(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DATABASE_TOS_CONTEXT_ACCOUNT_ID", ACCOUNT)
    monkeypatch.setenv("DATABASE_TOS_CONTEXT_CONTROL_ENDPOINT", CONTROL)
    with pytest.raises(BadInput, match="invalid TOS ContextBucket name"):
        TosContextBackend(name, settings=load_settings().settings).precheck_index_naming()


def test_endpoint_and_region_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DATABASE_TOS_CONTEXT_ACCOUNT_ID", ACCOUNT)
    monkeypatch.setenv("DATABASE_TOS_CONTEXT_CONTROL_ENDPOINT", CONTROL)
    b = TosContextBackend("abc", settings=load_settings().settings, env={})
    assert (b.region, b.endpoint, b.bucket) == ("cn-beijing", "tos-cn-beijing.volces.com", "abc")
    b = TosContextBackend("abc", settings=load_settings().settings, env={"REGION": "cn-guangzhou"})
    assert (b.region, b.endpoint) == ("cn-guangzhou", "tos-cn-guangzhou.volces.com")


def test_old_sdk_is_named(server: TosContextServer, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delattr(tos.TosClientV2, "create_context_bucket_memory")
    b = TosContextBackend(BUCKET, settings=load_settings().settings)
    with pytest.raises(Exception) as info:
        b.client()
    assert getattr(info.value, "exit_code", None) == 4
    assert "has no ContextBucket calls (create_context_bucket_memory)" in str(info.value)
    assert "tos>=2.9.4b1" in (info.value.hint or "")  # type: ignore[attr-defined]


# --- failures ---------------------------------------------------------------------------


def test_403_is_exit_1_naming_what_to_check(
    server: TosContextServer, runner: CliRunner, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("VOLCENGINE_ACCESS_KEY", "AKLTwrongkey")
    code, out, err = invoke(runner, "ltm", "save", str(session_file(Path.cwd())))
    assert code == 1
    assert "refused the credentials (HTTP 403, code SignatureDoesNotMatch)" in err
    assert "DATABASE_TOS_CONTEXT_ACCOUNT_ID" in err and "Traceback" not in err
    assert len(server.calls("/GetContextBucket")) == 1
    no_secret(out, err)


def test_401_is_exit_1(server: TosContextServer, runner: CliRunner) -> None:
    server.buckets[BUCKET] = 1
    server.sets[(BUCKET, "u/")] = {"enable": True, "scenes": ["memory"]}
    server.fail("/v1/memories/search", 401, {"Code": "InvalidAccessKeyId", "Message": "bad key"})
    code, _, err = invoke(runner, "ltm", "search", "x", "--user", "u")
    assert code == 1 and "HTTP 401" in err and "check VOLCENGINE_ACCESS_KEY" in err


def test_5xx_is_retried_then_reported(server: TosContextServer, runner: CliRunner) -> None:
    server.fail("/v1/memories", 500, {"Code": "InternalError", "Message": "oops"}, times=1)
    code, _, err = invoke(runner, "ltm", "save", str(session_file(Path.cwd())))
    assert code == 0, err
    assert len(server.calls("/v1/memories")) == 2
    server.fail("/v1/memories", 503, b"<html>\nService Unavailable\n</html>", times=9)
    code, _, err = invoke(runner, "ltm", "save", str(other_session(Path.cwd(), "sess-2")))
    assert code == 1 and "failed (HTTP 503) after 3 retries while calling POST /v1/memories" in err
    assert "Traceback" not in err


def test_malformed_reply_is_one_line(server: TosContextServer, runner: CliRunner) -> None:
    server.buckets[BUCKET] = 1
    server.sets[(BUCKET, "u/")] = {"enable": True, "scenes": ["memory"]}
    server.fail("/v1/memories/search", 200, b"{not json")
    code, _, err = invoke(runner, "ltm", "search", "x", "--user", "u")
    assert code == 1
    assert "sent a malformed reply while calling POST /v1/memories/search: the reply is not JSON" in err
    assert len(err.strip().splitlines()) == 2  # the error and its hint


def test_unreachable_proxy(server: TosContextServer, runner: CliRunner, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HTTP_PROXY", "http://127.0.0.1:9")
    monkeypatch.setenv("http_proxy", "http://127.0.0.1:9")
    code, _, err = invoke(runner, "ltm", "search", "x", "--user", "u")
    assert code == 1 and "cannot reach TOS ContextBucket at http://tos-control.test" in err


# --- health -----------------------------------------------------------------------------


def test_health(server: TosContextServer, monkeypatch: pytest.MonkeyPatch) -> None:
    report = asyncio.run(TosContextBackend(BUCKET, settings=load_settings().settings).health())
    assert report.target == f"{CONTROL} account {ACCOUNT} bucket {BUCKET}"
    assert report.exists is False and report.problems == []
    assert "credentials: VOLCENGINE_ACCESS_KEY/VOLCENGINE_SECRET_KEY" in report.notes
    server.buckets[BUCKET] = 1
    assert asyncio.run(TosContextBackend(BUCKET, settings=load_settings().settings).health()).exists is True
    monkeypatch.setenv("VOLCENGINE_ACCESS_KEY", "AKLTother")
    report = asyncio.run(TosContextBackend(BUCKET, settings=load_settings().settings).health())
    assert report.problems and "refused the credentials" in report.problems[0]
    no_secret(repr(report))
    monkeypatch.delenv("VOLCENGINE_ACCESS_KEY")
    report = asyncio.run(TosContextBackend(BUCKET, settings=load_settings().settings).health())
    assert report.problems == ["no credentials: set VOLCENGINE_ACCESS_KEY and VOLCENGINE_SECRET_KEY"]


def test_health_unreachable_raises(server: TosContextServer, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HTTP_PROXY", "http://127.0.0.1:9")
    monkeypatch.setenv("http_proxy", "http://127.0.0.1:9")
    monkeypatch.setattr(TosContextBackend, "retry_delays", ())
    with pytest.raises(StoreError, match="cannot reach TOS ContextBucket"):
        asyncio.run(TosContextBackend(BUCKET, settings=load_settings().settings).health())
