"""Settings from flags, the environment (+ `.env`), a TOML file and defaults, in that order.

Sections mirror VeADK's configuration names and every key can also be set through the
environment variable VeADK uses for it (`DATABASE_POSTGRESQL_HOST` for
`[database.postgresql] host`). Each loaded value remembers where it came from, so
`vmem config show` can say so.
"""

from __future__ import annotations

import difflib
import os
import tomllib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    ByteSize,
    ConfigDict,
    Field,
    SecretStr,
    ValidationError,
    field_validator,
)
from pydantic.fields import FieldInfo
from pydantic_core import PydanticCustomError

from veadk_mem.embedding import registry as embedders
from veadk_mem.errors import BadInput
from veadk_mem.ltm import registry
from veadk_mem.masking import mask_url as mask_url  # re-exported: callers import it from here
from veadk_mem.masking import redact as redact
from veadk_mem.masking import remember_secret, remember_url_secrets
from veadk_mem.timefmt import DURATION


def _env(name: str) -> Any:
    """Mark a field with the environment variable VeADK reads it from."""
    return {"env": name}


class Section(BaseModel):
    """A TOML table: unknown keys are errors so a typo never passes silently."""

    model_config = ConfigDict(extra="forbid", validate_default=True)


def _registered(value: str, known: Callable[[str], bool], expected: Callable[[], str]) -> str:
    """`value` when a registry knows it, else the error a Literal gives, naming what it knows."""
    if not known(value):
        raise PydanticCustomError("literal_error", "Input should be {expected}", {"expected": expected()})
    return value


class ShortTermMemorySettings(Section):
    backend: Literal["local", "sqlite", "mysql", "postgresql"] = Field(
        "sqlite", description="Session store, as VeADK's ShortTermMemory: local | sqlite | mysql | postgresql"
    )
    local_database_path: str = Field(
        "/tmp/veadk_local_database.db", description="sqlite file used when backend = sqlite"
    )
    db_url: SecretStr = Field(
        SecretStr(""), description="SQLAlchemy URL; overrides backend when set (URL-encode @ and : in passwords)"
    )


class LongTermMemorySettings(Section):
    backend: str = Field(
        "local",
        description="Memory store, as VeADK's LongTermMemory (viking_mem is a deprecated alias)",
    )
    index: str = Field("", description="Index or collection; falls back to the app name, then default_app")
    top_k: int = Field(5, ge=1, description="Memories a search returns")
    search_mode: Literal["auto", "vector", "keyword", "hybrid"] = Field(
        "auto",
        description="ltm search ranking: auto is hybrid for local, vector (what the agent retrieves) elsewhere",
    )
    local_path: str = Field("", description="sqlite file of the local backend; empty means $XDG_DATA_HOME/vmem/ltm.db")

    @field_validator("backend")
    @classmethod
    def _registered_backend(cls, value: str) -> str:
        """A backend the registry knows: the built-ins, entry points and `register_backend` names."""
        return _registered(value, registry.is_known, registry.expected_names)


class EmbeddingSettings(Section):
    provider: str = Field(
        "auto",
        description="auto: with a key, ark for Ark's vision models and openai for the rest (as VeADK); "
        "without one, the local model if installed, else hash; or an embedder a package registers",
    )
    name: str = Field(
        "doubao-embedding-vision-250615", description="Embedding model name, VeADK's default (MODEL_EMBEDDING_NAME)"
    )
    dim: int = Field(2048, ge=1, description="Embedding dimension, VeADK's default (MODEL_EMBEDDING_DIM)")
    api_base: str = Field(
        "https://ark.cn-beijing.volces.com/api/v3/",
        description="Ark or OpenAI-compatible endpoint (MODEL_EMBEDDING_API_BASE)",
    )
    api_key: SecretStr = Field(
        SecretStr(""), description="API key (MODEL_EMBEDDING_API_KEY, falls back to MODEL_AGENT_API_KEY)"
    )
    batch_size: int = Field(64, ge=1, description="Texts per embedding request")
    local_model: str = Field(
        "", description="Folder of a sentence-transformers or model2vec model; empty means the packaged MiniLM"
    )

    @field_validator("provider")
    @classmethod
    def _registered_provider(cls, value: str) -> str:
        """An embedder the registry knows: vmem's own, entry points and `register_embedder` names."""
        return _registered(value, embedders.is_known, embedders.expected_names)


class ModelSettings(Section):
    embedding: EmbeddingSettings = Field(default_factory=EmbeddingSettings)


class PostgresqlSettings(Section):
    host: str = Field("127.0.0.1", description="PostgreSQL host")
    port: int = Field(5432, description="PostgreSQL port")
    user: str = Field("", description="PostgreSQL user")
    password: SecretStr = Field(SecretStr(""), description="PostgreSQL password")
    database: str = Field("", description="PostgreSQL database")
    schema_: str = Field("", alias="schema", description="Schema pinned through search_path")

    model_config = ConfigDict(extra="forbid", populate_by_name=True)


class MysqlSettings(Section):
    host: str = Field("127.0.0.1", description="MySQL / MariaDB host")
    port: int = Field(3306, description="MySQL port")
    user: str = Field("", description="MySQL user")
    password: SecretStr = Field(SecretStr(""), description="MySQL password")
    database: str = Field("", description="MySQL database")
    charset: str = Field("utf8mb4", description="Connection charset")


class RedisSettings(Section):
    host: str = Field("127.0.0.1", description="Redis host (needs RediSearch for vector search)")
    port: int = Field(6379, description="Redis port")
    username: str = Field("", description="Redis ACL user")
    password: SecretStr = Field(SecretStr(""), description="Redis password")
    db: int = Field(0, ge=0, description="Redis database number")
    url: SecretStr = Field(
        SecretStr(""), description="redis:// or rediss:// (TLS) URL; overrides host, port, username, password and db"
    )


class OpensearchSettings(Section):
    host: str = Field("127.0.0.1", description="OpenSearch host")
    port: int = Field(9200, description="OpenSearch port")
    username: str = Field("", description="OpenSearch user")
    password: SecretStr = Field(SecretStr(""), description="OpenSearch password")
    use_ssl: bool = Field(True, description="Connect over TLS")
    cert_path: str = Field("", description="CA bundle for TLS")


class Mem0Settings(Section):
    api_key: SecretStr = Field(SecretStr(""), description="Mem0 platform API key")
    base_url: str = Field("", description="Mem0 API origin, e.g. https://api.mem0.ai (empty: that default)")
    api_key_id: str = Field("", description="VeADK's key fetched through Volcengine IAM: not supported, set api_key")
    project_id: str = Field("", description="VeADK's key fetched through Volcengine IAM: not supported, set api_key")
    infer: bool = Field(True, description="Let Mem0 extract and rewrite memories; false stores text verbatim")


class OpenvikingSettings(Section):
    url: str = Field("", description="OpenViking service URL")
    api_key: SecretStr = Field(SecretStr(""), description="OpenViking API key")
    user_id: str = Field("", description="OpenViking owner user id")
    memory_policy: str = Field("", description="OpenViking memory policy")


class VikingSettings(Section):
    project: str = Field(
        "default", description="VikingDB memory project", json_schema_extra=_env("DATABASE_VIKINGMEM_PROJECT")
    )
    memory_type: str = Field(
        "",
        description="VikingDB memory types, comma separated",
        json_schema_extra=_env("DATABASE_VIKINGMEM_MEMORY_TYPE"),
    )
    region: str = Field(
        "",
        description="Volcengine region; empty: $REGION, then cn-beijing",
        json_schema_extra=_env("DATABASE_VIKING_REGION"),
    )
    api_key: SecretStr = Field(
        SecretStr(""),
        description="VikingDB memory API key for memory operations (else AK/SK)",
        json_schema_extra=_env("DATABASE_VIKINGMEM_API_KEY"),
    )
    base_url: str = Field(
        "",
        description="VikingDB memory endpoint, http:// or https://; empty: the region's",
        json_schema_extra=_env("DATABASE_VIKINGMEM_BASE_URL"),
    )


class TosContextSettings(Section):
    bucket_name: str = Field("", description="TOS ContextBucket name (defaults to the index)")
    account_id: str = Field("", description="Volcengine account id")
    endpoint: str = Field("", description="TOS endpoint; empty: tos-{region}.volces.com")
    region: str = Field("", description="TOS region; empty: $REGION, then cn-beijing")
    control_endpoint: str = Field("", description="TOS control-plane endpoint (required)")
    infer: bool = Field(True, description="Let the service infer memories from what is saved (VeADK's default)")


class DatabaseSettings(Section):
    postgresql: PostgresqlSettings = Field(default_factory=PostgresqlSettings)
    mysql: MysqlSettings = Field(default_factory=MysqlSettings)
    redis: RedisSettings = Field(default_factory=RedisSettings)
    opensearch: OpensearchSettings = Field(default_factory=OpensearchSettings)
    mem0: Mem0Settings = Field(default_factory=Mem0Settings)
    openviking: OpenvikingSettings = Field(default_factory=OpenvikingSettings)
    viking: VikingSettings = Field(default_factory=VikingSettings)
    tos_context: TosContextSettings = Field(default_factory=TosContextSettings)


class VolcengineSettings(Section):
    access_key: SecretStr = Field(SecretStr(""), description="Volcengine access key (AK)")
    secret_key: SecretStr = Field(SecretStr(""), description="Volcengine secret key (SK)")
    session_token: SecretStr = Field(SecretStr(""), description="STS session token for temporary credentials")


class AutoSaveSettings(Section):
    min_messages_threshold: int = Field(
        10, ge=1, description="Events before VeADK auto-saves", json_schema_extra=_env("MIN_MESSAGES_THRESHOLD")
    )
    min_time_threshold: int = Field(
        60, ge=0, description="Seconds before VeADK auto-saves", json_schema_extra=_env("MIN_TIME_THRESHOLD")
    )


class PolicySettings(BaseModel):
    """`default` names the policy `ltm save` applies; other keys are named policy tables."""

    model_config = ConfigDict(extra="allow")

    default: str = Field(
        "default",
        description="Policy applied by `ltm save`: a preset, a [policy.NAME] or a file",
        json_schema_extra=_env("VMEM_POLICY"),
    )

    def named(self) -> dict[str, Any]:
        """The named policies defined as [policy.NAME] tables."""
        return dict(self.model_extra or {})


MIB = 1024 * 1024


def _size(value: Any) -> Any:
    """A size as people write it (`64MiB`, `64MB`, `67108864`) as a plain number of bytes."""
    if not isinstance(value, str):
        return value
    from pydantic import TypeAdapter

    try:
        return int(TypeAdapter(ByteSize).validate_python(value))
    except ValidationError:
        raise PydanticCustomError(
            "byte_size", "Input should be {expected}", {"expected": "a size such as 64MiB, 64MB or 67108864"}
        ) from None


Bytes = Annotated[int, BeforeValidator(_size)]


class TuningSettings(Section):
    """Knobs of vmem's own machinery, each also named by its `VMEM_*` environment variable.

    Read through `tuning()` by the code that needs one, so a knob is set in one way and
    `config show` names where its value came from.
    """

    model_config = ConfigDict(extra="forbid", validate_default=True, frozen=True)

    sqlite_busy_timeout: float = Field(
        10.0,
        ge=0,
        description="Seconds a sqlite statement waits for an agent's write lock before failing",
        json_schema_extra=_env("VMEM_SQLITE_BUSY_TIMEOUT"),
    )
    delete_batch: int = Field(
        200,
        ge=1,
        description="Sessions per delete transaction of session delete / prune",
        json_schema_extra=_env("VMEM_DELETE_BATCH"),
    )
    big_line_bytes: Bytes = Field(
        0,
        description="JSONL line length from which session import streams a session; 0: 16 MiB, 2 MiB into sqlite",
        json_schema_extra=_env("VMEM_BIG_LINE"),
    )
    batch_bytes: Bytes = Field(
        64 * MIB,
        ge=1,
        description="Bytes a bulk batch holds at most (64MiB, 64MB or a number of bytes)",
        json_schema_extra=_env("VMEM_BATCH_BYTES"),
    )
    index_rows: int = Field(
        10_000,
        ge=0,
        description="Rows from which doctor asks for an index ADK's queries need (a smaller table is read whole)",
        json_schema_extra=_env("VMEM_INDEX_ROWS"),
    )
    fast_paths: bool = Field(
        True,
        description="Use vmem's faster second implementations where they exist",
        json_schema_extra=_env("VMEM_FAST_PATHS"),
    )

    sync_cursor: str = Field(
        "",
        description="ltm sync's cursor file; empty: sync.db in vmem's data directory, beside the replay ledger",
        json_schema_extra=_env("VMEM_SYNC_CURSOR"),
    )
    sync_page: int = Field(
        200,
        ge=1,
        description="Sessions per page ltm sync lists, and events per page it reads of a session",
        json_schema_extra=_env("VMEM_SYNC_PAGE"),
    )
    sync_poll: float = Field(
        1.0,
        gt=0,
        description="Seconds ltm sync --follow waits between polls while agents write",
        json_schema_extra=_env("VMEM_SYNC_POLL"),
    )
    sync_poll_max: float = Field(
        30.0,
        gt=0,
        description="Seconds ltm sync --follow backs off to when idle, or while a store is down",
        json_schema_extra=_env("VMEM_SYNC_POLL_MAX"),
    )
    sync_overlap: float = Field(
        10.0,
        ge=0,
        description="Seconds of updates ltm sync lists again (an agent may commit an older update time late)",
        json_schema_extra=_env("VMEM_SYNC_OVERLAP"),
    )

    @field_validator("big_line_bytes")
    @classmethod
    def _streamable(cls, value: int) -> int:
        """0 (the default per database) or a line of at least 1 KiB: below that every line would stream."""
        if 0 < value < 1024:
            raise PydanticCustomError("too_small", "Input should be 0 or at least 1024 bytes")
        return value


def _duration(value: Any) -> Any:
    """A retention age as people write it (`90d`, `12h`, `2w`); empty means no age rule."""
    if not isinstance(value, str) or not value.strip():
        return value
    if not DURATION.match(value):
        raise PydanticCustomError(
            "duration", "Input should be {expected}", {"expected": "a duration such as 90d, 12h, 30m or 2w"}
        )
    return value.strip()


def _names(value: Any) -> Any:
    """A list of names, or (from the environment) one comma-separated string of them."""
    if isinstance(value, str):
        return [part.strip() for part in value.split(",") if part.strip()]
    return value


Duration = Annotated[str, BeforeValidator(_duration)]
Names = Annotated[list[str], BeforeValidator(_names)]


class RetentionRule(Section):
    """What `session prune` removes from one app; a key left unset is not a rule (or, for an app's
    own rule, takes the default rule's value)."""

    model_config = ConfigDict(extra="forbid", validate_default=True, frozen=True)

    max_age: Duration | None = Field(
        None,
        description="Delete sessions not updated for this long (90d, 12h)",
        json_schema_extra={**_env("VMEM_RETENTION_MAX_AGE"), "example": "90d"},
    )
    keep_last_events: int | None = Field(
        None,
        ge=0,
        description="Inside a session, keep this many newest events (whole invocations, the latest compaction on)",
        json_schema_extra={**_env("VMEM_RETENTION_KEEP_LAST_EVENTS"), "example": 200},
    )
    max_sessions_per_user: int | None = Field(
        None,
        ge=0,
        description="Keep this many newest sessions per user and app; delete the older ones",
        json_schema_extra={**_env("VMEM_RETENTION_MAX_SESSIONS_PER_USER"), "example": 50},
    )
    keep_users: Names = Field(
        default_factory=list,
        description="Users whose sessions are never pruned (env: comma separated)",
        json_schema_extra=_env("VMEM_RETENTION_KEEP_USERS"),
    )


class RetentionSettings(RetentionRule):
    """`[retention]`: the default rule for every app, and `[retention.apps.NAME]` an app's own over it."""

    keep_apps: Names = Field(
        default_factory=list,
        description="Apps never pruned (env: comma separated)",
        json_schema_extra=_env("VMEM_RETENTION_KEEP_APPS"),
    )
    apps: dict[str, RetentionRule] = Field(
        default_factory=dict, description="An app's own rule: [retention.apps.NAME], over the default"
    )

    def rule_for(self, app: str) -> RetentionRule:
        """The rule `app`'s sessions follow: its own keys, the default rule's for those it leaves unset."""
        own = self.apps.get(app)
        base = {k: getattr(self, k) for k in RetentionRule.model_fields}
        if own is not None:
            base.update({k: getattr(own, k) for k in own.model_fields_set})
            base["keep_users"] = list(dict.fromkeys([*self.keep_users, *own.keep_users]))  # both lists hold
        return RetentionRule(**base)


class HistorySettings(Section):
    """`[history]`: the log of every change vmem makes to a store (`vmem history`)."""

    model_config = ConfigDict(extra="forbid", validate_default=True, frozen=True)

    enabled: bool = Field(
        True,
        description="Record every change vmem makes to a store in the history",
        json_schema_extra=_env("VMEM_HISTORY_ENABLED"),
    )
    path: str = Field(
        "",
        description="sqlite file of the history; empty means $XDG_DATA_HOME/vmem/history.db",
        json_schema_extra=_env("VMEM_HISTORY_PATH"),
    )


class VmemSettings(BaseModel):
    """Every setting vmem reads; built by `load_settings`, which merges the sources itself
    (flags, env and `.env`, the TOML file): a plain model, so loading them imports no
    settings framework."""

    model_config = ConfigDict(extra="forbid", validate_default=True)

    short_term_memory: ShortTermMemorySettings = Field(default_factory=ShortTermMemorySettings)
    long_term_memory: LongTermMemorySettings = Field(default_factory=LongTermMemorySettings)
    model: ModelSettings = Field(default_factory=ModelSettings)
    database: DatabaseSettings = Field(default_factory=DatabaseSettings)
    volcengine: VolcengineSettings = Field(default_factory=VolcengineSettings)
    auto_save: AutoSaveSettings = Field(default_factory=AutoSaveSettings)
    policy: PolicySettings = Field(default_factory=PolicySettings)
    tuning: TuningSettings = Field(default_factory=TuningSettings)
    retention: RetentionSettings = Field(default_factory=RetentionSettings)
    history: HistorySettings = Field(default_factory=HistorySettings)


# --- keys and their environment variables -------------------------------------------


@dataclass(frozen=True)
class Key:
    """One leaf setting: dotted TOML path, environment variable, and its field."""

    path: tuple[str, ...]
    env: str
    info: FieldInfo

    @property
    def dotted(self) -> str:
        return ".".join(self.path)

    @property
    def secret(self) -> bool:
        return self.info.annotation is SecretStr


def _walk(model: type[BaseModel], prefix: tuple[str, ...]) -> list[Key]:
    keys: list[Key] = []
    for name, info in model.model_fields.items():
        toml_name = info.alias or name
        path = (*prefix, toml_name)
        annotation = info.annotation
        if path == ("retention", "apps"):  # a table of named rules, shown one row per app
            continue
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            keys.extend(_walk(annotation, path))
            continue
        extra = info.json_schema_extra if isinstance(info.json_schema_extra, dict) else {}
        env = str(extra.get("env") or "_".join(path).upper())
        keys.append(Key(path, env, info))
    return keys


KEYS: list[Key] = _walk(VmemSettings, ())
KEYS_BY_PATH: dict[str, Key] = {k.dotted: k for k in KEYS}
AGENT_API_KEY_ENV = "MODEL_AGENT_API_KEY"


# --- sources --------------------------------------------------------------------------


def _set(tree: dict[str, Any], path: tuple[str, ...], value: Any) -> None:
    for part in path[:-1]:
        tree = tree.setdefault(part, {})
    tree[path[-1]] = value


def _merge(low: dict[str, Any], high: dict[str, Any]) -> dict[str, Any]:
    out = dict(low)
    for key, value in high.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _merge(out[key], value)
        else:
            out[key] = value
    return out


def _flatten(tree: dict[str, Any], prefix: tuple[str, ...] = ()) -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for key, value in tree.items():
        path = (*prefix, key)
        dotted = ".".join(path)
        named_policy = path[0] == "policy" and len(path) == 2
        if isinstance(value, dict) and dotted not in KEYS_BY_PATH and not named_policy:
            flat.update(_flatten(value, path))
        else:
            flat[dotted] = value
    return flat


def _read_dotenv(path: Path) -> dict[str, str]:
    if not path.is_file():
        return {}
    from dotenv import dotenv_values

    return {k: v for k, v in dotenv_values(path).items() if v is not None}


def env_layer(environ: dict[str, str], dotenv: dict[str, str]) -> tuple[dict[str, Any], dict[str, str]]:
    """Settings given by environment variables; the real environment wins over `.env`."""
    data: dict[str, Any] = {}
    labels: dict[str, str] = {}
    for key in KEYS:
        for origin, values in (("env", environ), (".env", dotenv)):
            unset = key.path[0] in ("tuning", "retention", "history") and values.get(key.env) == ""  # `VMEM_X=`: unset
            if key.env in values and not unset:
                _set(data, key.path, values[key.env])
                labels[key.dotted] = f"{origin} {key.env}"
                break
    return data, labels


def _fallback_layer(environ: dict[str, str], dotenv: dict[str, str]) -> tuple[dict[str, Any], dict[str, str]]:
    for origin, values in (("env", environ), (".env", dotenv)):
        if AGENT_API_KEY_ENV in values:
            return (
                {"model": {"embedding": {"api_key": values[AGENT_API_KEY_ENV]}}},
                {"model.embedding.api_key": f"{origin} {AGENT_API_KEY_ENV}"},
            )
    return {}, {}


TOML_DEPTH = 32  # tables and arrays nested deeper than any vmem setting (four levels) by far


def loads_toml(text: str, where: str) -> dict[str, Any]:
    """Parse TOML text, with a one-line error naming `where` (a file), its line and column.

    tomllib parses nested arrays and inline tables by recursion, and settings are walked the
    same way: a document nested thousands deep is refused here, by name, not met later as a
    RecursionError.
    """
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise BadInput(f"{where}: invalid TOML: {exc}") from None
    except RecursionError:
        raise BadInput(f"{where}: invalid TOML: nested too deeply to parse") from None
    deep = _too_deep(data, TOML_DEPTH)
    if deep is not None:
        raise BadInput(f"{where}: {deep}: tables or arrays nested over {TOML_DEPTH} deep")
    return data


def _too_deep(tree: Any, limit: int) -> str | None:
    """The dotted path where `tree` nests deeper than `limit`, else None (walked without recursion)."""
    stack: list[tuple[Any, tuple[str, ...]]] = [(tree, ())]
    while stack:
        value, path = stack.pop()
        if len(path) > limit:
            return ".".join(path[:3]) + "..."
        if isinstance(value, dict):
            stack.extend((v, (*path, str(k))) for k, v in value.items())
        elif isinstance(value, list):
            stack.extend((v, (*path, f"[{i}]")) for i, v in enumerate(value))
    return None


def read_toml(path: Path) -> dict[str, Any]:
    """Parse a TOML config file, with a one-line error naming the file, line and column."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise BadInput(f"{path}: config file not found") from None
    except OSError as exc:
        raise BadInput(f"{path}: cannot read config file: {exc.strerror}") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise BadInput(f"{path}: not UTF-8 text ({exc.reason})") from None
    return loads_toml(text, str(path))


def config_candidates(cwd: Path | None = None, environ: dict[str, str] | None = None) -> list[Path]:
    """Where vmem looks for a config file when --config and $VMEM_CONFIG are not given."""
    env = os.environ if environ is None else environ
    base = Path(env.get("XDG_CONFIG_HOME") or Path.home() / ".config")
    return [(cwd or Path.cwd()) / "vmem.toml", base / "vmem" / "config.toml"]


def find_config_file(explicit: str | Path | None, environ: dict[str, str] | None = None) -> tuple[Path | None, str]:
    """The config file in use and why: --config, $VMEM_CONFIG, ./vmem.toml, XDG, or none."""
    env = os.environ if environ is None else environ
    if explicit:
        path = Path(explicit)
        if not path.is_file():
            raise BadInput(f"{path}: config file not found (given with --config)")
        return path, "--config"
    if env.get("VMEM_CONFIG"):
        path = Path(env["VMEM_CONFIG"])
        if not path.is_file():
            raise BadInput(f"{path}: config file not found (given by $VMEM_CONFIG)")
        return path, "$VMEM_CONFIG"
    for candidate in config_candidates(environ=dict(env)):
        if candidate.is_file():
            return candidate, "default location"
    return None, "none found"


# --- loading --------------------------------------------------------------------------


@dataclass
class LoadedSettings:
    """The effective settings plus where each value came from."""

    settings: VmemSettings
    sources: dict[str, str] = field(default_factory=dict)
    file: Path | None = None

    def source_of(self, dotted: str) -> str:
        return self.sources.get(dotted, "default")


def _expected(error: dict[str, Any]) -> str:
    ctx = error.get("ctx") or {}
    if "expected" in ctx:
        return f"expected {ctx['expected']}"
    return str(error["msg"]).lower().replace("input should be", "expected")


def _suggest(name: str, choices: list[str]) -> str:
    close = difflib.get_close_matches(name, choices, n=1)
    return f" (did you mean '{close[0]}'?)" if close else ""


def _explain(error: dict[str, Any], labels: dict[str, str], file: Path | None) -> str:
    loc = [str(p) for p in error["loc"]]
    dotted = ".".join(loc)
    label = labels.get(dotted, "")
    if label.startswith("env ") or label.startswith(".env "):
        where = f"environment variable {label.split(' ', 1)[1]}"
        if label.startswith(".env "):
            where = f".env: {label.split(' ', 1)[1]}"
    elif label.startswith("flag"):
        where = label
    else:
        where = f"{file}: {dotted}" if file else dotted
    if error["type"] == "extra_forbidden":
        parent = ".".join(loc[:-1])
        siblings = [k.path[-1] for k in KEYS if ".".join(k.path[:-1]) == parent]
        if loc[:2] == ["retention", "apps"] and len(loc) == 4:  # [retention.apps.NAME] takes a rule's keys
            siblings = list(RetentionRule.model_fields)
        if not parent:
            siblings = sorted({k.path[0] for k in KEYS})
        return f"{file or 'config'}: unknown key '{dotted}'{_suggest(loc[-1], siblings)}"
    value = error.get("input")
    shown = "" if KEYS_BY_PATH.get(dotted) and KEYS_BY_PATH[dotted].secret else f", got {value!r}"
    return f"{where}: {_expected(error)}{shown}"


def load_settings(
    config: str | Path | None = None,
    overrides: dict[str, Any] | None = None,
    environ: dict[str, str] | None = None,
    cwd: Path | None = None,
) -> LoadedSettings:
    """Build the effective settings: flag overrides > env (+ .env) > TOML file > defaults.

    `overrides` maps dotted keys (`short_term_memory.db_url`) to flag values.
    """
    env = dict(os.environ if environ is None else environ)
    file, _why = find_config_file(config, env)
    layers: list[tuple[dict[str, Any], dict[str, str]]] = []
    flag_data: dict[str, Any] = {}
    flag_labels: dict[str, str] = {}
    for dotted, value in (overrides or {}).items():
        if value is not None:
            _set(flag_data, tuple(dotted.split(".")), value)
            flag_labels[dotted] = "flag"
    layers.append((flag_data, flag_labels))
    dotenv = _read_dotenv((cwd or Path.cwd()) / ".env")
    layers.append(env_layer(env, dotenv))
    if file is not None:
        toml_data = read_toml(file)
        layers.append((toml_data, {k: f"file {file}" for k in _flatten(toml_data)}))
    layers.append(_fallback_layer(env, dotenv))

    merged: dict[str, Any] = {}
    labels: dict[str, str] = {}
    for data, layer_labels in reversed(layers):
        merged = _merge(merged, data)
        labels.update(layer_labels)
    try:
        settings = VmemSettings(**merged)
    except ValidationError as exc:
        raise BadInput(_explain(dict(exc.errors()[0]), labels, file)) from None
    _remember_secrets(settings)
    if environ is None and cwd is None:  # this process's own settings: what `tuning()` answers
        global _tuning
        _tuning = (_tuning_stamp(), settings.tuning)
    return LoadedSettings(settings, labels, file)


# --- tuning: the one accessor the rest of vmem reads ---------------------------------

TUNING_KEYS = [k for k in KEYS if k.path[0] == "tuning"]
_STAMP_ENV = ("VMEM_CONFIG", "XDG_CONFIG_HOME", *(k.env for k in TUNING_KEYS))
_tuning: tuple[tuple[Any, ...], TuningSettings] | None = None


def _tuning_stamp() -> tuple[Any, ...]:
    """What decides the [tuning] values besides --config: their variables, the config lookup, the directory."""
    try:
        cwd = os.getcwd()
    except OSError:  # the working directory was removed
        cwd = ""
    return (cwd, *(os.environ.get(name) for name in _STAMP_ENV))


def tuning() -> TuningSettings:
    """This process's [tuning] settings (env `VMEM_*` > config file > defaults), read once.

    The settings the CLI loaded (its `--config` file included) are answered as they are; they
    are read again, from the environment and the config file found, once a variable that
    decides them or the working directory changes (tests do both). A bad value raises
    BadInput naming the key and where it was set.
    """
    if _tuning is not None and _tuning[0] == _tuning_stamp():
        return _tuning[1]
    return load_settings().settings.tuning


def data_dir() -> Path:
    """vmem's data directory: $XDG_DATA_HOME/vmem (XDG_DATA_HOME defaults to ~/.local/share), where
    the replay ledger and ltm sync's cursor live."""
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "vmem"


# --- presentation helpers (no Rich here: the CLI renders) ----------------------------


def _remember_secrets(settings: VmemSettings) -> None:
    for key in KEYS:
        value = get_value(settings, key)
        if isinstance(value, SecretStr) and value.get_secret_value():
            raw = value.get_secret_value()
            if key.dotted.endswith("url"):  # a URL's secret is its password, not its host and port
                remember_url_secrets(raw)
            else:
                remember_secret(raw)


def get_value(settings: VmemSettings, key: Key) -> Any:
    """The value of one leaf setting."""
    node: Any = settings
    for part in key.path:
        node = getattr(node, "schema_" if part == "schema" else part)
    return node


def effective_rows(loaded: LoadedSettings) -> list[dict[str, Any]]:
    """One row per setting with its display value (secrets masked) and its source."""
    rows: list[dict[str, Any]] = []
    for key in KEYS:
        value = get_value(loaded.settings, key)
        if isinstance(value, SecretStr):
            raw = value.get_secret_value()
            shown: Any = mask_url(raw) if key.dotted.endswith("url") and raw else ("****" if raw else "")
        elif isinstance(value, str):
            shown = mask_url(value)  # a URL setting may carry a password or token in its user info or query
        else:
            shown = value
        if key.dotted == "tuning.sync_cursor" and not value:  # the file named, not an empty default
            shown = str(data_dir() / "sync.db")
        rows.append({"key": key.dotted, "value": shown, "env": key.env, "source": loaded.source_of(key.dotted)})
    for name, policy in loaded.settings.policy.named().items():
        rows.append({"key": f"policy.{name}", "value": policy, "env": "", "source": loaded.source_of(f"policy.{name}")})
    for app, rule in loaded.settings.retention.apps.items():
        for field_name in sorted(rule.model_fields_set):
            dotted = f"retention.apps.{app}.{field_name}"
            value = getattr(rule, field_name)
            rows.append({"key": dotted, "value": value, "env": "", "source": loaded.source_of(dotted)})
    return rows


def _is_size(key: Key) -> bool:
    return any(getattr(m, "func", None) is _size for m in key.info.metadata)


def starter_toml() -> str:
    """A commented config file naming every key with its default as a comment (uncomment to
    change one), for `config init` and examples.toml: a default stays a default, not pinned."""
    import tomli_w

    lines = [
        "# vmem configuration. Precedence: command-line flag > environment (and ./.env)",
        "# > this file > defaults. Every key can also be set by the environment variable",
        "# named in its comment, the same name VeADK reads.",
    ]
    current: tuple[str, ...] | None = None
    for key in KEYS:
        section = key.path[:-1]
        if section != current:
            lines += ["", f"[{'.'.join(section)}]"]
            current = section
        default = key.info.get_default(call_default_factory=True)
        if isinstance(default, SecretStr):
            default = default.get_secret_value()
        elif _is_size(key) and default and default % MIB == 0:
            default = f"{default // MIB}MiB"  # as a person writes it
        example = default is None  # no rule unless set: an example of one
        if example:
            extra = key.info.json_schema_extra if isinstance(key.info.json_schema_extra, dict) else {}
            default = extra.get("example", "")
        lines.append(f"# {key.info.description} (env {key.env})")
        shown = "# " + tomli_w.dumps({key.path[-1]: default}).strip()  # the default, shown, not pinned
        lines.append(shown + ("  # unset by default; an example" if example else ""))
    lines += [
        "",
        "# An app's own retention rule, over [retention] (the same keys but keep_apps):",
        "# [retention.apps.support_bot]",
        "# keep_last_events = 200",
        "# max_sessions_per_user = 50",
        "",
        "# Named policies, used as --policy NAME or [policy] default = NAME:",
        "# [policy.tools]",
        '# preset = "custom"',
        '# include_roles = ["user", "assistant"]',
        '# include_event_types = ["text", "function_call", "function_response"]',
    ]
    return "\n".join(lines) + "\n"
