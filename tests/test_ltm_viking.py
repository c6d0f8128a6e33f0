"""Contract tests of the `viking` backend: the real vikingdb-python-sdk against a local VikingDB memory server.

The server (tests/hosted_servers.py) speaks the documented protocol: `POST
/api/memory/session/add`, `/api/memory/search`, the collection info/create endpoints of
VeADK's own client, `{"code": 0, "data": ...}` replies, V4 signatures of service `air` or
a Bearer API key. It keeps what is saved and answers searches from it.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from hosted_servers import AK, API_KEY, SK, STS, VikingMemoryServer
from typer.testing import CliRunner

from veadk_mem.cli.app import app
from veadk_mem.config import load_settings
from veadk_mem.errors import BadInput, StoreError
from veadk_mem.ltm.backends.viking import VikingBackend
from veadk_mem.ltm.base import MemoryRecord

pytestmark = pytest.mark.contract
SECRETS = (AK, SK, API_KEY, STS)


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch) -> Iterator[VikingMemoryServer]:
    """A VikingDB memory server on a free port; vmem configured for it with AK/SK."""
    srv = VikingMemoryServer().start()
    monkeypatch.setenv("LONG_TERM_MEMORY_BACKEND", "viking")
    monkeypatch.setenv("DATABASE_VIKINGMEM_BASE_URL", srv.url)
    monkeypatch.setenv("VOLCENGINE_ACCESS_KEY", AK)
    monkeypatch.setenv("VOLCENGINE_SECRET_KEY", SK)
    monkeypatch.setattr(VikingBackend, "retry_delays", (0.01, 0.01, 0.01))
    yield srv
    srv.stop()


def session_file(tmp: Path, session_id: str = "sess-1", user: str = "user-42", app_name: str = "ltm_demo") -> Path:
    events = [
        ("user", "user", "I am allergic to peanuts and I live in Hangzhou."),
        ("agent", "model", "Noted: no peanuts."),
        ("user", "user", "Book me a window seat on trains."),
    ]
    session = {
        "id": session_id,
        "appName": app_name,
        "userId": user,
        "state": {},
        "lastUpdateTime": 1764489600.0,
        "events": [
            {
                "id": f"e{n}",
                "invocationId": f"i{n}",
                "author": author,
                "timestamp": 1764489600.0 + n,
                "content": {"role": role, "parts": [{"text": text}]},
            }
            for n, (author, role, text) in enumerate(events)
        ],
    }
    path = tmp / f"{session_id}.json"
    path.write_text(json.dumps(session))
    return path


def invoke(runner: CliRunner, *args: str) -> tuple[int, str, str]:
    result = runner.invoke(app, list(args))
    return result.exit_code, result.stdout, result.stderr


def no_secret(*texts: str) -> None:
    for text in texts:
        for secret in SECRETS:
            assert secret not in text


def backend(index: str = "ltm_demo") -> VikingBackend:
    b = VikingBackend(index, settings=load_settings().settings)
    b.precheck_index_naming()
    return b


# --- save -----------------------------------------------------------------------------


def test_save_creates_collection_and_adds_one_session(server: VikingMemoryServer, runner: CliRunner) -> None:
    code, out, err = invoke(runner, "ltm", "save", str(session_file(Path.cwd())))
    assert code == 0, err
    create = server.calls("/api/memory/collection/create")
    assert len(create) == 1
    assert create[0].body["CollectionName"] == "ltm_demo"
    assert create[0].body["ProjectName"] == "default"
    assert create[0].body["BuiltinEventTypes"] == ["sys_event_v1", "sys_profile_v1"]
    adds = server.calls("/api/memory/session/add")
    assert len(adds) == 1  # one request for the whole session, never one per event
    body = adds[0].body
    assert body["session_id"] == "sess-1"
    assert body["collection_name"] == "ltm_demo" and body["project_name"] == "default"
    # the default policy keeps user text events: VeADK's messages, text of the first part
    assert body["messages"] == [
        {"role": "user", "content": "I am allergic to peanuts and I live in Hangzhou."},
        {"role": "user", "content": "Book me a window seat on trains."},
    ]
    meta = body["metadata"]
    assert meta["default_user_id"] == "user-42" and meta["default_assistant_id"] == "assistant"
    assert isinstance(meta["time"], int) and meta["time"] > 1_700_000_000_000  # milliseconds
    auth = adds[0].headers["Authorization"]
    assert auth.startswith(f"HMAC-SHA256 Credential={AK}/") and "/cn-beijing/air/request" in auth
    assert "X-Date" in adds[0].headers and "X-Content-Sha256" in adds[0].headers
    no_secret(out, err)


def test_replay_lands_on_the_same_viking_session(server: VikingMemoryServer, runner: CliRunner) -> None:
    path = session_file(Path.cwd())
    assert invoke(runner, "ltm", "save", str(path))[0] == 0
    code, _, err = invoke(runner, "ltm", "save", str(path))
    assert code == 0, err
    # the same memories again: vmem's replay ledger sends nothing (the service cannot say what it holds)
    assert len(server.calls("/api/memory/session/add")) == 1
    events = [m for m in server.memories.values() if m["memory_type"] == "sys_event_v1"]
    assert len(events) == 2  # same session, same memories: nothing doubled
    data = json.loads(path.read_text())
    data["events"].append({**data["events"][0], "id": "e9", "content": {"role": "user", "parts": [{"text": "new"}]}})
    path.write_text(json.dumps(data))
    code, _, err = invoke(runner, "ltm", "save", str(path))
    assert code == 0, err
    adds = server.calls("/api/memory/session/add")
    assert [a.body["session_id"] for a in adds] == ["sess-1", "sess-1"]  # a later save lands on the same session
    assert len(server.calls("/api/memory/collection/create")) == 1  # exists the second time


def test_existing_collection_is_not_created_again(server: VikingMemoryServer, runner: CliRunner) -> None:
    server.collections[("default", "ltm_demo")] = {"BuiltinEventTypes": ["sys_event_v1"]}
    assert invoke(runner, "ltm", "save", str(session_file(Path.cwd())))[0] == 0
    assert server.calls("/api/memory/collection/create") == []
    assert len(server.calls("/api/memory/collection/info")) == 1


def test_project_and_memory_types_from_the_environment(
    server: VikingMemoryServer, runner: CliRunner, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DATABASE_VIKINGMEM_PROJECT", "proj_a")
    monkeypatch.setenv("DATABASE_VIKINGMEM_MEMORY_TYPE", "sys_event_v1, event_v1")
    monkeypatch.setenv("REGION", "cn-shanghai")
    assert invoke(runner, "ltm", "save", str(session_file(Path.cwd())))[0] == 0
    create = server.calls("/api/memory/collection/create")[0]
    assert create.body["ProjectName"] == "proj_a"
    assert create.body["BuiltinEventTypes"] == ["sys_event_v1", "event_v1"]
    assert "/cn-shanghai/air/request" in create.headers["Authorization"]
    invoke(runner, "ltm", "search", "peanuts", "--user", "user-42", "--app", "ltm_demo")
    search = server.calls("/api/memory/search")[0]
    assert search.body["project_name"] == "proj_a"
    assert search.body["filter"] == {"user_id": "user-42", "memory_type": ["sys_event_v1", "event_v1"]}


def test_sts_token_is_sent(server: VikingMemoryServer, runner: CliRunner, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VOLCENGINE_SESSION_TOKEN", STS)
    code, out, err = invoke(runner, "ltm", "save", str(session_file(Path.cwd())))
    assert code == 0, err
    assert server.calls("/api/memory/session/add")[0].headers["X-Security-Token"] == STS
    no_secret(out, err)


def test_api_key_for_memory_operations_skips_collection_management(
    server: VikingMemoryServer, runner: CliRunner, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("VOLCENGINE_ACCESS_KEY")
    monkeypatch.delenv("VOLCENGINE_SECRET_KEY")
    monkeypatch.setenv("DATABASE_VIKINGMEM_API_KEY", API_KEY)
    server.collections[("default", "ltm_demo")] = {"BuiltinEventTypes": ["sys_event_v1", "sys_profile_v1"]}
    code, out, err = invoke(runner, "ltm", "save", str(session_file(Path.cwd())))
    assert code == 0, err
    assert server.calls("/api/memory/collection/info") == []
    assert server.calls("/api/memory/session/add")[0].headers["Authorization"] == f"Bearer {API_KEY}"
    no_secret(out, err)


def test_api_key_into_a_missing_collection_names_it(
    server: VikingMemoryServer, runner: CliRunner, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("VOLCENGINE_ACCESS_KEY")
    monkeypatch.delenv("VOLCENGINE_SECRET_KEY")
    monkeypatch.setenv("DATABASE_VIKINGMEM_API_KEY", API_KEY)
    code, _, err = invoke(runner, "ltm", "search", "x", "--user", "u", "--app", "nope")
    assert code == 3
    assert "collection 'nope' does not exist in project 'default'" in err
    assert "Traceback" not in err


def test_no_credentials_is_exit_2_naming_the_variables(
    server: VikingMemoryServer, runner: CliRunner, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("VOLCENGINE_ACCESS_KEY")
    monkeypatch.delenv("VOLCENGINE_SECRET_KEY")
    code, _, err = invoke(runner, "ltm", "save", str(session_file(Path.cwd())))
    assert code == 2  # every session failed for the missing credentials: bad configuration
    assert "DATABASE_VIKINGMEM_API_KEY" in err and "VOLCENGINE_ACCESS_KEY" in err and "VOLCENGINE_SECRET_KEY" in err
    code, _, err = invoke(runner, "ltm", "search", "x", "--user", "u")
    assert code == 2
    assert "no VikingDB memory credentials: set DATABASE_VIKINGMEM_API_KEY, or VOLCENGINE_ACCESS_KEY" in err
    assert server.requests == []


def test_byteplus_reads_byteplus_keys(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CLOUD_PROVIDER", "byteplus")
    monkeypatch.setenv("VOLCENGINE_ACCESS_KEY", AK)
    monkeypatch.setenv("VOLCENGINE_SECRET_KEY", SK)
    b = VikingBackend("ltm_demo", settings=load_settings().settings)
    assert b.credential_source() == ""  # VOLCENGINE_* do not count for byteplus
    monkeypatch.setenv("BYTEPLUS_ACCESS_KEY", AK)
    monkeypatch.setenv("BYTEPLUS_SECRET_KEY", SK)
    b = VikingBackend("ltm_demo", settings=load_settings().settings)
    assert b.credential_source() == "BYTEPLUS_ACCESS_KEY/BYTEPLUS_SECRET_KEY"
    assert b.region == "cn-hongkong" and b.host.endswith(".bytepluses.com")


def test_base_url_must_have_a_scheme(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DATABASE_VIKINGMEM_BASE_URL", "127.0.0.1:9")
    with pytest.raises(BadInput, match="must start with http:// or https://"):
        VikingBackend("ltm_demo", settings=load_settings().settings)


@pytest.mark.parametrize("name", ["1abc", "has-dash", "", "a" * 129, "sp ace"])
def test_index_naming(name: str) -> None:
    with pytest.raises(BadInput, match="invalid VikingDB memory collection name"):
        VikingBackend(name, settings=load_settings().settings).precheck_index_naming()


def test_records_without_session_get_one_uuid_session(server: VikingMemoryServer) -> None:
    b = backend()
    records = [
        MemoryRecord(text=json.dumps({"role": "user", "parts": [{"text": t}]}), user_id="u1") for t in ("a b", "c d")
    ]
    ids = asyncio.run(b.save("u1", records))
    adds = server.calls("/api/memory/session/add")
    assert len(adds) == 1 and len(adds[0].body["session_id"]) == 36
    assert ids == [f"{adds[0].body['session_id']}/0", f"{adds[0].body['session_id']}/1"]


# --- search, list, delete, profile ---------------------------------------------------


def test_search_shows_type_score_text_and_json_keeps_memory_entries(
    server: VikingMemoryServer, runner: CliRunner
) -> None:
    invoke(runner, "ltm", "save", str(session_file(Path.cwd())))
    invoke(runner, "ltm", "save", str(session_file(Path.cwd(), "sess-9", user="user-7")))
    code, out, err = invoke(runner, "ltm", "search", "peanuts Hangzhou", "--user", "user-42", "--app", "ltm_demo")
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0].split()[0] == "type"
    assert any(line.startswith("sys_event_v1") and "allergic to peanuts" in line for line in lines)
    search = server.calls("/api/memory/search")[-1]
    assert search.body["filter"] == {"user_id": "user-42", "memory_type": ["sys_event_v1", "sys_profile_v1"]}
    assert search.body["limit"] == 5 and search.body["query"] == "peanuts Hangzhou"
    code, out, _ = invoke(runner, "ltm", "search", "peanuts", "--user", "user-42", "--app", "ltm_demo", "--json")
    entries = json.loads(out)
    assert entries and all(set(e) >= {"id", "author", "timestamp", "content", "custom_metadata"} for e in entries)
    assert all(e["custom_metadata"]["origin"]["user_id"] == "user-42" for e in entries)  # never user-7's
    best = entries[0]
    assert best["content"] == {"role": "user", "parts": [{"text": "I am allergic to peanuts and I live in Hangzhou."}]}
    origin = best["custom_metadata"]["origin"]
    assert origin["memory_type"] == "sys_event_v1" and origin["session_id"] == "sess-1"
    assert origin["memory_info"] == {"summary": "I am allergic to peanuts and I live in Hangzhou."}
    assert best["custom_metadata"]["score"] == 1.0


def test_profile_text_json_and_none(server: VikingMemoryServer, runner: CliRunner) -> None:
    invoke(runner, "ltm", "save", str(session_file(Path.cwd())))
    code, out, err = invoke(runner, "ltm", "profile", "user-42", "--app", "ltm_demo")
    assert code == 0, err
    assert out.startswith("The user said: I am allergic to peanuts")
    call = server.calls("/api/memory/search")[-1]
    assert call.body["filter"] == {"user_id": ["user-42"], "memory_category": 1}
    assert call.body["limit"] == 5000 and "query" not in call.body
    code, out, _ = invoke(runner, "ltm", "profile", "user-42", "--app", "ltm_demo", "--json")
    assert json.loads(out) == {"user_id": "user-42", "profile": out and json.loads(out)["profile"]}
    assert json.loads(out)["profile"].startswith("The user said:")
    code, out, err = invoke(runner, "ltm", "profile", "nobody", "--app", "ltm_demo")
    assert code == 3 and out == ""
    assert "no profile of user 'nobody'" in err


def test_profile_on_another_backend_is_exit_4(runner: CliRunner, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MODEL_EMBEDDING_PROVIDER", "hash")
    code, _, err = invoke(runner, "ltm", "profile", "user-42")
    assert code == 4 and "no user profile" in err


def test_list_and_delete_by_id(server: VikingMemoryServer, runner: CliRunner) -> None:
    invoke(runner, "ltm", "save", str(session_file(Path.cwd())))
    code, out, err = invoke(runner, "ltm", "list", "--user", "user-42", "--app", "ltm_demo", "--json")
    assert code == 0, err
    entries = json.loads(out)
    ids = {e["id"] for e in entries}
    assert len(ids) == 3  # two events and the profile
    listing = server.calls("/api/memory/search")[-1].body
    assert "query" not in listing and listing["filter"]["user_id"] == "user-42"
    event_id = next(e["id"] for e in entries if e["custom_metadata"]["origin"]["memory_type"] == "sys_event_v1")
    profile_id = next(e["id"] for e in entries if e["custom_metadata"]["origin"]["memory_type"] == "sys_profile_v1")
    code, _, err = invoke(
        runner, "ltm", "delete", "--user", "user-42", "--app", "ltm_demo", "--id", event_id, "--id", profile_id, "-y"
    )
    assert code == 0, err
    assert server.calls("/api/memory/event/delete")[0].body["event_id"] == event_id
    assert server.calls("/api/memory/profile/delete")[0].body["profile_id"] == profile_id
    assert set(server.memories) == ids - {event_id, profile_id}


# --- failures ---------------------------------------------------------------------------


def test_401_is_exit_1_naming_what_to_check(
    server: VikingMemoryServer, runner: CliRunner, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("VOLCENGINE_ACCESS_KEY", "AKLTwrongkey")
    code, out, err = invoke(runner, "ltm", "search", "x", "--user", "u", "--app", "ltm_demo")
    assert code == 1
    assert "refused the credentials (HTTP 401, code 1000001)" in err
    assert "check VOLCENGINE_ACCESS_KEY, VOLCENGINE_SECRET_KEY" in err
    assert len(server.calls("/api/memory/search")) == 1  # never retried
    assert "Traceback" not in err and len(err.strip().splitlines()) <= 2
    no_secret(out, err)


def test_403_with_api_key_names_the_api_key(
    server: VikingMemoryServer, runner: CliRunner, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DATABASE_VIKINGMEM_API_KEY", API_KEY)
    server.fail("/api/memory/search", 403, {"code": 1000001, "message": "forbidden", "request_id": "r"})
    code, out, err = invoke(runner, "ltm", "search", "x", "--user", "u", "--app", "ltm_demo")
    assert code == 1 and "HTTP 403" in err and "check DATABASE_VIKINGMEM_API_KEY" in err
    no_secret(out, err)


def test_5xx_is_retried_then_reported_in_one_line(server: VikingMemoryServer, runner: CliRunner) -> None:
    server.fail("/api/memory/search", 502, b"<html>\n<body>Bad Gateway</body>\n</html>", times=10)
    code, _, err = invoke(runner, "ltm", "search", "x", "--user", "u", "--app", "ltm_demo")
    assert code == 1
    assert "failed (HTTP 502" in err and "after 3 retries while calling search" in err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1


def test_5xx_during_save_recovers(server: VikingMemoryServer, runner: CliRunner) -> None:
    server.fail("/api/memory/session/add", 503, {"code": 1000028, "message": "busy"})
    code, _, err = invoke(runner, "ltm", "save", str(session_file(Path.cwd())))
    assert code == 0, err
    assert len(server.calls("/api/memory/session/add")) == 2


def test_malformed_reply_is_one_line(server: VikingMemoryServer, runner: CliRunner) -> None:
    server.collections[("default", "ltm_demo")] = {"BuiltinEventTypes": ["sys_event_v1"]}
    server.fail("/api/memory/search", 200, b"this is not json")
    code, _, err = invoke(runner, "ltm", "search", "x", "--user", "u", "--app", "ltm_demo")
    assert code == 1
    assert "sent a malformed reply while calling search: the reply is not JSON" in err
    assert len(err.strip().splitlines()) == 2 and "Traceback" not in err  # the error and its hint
    server.fail("/api/memory/search", 200, {"code": 0, "data": {"result_list": "oops"}})
    code, _, err = invoke(runner, "ltm", "search", "x", "--user", "u", "--app", "ltm_demo")
    assert code == 1 and "malformed reply while calling search" in err
    server.fail("/api/memory/search", 200, [1, 2])
    code, _, err = invoke(runner, "ltm", "search", "x", "--user", "u", "--app", "ltm_demo")
    assert code == 1 and "malformed reply while calling search: expected a JSON object with 'code'" in err


def test_error_code_in_a_200_reply(server: VikingMemoryServer, runner: CliRunner) -> None:
    server.fail("/api/memory/search", 200, {"code": 1000003, "message": "invalid filter", "request_id": "r"})
    code, _, err = invoke(runner, "ltm", "search", "x", "--user", "u", "--app", "ltm_demo")
    assert code == 1 and "rejected the request (code 1000003) while calling search: invalid filter" in err


def test_unreachable_endpoint(runner: CliRunner, monkeypatch: pytest.MonkeyPatch) -> None:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.setenv("LONG_TERM_MEMORY_BACKEND", "viking")
    monkeypatch.setenv("DATABASE_VIKINGMEM_BASE_URL", f"http://127.0.0.1:{port}")
    monkeypatch.setenv("DATABASE_VIKINGMEM_API_KEY", API_KEY)
    monkeypatch.setattr(VikingBackend, "retry_delays", (0.01,))
    code, out, err = invoke(runner, "ltm", "search", "x", "--user", "u", "--app", "ltm_demo")
    assert code == 1
    where = f"VikingDB memory at http://127.0.0.1:{port}"
    assert f"cannot reach {where} while calling search after 1 retry: Connection refused" in err
    no_secret(out, err)


# --- health -----------------------------------------------------------------------------


def test_health_reports_credentials_endpoint_and_collection(server: VikingMemoryServer) -> None:
    report = asyncio.run(backend().health())
    assert report.target == f"{server.url} project default collection ltm_demo"
    assert "credentials: VOLCENGINE_ACCESS_KEY/VOLCENGINE_SECRET_KEY" in report.notes
    assert report.exists is False and report.problems == []
    server.collections[("default", "ltm_demo")] = {"BuiltinEventTypes": []}
    report = asyncio.run(backend().health())
    assert report.exists is True and report.problems == []
    no_secret(repr(report))


def test_health_with_api_key_only(server: VikingMemoryServer, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("VOLCENGINE_ACCESS_KEY")
    monkeypatch.delenv("VOLCENGINE_SECRET_KEY")
    monkeypatch.setenv("DATABASE_VIKINGMEM_API_KEY", API_KEY)
    report = asyncio.run(backend().health())
    assert report.exists is False and "credentials: DATABASE_VIKINGMEM_API_KEY" in report.notes
    server.collections[("default", "ltm_demo")] = {"BuiltinEventTypes": []}
    assert asyncio.run(backend().health()).exists is True
    no_secret(repr(report))


def test_health_problems(server: VikingMemoryServer, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VOLCENGINE_SECRET_KEY", "wrong-but-secret")
    monkeypatch.setenv("VOLCENGINE_ACCESS_KEY", "AKLTother")
    report = asyncio.run(backend().health())
    assert report.problems and "refused the credentials" in report.problems[0]
    assert "wrong-but-secret" not in repr(report) and "AKLTother" not in repr(report)
    monkeypatch.delenv("VOLCENGINE_ACCESS_KEY")
    report = asyncio.run(backend().health())
    assert report.problems == [
        "no credentials: set DATABASE_VIKINGMEM_API_KEY, or VOLCENGINE_ACCESS_KEY and VOLCENGINE_SECRET_KEY"
    ]


def test_health_unreachable_raises(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DATABASE_VIKINGMEM_BASE_URL", "http://127.0.0.1:9")
    monkeypatch.setenv("DATABASE_VIKINGMEM_API_KEY", API_KEY)
    monkeypatch.setattr(VikingBackend, "retry_delays", ())
    with pytest.raises(StoreError, match="cannot reach VikingDB memory"):
        asyncio.run(backend().health())


def test_missing_sdk_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    monkeypatch.setenv("DATABASE_VIKINGMEM_API_KEY", API_KEY)
    monkeypatch.setitem(sys.modules, "vikingdb", None)
    with pytest.raises(Exception) as info:
        backend().memory_client()
    assert getattr(info.value, "exit_code", None) == 4
    assert "pip install 'veadk-mem[viking]'" in (info.value.hint or "")  # type: ignore[attr-defined]


def test_401_on_collection_management_names_the_ak_sk_even_with_an_api_key(
    server: VikingMemoryServer, runner: CliRunner, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DATABASE_VIKINGMEM_API_KEY", API_KEY)
    monkeypatch.setenv("VOLCENGINE_ACCESS_KEY", "AKLTwrongkey")
    code, out, err = invoke(runner, "ltm", "save", str(session_file(Path.cwd())))
    assert code == 1
    assert "refused the credentials (HTTP 401, code 1000001) while calling collection/info" in err
    assert "check VOLCENGINE_ACCESS_KEY" in err
    assert server.calls("/api/memory/session/add") == []
    no_secret(out, err)


def test_backend_modules_import_no_sdk() -> None:
    """The SDKs load on first use, so choosing another backend (or `--dry-run`) never pays for them."""
    import subprocess
    import sys

    code = (
        "import sys, veadk_mem.ltm.backends.viking, veadk_mem.ltm.backends.tos_context\n"
        "print(sorted(m for m in ('vikingdb', 'tos', 'volcengine') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
