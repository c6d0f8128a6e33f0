"""Configuration: precedence, VeADK environment names, sources, masking and errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from veadk_mem.cli.app import app
from veadk_mem.config import KEYS, effective_rows, load_settings, mask_url, starter_toml
from veadk_mem.errors import BadInput

ROOT = Path(__file__).resolve().parents[1]


def _write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def test_defaults_match_veadk() -> None:
    s = load_settings(environ={}).settings
    assert s.short_term_memory.backend == "sqlite"
    assert s.short_term_memory.local_database_path == "/tmp/veadk_local_database.db"
    assert s.long_term_memory.backend == "local"
    assert s.long_term_memory.top_k == 5
    assert s.auto_save.min_messages_threshold == 10
    assert s.auto_save.min_time_threshold == 60


def test_precedence_flag_env_dotenv_file_default(isolated_env: Path) -> None:
    cfg = _write(isolated_env / "vmem.toml", '[database.redis]\nhost = "file-host"\nport = 1111\ndb = 3\n')
    _write(isolated_env / ".env", "DATABASE_REDIS_PORT=2222\nDATABASE_REDIS_DB=4\n")
    env = {"DATABASE_REDIS_DB": "5"}
    loaded = load_settings(None, {"database.redis.host": "flag-host"}, environ=env)
    redis = loaded.settings.database.redis
    assert (redis.host, redis.port, redis.db) == ("flag-host", 2222, 5)
    assert loaded.source_of("database.redis.host") == "flag"
    assert loaded.source_of("database.redis.port") == ".env DATABASE_REDIS_PORT"
    assert loaded.source_of("database.redis.db") == "env DATABASE_REDIS_DB"
    assert loaded.source_of("database.redis.username") == "default"
    assert loaded.file == cfg
    no_flag = load_settings(None, environ={})
    assert no_flag.settings.database.redis.host == "file-host"
    assert no_flag.source_of("database.redis.host") == f"file {cfg}"


def test_config_file_lookup_order(isolated_env: Path, tmp_path: Path) -> None:
    xdg = _write(tmp_path / "home" / ".config" / "vmem" / "config.toml", "[long_term_memory]\ntop_k = 7\n")
    env = {"XDG_CONFIG_HOME": str(tmp_path / "home" / ".config")}
    assert load_settings(environ=env).file == xdg
    local = _write(isolated_env / "vmem.toml", "[long_term_memory]\ntop_k = 8\n")
    assert load_settings(environ=env).settings.long_term_memory.top_k == 8
    named = _write(tmp_path / "other.toml", "[long_term_memory]\ntop_k = 9\n")
    assert load_settings(environ={**env, "VMEM_CONFIG": str(named)}).file == named
    explicit = _write(tmp_path / "explicit.toml", "[long_term_memory]\ntop_k = 10\n")
    assert load_settings(explicit, environ={**env, "VMEM_CONFIG": str(named)}).settings.long_term_memory.top_k == 10
    assert local.exists()


def test_veadk_environment_names() -> None:
    env = {
        "DATABASE_POSTGRESQL_SCHEMA": "agents",
        "DATABASE_MYSQL_CHARSET": "utf8",
        "DATABASE_VIKINGMEM_PROJECT": "proj",
        "DATABASE_VIKING_REGION": "cn-shanghai",
        "DATABASE_TOS_CONTEXT_CONTROL_ENDPOINT": "ctl.example",
        "DATABASE_OPENVIKING_MEMORY_POLICY": "p",
        "MODEL_EMBEDDING_DIM": "384",
        "MIN_MESSAGES_THRESHOLD": "20",
        "VOLCENGINE_ACCESS_KEY": "AK",
    }
    s = load_settings(environ=env).settings
    assert s.database.postgresql.schema_ == "agents"
    assert s.database.mysql.charset == "utf8"
    assert s.database.viking.project == "proj"
    assert s.database.viking.region == "cn-shanghai"
    assert s.database.tos_context.control_endpoint == "ctl.example"
    assert s.database.openviking.memory_policy == "p"
    assert s.model.embedding.dim == 384
    assert s.auto_save.min_messages_threshold == 20
    assert s.volcengine.access_key.get_secret_value() == "AK"


def test_embedding_key_falls_back_to_agent_key() -> None:
    loaded = load_settings(environ={"MODEL_AGENT_API_KEY": "agent-key"})
    assert loaded.settings.model.embedding.api_key.get_secret_value() == "agent-key"
    assert loaded.source_of("model.embedding.api_key") == "env MODEL_AGENT_API_KEY"
    both = load_settings(environ={"MODEL_AGENT_API_KEY": "agent-key", "MODEL_EMBEDDING_API_KEY": "emb"})
    assert both.settings.model.embedding.api_key.get_secret_value() == "emb"


@pytest.mark.parametrize(
    ("toml", "message"),
    [
        (
            '[long_term_memory]\nbackend = "foo"\n',
            r"long_term_memory.backend: expected 'local', .*got 'foo'",
        ),
        (
            '[model.embedding]\nprovider = "bert"\n',
            r"vmem.toml: model.embedding.provider: expected 'auto', 'ark', .*got 'bert'",
        ),
        ('[long_term_memory]\ntop_k = "many"\n', r"vmem.toml: long_term_memory.top_k: expected a valid integer"),
        ("[long_term_memory]\nbakend = 1\n", r"unknown key 'long_term_memory.bakend' \(did you mean 'backend'\?\)"),
        ("[databse]\n", r"unknown key 'databse' \(did you mean 'database'\?\)"),
        ("[long_term_memory\n", r"vmem.toml: invalid TOML: .*line 1"),
    ],
)
def test_bad_config_is_one_line_naming_file_and_key(isolated_env: Path, toml: str, message: str) -> None:
    _write(isolated_env / "vmem.toml", toml)
    with pytest.raises(BadInput, match=message):
        load_settings(environ={})


def test_a_registered_embedder_can_be_named_in_the_config(isolated_env: Path) -> None:
    """A plugin embedder is configured by its name, as a plugin backend is (no closed list)."""
    from veadk_mem.embedding import create_embedder, registry
    from veadk_mem.embedding.hash import HashEmbedder

    _write(isolated_env / "vmem.toml", '[model.embedding]\nprovider = "tiny"\n')
    with pytest.raises(BadInput, match="got 'tiny'"):
        load_settings(environ={})
    registry.register_embedder("tiny", HashEmbedder)
    try:
        loaded = load_settings(environ={})
        assert loaded.settings.model.embedding.provider == "tiny"
        assert isinstance(create_embedder(loaded.settings.model.embedding), HashEmbedder)
    finally:
        registry._registered.pop("tiny", None)


def test_bad_env_value_names_variable_and_hides_secrets() -> None:
    with pytest.raises(BadInput, match="environment variable DATABASE_REDIS_PORT: expected a valid integer"):
        load_settings(environ={"DATABASE_REDIS_PORT": "abc"})


def test_secrets_are_masked_in_config_show(runner: CliRunner, isolated_env: Path) -> None:
    _write(isolated_env / "vmem.toml", '[short_term_memory]\ndb_url = "postgresql://bob:s3cr%40t@db/x"\n')
    env = {"DATABASE_REDIS_PASSWORD": "hunter2", "VOLCENGINE_SECRET_KEY": "SKSKSK", "MODEL_AGENT_API_KEY": "sk-live"}
    result = runner.invoke(app, ["config", "show", "--json"], env=env)
    assert result.exit_code == 0, result.output
    for secret in ("hunter2", "SKSKSK", "sk-live", "s3cr"):
        assert secret not in result.stdout
    data = json.loads(result.stdout)
    assert data["database.redis.password"] == {
        "value": "****",
        "source": "env DATABASE_REDIS_PASSWORD",
        "env": "DATABASE_REDIS_PASSWORD",
    }
    assert data["short_term_memory.db_url"]["value"] == "postgresql://bob:****@db/x"
    assert data["long_term_memory.top_k"]["value"] == 5
    table = runner.invoke(app, ["config", "show"], env=env)
    assert "hunter2" not in table.stdout and "****" in table.stdout


def test_mask_url() -> None:
    assert mask_url("mysql+aiomysql://root:p%40ss@h:3306/db") == "mysql+aiomysql://root:****@h:3306/db"
    assert mask_url("sqlite+aiosqlite:////tmp/x.db") == "sqlite+aiosqlite:////tmp/x.db"


def test_every_key_is_documented_in_examples_toml() -> None:
    assert (ROOT / "examples.toml").read_text(encoding="utf-8") == starter_toml(), (
        "examples.toml is stale: run `python -m veadk_mem.cli.docs`"
    )
    text = starter_toml()
    for key in KEYS:
        assert f"(env {key.env})" in text


def test_config_init_writes_a_file_that_loads(runner: CliRunner, isolated_env: Path) -> None:
    target = isolated_env / "conf" / "vmem.toml"
    result = runner.invoke(app, ["config", "init", str(target)])
    assert result.exit_code == 0, result.output
    assert f"wrote {target}" in result.stderr
    loaded = load_settings(target, environ={})
    assert {r["source"] for r in effective_rows(loaded)} == {"default"}  # defaults as comments, none pinned
    again = runner.invoke(app, ["config", "init", str(target)])
    assert again.exit_code == 2
    assert "already exists" in again.stderr
    assert runner.invoke(app, ["config", "init", str(target), "--force"]).exit_code == 0


def test_config_path(runner: CliRunner, isolated_env: Path) -> None:
    none = runner.invoke(app, ["config", "path", "--json"])
    assert json.loads(none.stdout)["path"] is None
    _write(isolated_env / "vmem.toml", "")
    found = runner.invoke(app, ["config", "path"])
    assert found.stdout.strip() == str(isolated_env / "vmem.toml")


def test_named_policies_are_kept(isolated_env: Path) -> None:
    _write(isolated_env / "vmem.toml", '[policy]\ndefault = "tools"\n[policy.tools]\npreset = "custom"\n')
    s = load_settings(environ={}).settings
    assert s.policy.default == "tools"
    assert s.policy.named() == {"tools": {"preset": "custom"}}


@pytest.mark.parametrize(
    "toml",
    [
        "a = " + "[" * 3000 + "]" * 3000 + "\n",  # arrays: tomllib's own recursion
        "a = " + "{b = " * 3000 + "1" + "}" * 3000 + "\n",  # inline tables
        "[policy.x]\nv = " + "[" * 500 + "]" * 500 + "\n",  # parsed, then too deep for the settings
        ".".join(["k"] * 5000) + " = 1\n",  # dotted keys: parsed flat, nested 5,000 deep
    ],
)
def test_deeply_nested_config_is_one_line_exit_2(runner: CliRunner, isolated_env: Path, toml: str) -> None:
    """A config nested thousands deep gives one line naming the file, exit 2 (was: unexpected RecursionError)."""
    path = _write(isolated_env / "deep.toml", toml)
    result = runner.invoke(app, ["--config", str(path), "config", "show"])
    assert result.exit_code == 2, result.stderr
    [line] = result.stderr.splitlines()
    assert line.startswith(f"vmem: error: {path}: ") and "deep" in line


def test_deeply_nested_policy_file_is_one_line(tmp_path: Path) -> None:
    from veadk_mem.policy import resolve_policy

    path = _write(tmp_path / "deep.toml", "preset = " + "[" * 3000 + "]" * 3000 + "\n")
    with pytest.raises(BadInput, match=r"deep\.toml: invalid TOML: nested too deeply"):
        resolve_policy(str(path))
