"""`vmem doctor` asks each backend for its health through the contract, never by probing."""

from __future__ import annotations

import ast
import json
from pathlib import Path
from typing import Any

import opensearch_server
import pytest
from typer.testing import CliRunner

from veadk_mem.errors import NotSupported, StoreError, missing_extra
from veadk_mem.ltm.backends.memory import MemoryBackend
from veadk_mem.ltm.base import BackendHealth
from veadk_mem.ltm.registry import register_backend


class Scripted(MemoryBackend):
    """A backend whose health() answers what the test says."""

    name = "scripted"
    answer: Any = None

    async def health(self, user_id: str | None = None) -> BackendHealth:
        assert user_id is None  # doctor asks about the whole index, for no user
        if isinstance(Scripted.answer, Exception):
            raise Scripted.answer
        return Scripted.answer  # type: ignore[no-any-return]


def _doctor(monkeypatch: pytest.MonkeyPatch, answer: Any) -> dict[str, Any]:
    from veadk_mem.cli.app import app

    register_backend("scripted", Scripted)  # the configuration accepts any registered name
    Scripted.answer = answer
    env = {"LONG_TERM_MEMORY_BACKEND": "scripted", "SHORT_TERM_MEMORY_BACKEND": "local"}
    result = CliRunner().invoke(app, ["doctor", "--json"], env=env)
    checks = {c["name"]: c for c in json.loads(result.stdout)}
    return {"exit": result.exit_code, **checks["long_term_memory (scripted)"]}


@pytest.fixture(autouse=True)
def _unregister() -> Any:
    from veadk_mem.ltm import registry

    yield
    registry._registered.pop("scripted", None)


def test_every_field_of_the_health_is_rendered(monkeypatch: pytest.MonkeyPatch) -> None:
    health = BackendHealth(
        target="redis://h:1/0", version="redis 8.2.3", exists=True, memories=12, dimension=2048,
        model="doubao-embedding-vision-250615 (2048-d)", notes=["search module: present"],
    )  # fmt: skip
    check = _doctor(monkeypatch, health)
    assert check["status"] == "ok"
    pieces = ["redis://h:1/0: redis 8.2.3", "12 memories", "2048-d vectors", "search module: present"]
    for piece in [*pieces, "embedder doubao-embedding-vision-250615 (2048-d)"]:
        assert piece in check["detail"]


def test_problems_fail_the_check(monkeypatch: pytest.MonkeyPatch) -> None:
    health = BackendHealth(
        target="t", exists=False, problems=["index vectors are 2048-d but the embedder is x (384-d)"]
    )
    check = _doctor(monkeypatch, health)
    assert check["status"] == "fail" and check["exit"] == 1
    assert (
        "index default_app not created yet" in check["detail"]
        and "problem: index vectors are 2048-d" in check["detail"]
    )


def test_a_raised_error_fails_and_not_supported_skips(monkeypatch: pytest.MonkeyPatch) -> None:
    assert _doctor(monkeypatch, StoreError("cannot reach redis at x"))["status"] == "fail"
    skipped = _doctor(monkeypatch, NotSupported("the sdk is not installed"))
    assert skipped["status"] == "skip" and skipped["detail"] == "the sdk is not installed"


def test_a_missing_sdk_fails_with_exit_4_and_the_install_line(monkeypatch: pytest.MonkeyPatch) -> None:
    check = _doctor(monkeypatch, missing_extra("the-sdk", "extra"))
    assert check["status"] == "fail" and check["exit"] == 4
    assert check["detail"] == "the-sdk is not installed; install it with: pip install 'veadk-mem[extra]'"


def test_ltm_doctor_does_not_import_the_doctor_that_calls_it() -> None:
    import veadk_mem.ltm.doctor as lower

    tree = ast.parse(Path(str(lower.__file__)).read_text())
    imported = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    imported |= {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    assert "veadk_mem.ops.doctor" not in imported


@pytest.mark.contract
def test_doctor_on_opensearch_reports_version_and_indexes() -> None:
    from veadk_mem.cli.app import app

    server = opensearch_server.start()
    try:
        env = {
            "LONG_TERM_MEMORY_BACKEND": "opensearch",
            "DATABASE_OPENSEARCH_PORT": str(server.port),
            "DATABASE_OPENSEARCH_USE_SSL": "false",
            "MODEL_EMBEDDING_PROVIDER": "hash",
        }
        result = CliRunner().invoke(app, ["doctor", "--json"], env=env)
    finally:
        server.stop()
    check = {c["name"]: c for c in json.loads(result.stdout)}["long_term_memory (opensearch)"]
    assert check["status"] == "ok", check
    assert f"http://127.0.0.1:{server.port}: opensearch {opensearch_server.VERSION}" in check["detail"]
    assert "0 user index(es) named default_app_*" in check["detail"]
