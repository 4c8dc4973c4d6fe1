"""Configuration from ``HOOKGATE_*`` environment variables (ARCHITECTURE §11); nothing else reads the environment."""

from __future__ import annotations

import base64
import ipaddress
import os
from pathlib import Path
from typing import Annotated, Literal

from pydantic import Field, SecretStr, ValidationInfo, field_validator, model_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from hookgate import retry
from hookgate.errors import HookgateError

#: Most gateway processes one ``gateway``/``serve`` may run (a typo must not start thousands of pools).
MAX_GATEWAY_WORKERS = 256

#: Longest runtime claim long-poll a runtime may ask (``wait_s``) or an operator may allow: an hour, far past
#: what proxies keep an idle request open for; the runtime API refuses a longer ``wait_s`` (422).
CLAIM_WAIT_CEILING_S = 3600.0


class ConfigError(HookgateError, ValueError):
    """Configuration that cannot work; the CLI prints its message as one line and exits."""


def decode_secret_key(value: str) -> bytes:
    """Decode a 32-byte key given as standard or URL-safe base64 (padding optional)."""
    text = value.strip()
    padded = text + "=" * (-len(text) % 4)
    for decode in (base64.b64decode, base64.urlsafe_b64decode):
        try:
            raw = decode(padded.encode("ascii"), validate=True) if decode is base64.b64decode else decode(padded)
        except ValueError:  # binascii.Error and UnicodeEncodeError are ValueErrors
            continue
        if len(raw) == 32:
            return raw
    raise ConfigError("HOOKGATE_SECRET_KEY must be base64 (standard or URL-safe) of exactly 32 bytes")


class Settings(BaseSettings):
    """Every knob of every role, with named defaults. Field ``foo`` is read from ``HOOKGATE_FOO``."""

    model_config = SettingsConfigDict(env_prefix="HOOKGATE_", extra="ignore", frozen=True)

    database_url: SecretStr | None = Field(
        default=None, description="PostgreSQL URL; unset = embedded PostgreSQL in the data dir"
    )
    direct_database_url: SecretStr | None = Field(
        default=None, description="PostgreSQL URL of what needs a real session: LISTEN, the scheduler's liveness "
        "lock, migrations (unset = HOOKGATE_DATABASE_URL); straight to PostgreSQL when that URL is a pooler's"
    )
    pooler: Literal["detect", "none", "transaction"] = Field(
        default="detect", description="What HOOKGATE_DATABASE_URL reaches: a transaction-mode pooler such as "
        "PgBouncer (no prepared statement cache, no session state on pooled connections), none (PostgreSQL, or a "
        "session-mode pool), or detect (a pooler answers for PostgreSQL: its backend key is not the backend's)"
    )
    data_dir: Path = Field(default=Path(".hookgate"), description="Embedded database and generated key")
    secret_key: SecretStr | None = Field(
        default=None, description="base64 of 32 bytes protecting secrets at rest (generated in embedded mode)"
    )
    secret_key_previous: SecretStr | None = Field(
        default=None, description="The previous secret key, still accepted for decryption during a key rotation"
    )
    public_url: str = Field(
        default="", description="Base of the URLs shown to admins (default http://<host>:<port>)"
    )
    host: str = Field(default="127.0.0.1", description="Address the HTTP server binds")
    port: int = Field(default=8080, ge=0, le=65535, description="Port the HTTP server binds")

    pool_min_size: int = Field(default=2, ge=0, description="Connections kept open per process")
    pool_max_size: int = Field(default=20, ge=1, description="Upper bound of connections per process")
    pool_acquire_timeout: float = Field(
        default=2.0, gt=0, description="Seconds ingress waits for a connection before answering 503"
    )
    shutdown_deadline: float = Field(default=20.0, gt=0, description="Seconds a role gets to drain on SIGTERM")
    metrics_port: int | None = Field(
        default=None, ge=0, le=65535,
        description="Port serving /metrics in worker and scheduler processes (a gateway serves it on its own port)",
    )
    log_level: str = Field(default="info", description="debug, info, warning or error")
    event_loop: Literal["auto", "uvloop", "asyncio"] = Field(
        default="auto", description="Event loop of the server roles: uvloop (faster ingress and push; auto: when "
        "installed, as it is by default) or the standard library's asyncio"
    )
    http_read_timeout_s: float = Field(
        default=30.0, gt=0, description="Longest time a client may take to send a whole request (headers and body)"
    )
    max_connections: int = Field(
        default=1024, ge=1, description="Open HTTP connections per server process; past it new ones are closed at once"
    )
    max_connections_per_ip: int = Field(
        default=0, ge=0, description="Open HTTP connections per client address per server process (0 = an eighth "
        "of HOOKGATE_MAX_CONNECTIONS, at least 1); connections from HOOKGATE_TRUSTED_PROXIES count only against the cap"
    )
    gateway_workers: int = Field(
        default=1, ge=1, le=MAX_GATEWAY_WORKERS, description="Gateway processes of `gateway` and `serve` sharing one "
        "listening port (1 = the gateway runs in the command's own process)"
    )
    api_max_body_bytes: int = Field(
        default=1024 * 1024, ge=1024,
        description="Largest request body of the runtime and admin APIs, in bytes (larger: 413 payload_too_large)",
    )

    trusted_proxies: Annotated[list[str], NoDecode] = Field(
        default_factory=list, description="Comma-separated CIDRs whose X-Forwarded-For / X-Real-IP are trusted"
    )
    agent_allow_cidrs: Annotated[list[str] | None, NoDecode] = Field(
        default=None, description="Comma-separated CIDRs agents may be pushed to although they are loopback, private "
        "or link-local (default none; `serve` on its embedded database: 127.0.0.0/8,::1/128)"
    )
    ip_request_cap: int = Field(default=600, ge=1, description="Requests per IP per rate window (all requests)")
    ip_bad_credential_cap: int = Field(
        default=30, ge=1, description="Refused credentials per IP per rate window at every door (webhook tokens and "
        "signatures, admin keys, runtime and lease tokens, dashboard logins); past it 429"
    )
    rate_window_s: float = Field(default=60.0, gt=0, description="Length of the per-IP rate windows")
    rate_table_size: int = Field(default=100_000, ge=100, description="Most IPs tracked per gate (memory bound)")
    ingest_batch_max: int = Field(
        default=64, ge=1, le=1000, description="Most concurrent webhook deliveries written in one ingress statement"
    )
    ingest_inflight: int = Field(
        default=4, ge=1, le=64, description="Ingress write statements in flight at once per gateway process"
    )
    workspace_max_queued: int = Field(
        default=0, ge=0, description="Waiting runs (pending, issue_created, queued) of one workspace at which "
        "ingress answers its webhooks 429 + Retry-After (0 = no limit)"
    )

    @field_validator("trusted_proxies", "agent_allow_cidrs", mode="before")
    @classmethod
    def _split_cidrs(cls, value: object) -> object:
        if isinstance(value, str):
            value = [part.strip() for part in value.split(",") if part.strip()]
        if isinstance(value, list):
            for cidr in value:
                try:
                    ipaddress.ip_network(str(cidr), strict=False)
                except ValueError as exc:
                    raise ValueError(f"not a CIDR: {cidr!r}") from exc
        return value

    @model_validator(mode="after")
    def _default_public_url(self) -> Settings:
        if not self.public_url:
            host = "localhost" if self.host in ("0.0.0.0", "::", "") else self.host
            object.__setattr__(self, "public_url", f"http://{host}:{self.port}")
        return self

    @model_validator(mode="after")
    def _default_connections_per_ip(self) -> Settings:
        if not self.max_connections_per_ip:
            # One address may hold an eighth: eight busy hosts to fill a process (idle connections make room).
            object.__setattr__(self, "max_connections_per_ip", max(1, self.max_connections // 8))
        return self

    @field_validator("direct_database_url")
    @classmethod
    def _direct_needs_a_url(cls, value: SecretStr | None, info: ValidationInfo) -> SecretStr | None:
        if value is not None and info.data.get("database_url") is None:
            raise ValueError("set without HOOKGATE_DATABASE_URL (the embedded PostgreSQL needs neither)")
        return value

    @field_validator("database_url", "direct_database_url")
    @classmethod
    def _check_url(cls, value: SecretStr | None) -> SecretStr | None:
        if value is not None:
            raw = value.get_secret_value()
            if not raw.startswith(("postgres://", "postgresql://")):
                raise ValueError("must start with postgresql:// (or postgres://)")
        return value

    @field_validator("log_level")
    @classmethod
    def _check_level(cls, value: str) -> str:
        level = value.lower()
        if level not in {"debug", "info", "warning", "error"}:
            raise ValueError("must be debug, info, warning or error")
        return level

    @property
    def embedded(self) -> bool:
        """True when no database URL is configured and the embedded PostgreSQL is used."""
        return self.database_url is None

    def secret_keys(self) -> list[bytes]:
        """The current key first, then the previous one (decryption only); empty if none is set."""
        return [decode_secret_key(k.get_secret_value()) for k in (self.secret_key, self.secret_key_previous) if k]

    # --- scheduler ---
    scheduler_max_tick_s: float = Field(
        default=30.0, gt=0, description="Longest sleep between scheduler ticks (it wakes earlier when work is due)"
    )
    scheduler_concurrency: int = Field(default=4, ge=1, description="Handler batches a scheduler runs at once")
    scheduler_claim_batch: int = Field(default=500, ge=1, description="Most plans claimed per statement")
    scheduler_clock_offset_s: float = Field(
        default=0.0, description="TEST ONLY: seconds the scheduler adds to the database clock; never in production"
    )
    retention_age_days: float = Field(
        default=30.0, gt=0, description="Age after which finished deliveries lose their raw body, finished "
        "executions are deleted and week partitions of task attempts are dropped"
    )
    retention_batch_size: int = Field(default=1000, ge=1, description="Rows per retention statement")
    delivery_retention_days: float = Field(
        default=0.0, ge=0, description="Age after which whole day partitions of deliveries are dropped (rows and "
        "their dedupe keys; a partition with a queued delivery waits); 0 keeps deliveries forever"
    )
    audit_retention_days: float = Field(
        default=0.0, ge=0, description="Age after which whole month partitions of the audit log are dropped; 0 keeps "
        "it forever"
    )
    deadline_sweep_s: float = Field(
        default=5.0, gt=0, description="How often the scheduler ends runs past their autopilot's run_timeout_s "
        "(so a run overruns by at most about this much)"
    )

    # --- dispatch ---
    delivery_concurrency: int = Field(default=4, ge=1, le=256, description="Concurrent delivery dispatchers per worker")
    delivery_batch: int = Field(default=16, ge=1, le=1000, description="Deliveries leased per claim (batched claims)")
    delivery_lease_s: float = Field(default=120.0, gt=0, description="Lease on a claimed delivery, in seconds")
    delivery_max_attempts: int = Field(default=5, ge=1, description="Dispatch attempts before a delivery fails")
    delivery_backoff_base_s: float = Field(default=1.0, gt=0, description="First dispatch retry delay (doubles)")
    delivery_backoff_cap_s: float = Field(default=300.0, gt=0, description="Longest dispatch retry delay")
    worker_poll_s: float = Field(
        default=1.0, gt=0, description="Recovery poll of every worker queue (LISTEN/NOTIFY is only a hint)"
    )
    run_repair_after_s: float = Field(
        default=60.0, gt=0, description="A run left pending/half-made this long is dispatched by the repair loop"
    )
    task_lease_s: float = Field(
        default=7200.0, gt=0, description="Lease of a claimed pull task or an accepted (202) push; renewable"
    )
    push_retry_schedule: str = Field(
        default=retry.DEFAULT, description="Delays between attempts of a task (push or pull), comma-separated "
        "(s, m, h, d); n delays give n + 1 attempts; ±10 % jitter; an agent may have its own (retry_schedule)"
    )
    agent_trip_after: int = Field(
        default=5, ge=1, description="Consecutive failed pushes (across its tasks) after which an HTTP agent is "
        "unhealthy: its tasks wait without spending attempts while one probe push goes out per probe interval"
    )
    agent_probe_min_s: float = Field(default=5.0, gt=0, description="First probe interval of an unhealthy agent")
    agent_probe_max_s: float = Field(
        default=300.0, gt=0, description="Longest probe interval of an unhealthy agent (it doubles up to this)"
    )
    push_lease_margin_s: float = Field(
        default=30.0, gt=0, description="Push lease = agent timeout + this margin (a crashed pusher's task recovers)"
    )
    push_timeout_cap_s: float = Field(default=60.0, gt=0, description="Upper bound of any agent's push timeout")
    push_inflight: int = Field(default=256, ge=1, description="Pushes in flight per worker process (all agents)")
    push_connections: int = Field(
        default=256, ge=1, description="HTTP connection pool size of the push client (pushes in flight beyond it are "
        "not started: a push waiting for a connection would wait behind other agents' pushes)"
    )
    agent_max_concurrency: int = Field(
        default=64, ge=1, le=10000, description="Highest max_concurrency an agent may have (the API refuses more; an "
        "existing agent above it is held to it when its tasks are claimed)"
    )
    heartbeat_timeout_s: float = Field(
        default=120.0, gt=0, description="A pull runtime instance silent this long is offline"
    )
    watchdog_interval_s: float = Field(
        default=60.0, gt=0, description="Lease watchdog period of the worker's own loop (until the scheduler runs it)"
    )
    runtime_claim_max_wait_s: float = Field(default=30.0, ge=0, le=CLAIM_WAIT_CEILING_S,
                                            description="Longest runtime claim long-poll (at most 3600)")
    runtime_claim_poll_s: float = Field(
        default=1.0, gt=0, description="Fallback re-check of waiting runtime claims (NOTIFY wakes them at once; "
        "this finds retries that came due by time and covers a lost notification)"
    )


    @field_validator("push_retry_schedule")
    @classmethod
    def _schedule(cls, value: str) -> str:
        retry.Schedule.parse(value)  # ScheduleError (a ValueError) says which step is wrong
        return value

    @property
    def retry_schedule(self) -> retry.Schedule:
        """The default retry schedule of tasks (``push_retry_schedule``)."""
        return retry.Schedule.parse(self.push_retry_schedule)


#: Settings that are gone, with what replaced them: set, they stop the process with this message.
REMOVED = {
    "HOOKGATE_TASK_MAX_ATTEMPTS": "HOOKGATE_PUSH_RETRY_SCHEDULE (attempts = its delays + 1)",
    "HOOKGATE_TASK_BACKOFF_BASE_S": "HOOKGATE_PUSH_RETRY_SCHEDULE (its first delay)",
    "HOOKGATE_TASK_BACKOFF_CAP_S": "HOOKGATE_PUSH_RETRY_SCHEDULE (its delays; Retry-After is honoured up to 24 h)",
}


def load_settings(**overrides: object) -> Settings:
    """Read settings from the environment, turning validation errors into one readable ConfigError."""
    from pydantic import ValidationError

    for name, instead in REMOVED.items():
        if name in os.environ:
            raise ConfigError(f"{name} is no longer read: use {instead}")
    try:
        return Settings(**overrides)  # type: ignore[arg-type]
    except ValidationError as exc:
        first = exc.errors()[0]
        field = ".".join(str(p) for p in first["loc"])
        raise ConfigError(f"HOOKGATE_{field.upper()}: {first['msg']}") from None
