"""Settings: the one place that reads the environment (``STEAD_*`` variables).

``Settings`` is built once at the edge (the CLI) and passed down; nothing else in
stead reads ``os.environ`` or keeps configuration in module state.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated, Literal
from urllib.parse import urlsplit

from pydantic import (
    AliasChoices,
    Field,
    SecretStr,
    ValidationError,
    ValidationInfo,
    field_validator,
)
from pydantic_settings import SettingsConfigDict

from stead.blob_settings import BlobSettings
from stead.durations import Seconds
from stead.egress_policy import ExtraCaFile, PinnedHosts
from stead.log_levels import LogLevel, any_case
from stead.setting_paths import SettingPath, expanded_address

Count = Annotated[int, Field(ge=1)]
"""How many of something: at least one."""

PRICE_KEYS = frozenset({"input", "output", "cache_write_5m", "cache_write_1h", "cache_read"})
MAX_PRICE = 1_000_000.0
"""USD per million tokens, at most: costs are kept as 64-bit counts of
nano-dollars, which a price of 1e15 overflowed in a month's total."""
OTLP_HEADER = re.compile(
    r"[\x21\x23-\x27\x2a\x2b\x2d\x2e\x30-\x39\x41-\x5a\x5e-\x7a\x7c\x7e]+[ \t]*=[ \t]*"
    r"[\x20\x21\x23-\x2b\x2d-\x3a\x3c-\x5b\x5d-\x7e]*"
)
"""One ``name=value`` of ``OTEL_EXPORTER_OTLP_HEADERS``, as OpenTelemetry's
exporter reads it (a token, then a value without ``,`` ``;`` ``\\`` or ``"``)."""


def default_data_dir() -> Path:
    return Path.home() / ".local" / "share" / "stead"


def _check_model_url(url: str, prefix: str = "") -> None:
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname or parts.query:
        raise ValueError(f"{prefix}{url!r} is not the http(s) base URL of a model API")


class Settings(BlobSettings):
    """Every knob of a stead installation. Timers are settings so tests can shrink them."""

    model_config = SettingsConfigDict(env_prefix="STEAD_", frozen=True, extra="ignore")

    data_dir: SettingPath = Field(default_factory=default_data_dir)
    database_url: str | None = None
    """SQLAlchemy URL of the store; default is ``sqlite:///<data_dir>/stead.db``."""

    host: str = "127.0.0.1"
    port: int = Field(default=8787, ge=1, le=65535)

    database_wait_seconds: Seconds = 10.0
    """Longest a database call waits for a free connection; past it the request
    answers a retryable 503 instead of queueing on."""

    sqlite_synchronous: Literal["FULL", "NORMAL"] = "FULL"
    """FULL makes every acknowledged commit survive power loss, not only a process crash."""

    sse_heartbeat_seconds: Seconds = 15.0
    keepalive_seconds: Seconds = 30.0
    """Empty frames on a terminal WebSocket when nothing else was sent."""
    sse_subscriber_buffer: Count = 4096
    """Live events a slow SSE reader may fall behind before it re-reads from the store."""

    secret_key: SecretStr | None = None
    """Base64 of the 32-byte key that seals vault credentials at rest; default: a key
    made once in ``<data_dir>/secret.key`` (mode 0600)."""
    secret_key_previous: SecretStr | None = None
    """The key before ``secret_key`` while ``stead secrets rotate-key`` re-seals under it."""

    mcp_timeout_seconds: Seconds = 30.0
    """Longest wait for an MCP server or an OAuth token endpoint, per step."""

    auth_cache_seconds: float = Field(default=60.0, ge=0, allow_inf_nan=False)
    """How long a verified API key is trusted without asking the store again."""

    # The agent loop.
    upstream_base_url: str | None = None
    """Anthropic Messages API base URL (default: https://api.anthropic.com)."""
    anthropic_api_key: str | None = Field(
        default=None, validation_alias=AliasChoices("ANTHROPIC_API_KEY", "STEAD_ANTHROPIC_API_KEY")
    )
    openai_models: dict[str, str] = Field(default_factory=dict)
    """Model name -> base URL of an OpenAI-compatible server (JSON in STEAD_OPENAI_MODELS)."""
    openai_api_key: str | None = None
    model_prices: dict[str, dict[str, float]] = Field(default_factory=dict)
    """Model name -> USD per million tokens (JSON in STEAD_MODEL_PRICES):
    ``input``, ``output`` and optionally ``cache_write_5m``, ``cache_write_1h``,
    ``cache_read``; over the shipped list prices (``stead.prices``)."""
    model_read_timeout_seconds: Seconds = 60.0
    model_total_timeout_seconds: Seconds = 600.0
    max_output_tokens: Count = 8192
    # Compaction (``stead.harness.compaction``).
    context_windows: dict[str, int] = Field(default_factory=dict)
    """Model name -> context window in tokens (JSON in STEAD_CONTEXT_WINDOWS), over
    the shipped defaults: 200,000 for Claude models, 128,000 for a model an
    OpenAI-compatible server answers."""
    compaction_threshold: float = Field(default=0.8, gt=0, le=1)
    """A request larger than this share of its model's window is compacted first."""
    compaction_keep_ratio: float = Field(default=0.25, gt=0, lt=1)
    """Share of the window the most recent part, kept word for word, may take."""
    max_consecutive_compactions: int = Field(default=3, ge=1)
    """Compactions in a row, with no model answer between, before the turn ends
    with ``compaction_limit_reached_error``."""
    upstream_retries: int = Field(default=4, ge=0)
    """Retries of a retryable upstream error before the turn ends with retries_exhausted."""
    retry_initial_seconds: Seconds = 1.0
    retry_max_seconds: Seconds = 30.0
    lease_seconds: Seconds = 30.0
    """A run's lease; renewed every third of it while the run makes progress."""
    reaper_interval_seconds: Seconds = 5.0
    bus_poll_seconds: Seconds = 5.0
    """With several processes on PostgreSQL: how often a stream reader reads the
    store in case a notice from another process was lost."""
    brain_heartbeat_seconds: Seconds = 5.0
    """With several processes on PostgreSQL: how often each writes its heartbeat."""
    brain_stale_seconds: Seconds = 20.0
    """A process silent this long is taken for dead: its runs are re-queued
    without waiting for their leases."""
    max_run_attempts: Count = 5
    sandbox: Literal["bwrap", "unsafe_local", "off"] = "bwrap"
    """Sandbox backend for tools: ``bwrap`` (isolated, in the sandbox host),
    ``unsafe_local`` (no isolation; only when named), ``off`` (no built-in tools)."""
    sandbox_host: str | None = None
    """Address of the sandbox host: a Unix socket path (default
    ``<data_dir>/sandbox-host/host.sock``) or ``tcp://host:port`` with a token."""
    sandbox_host_token: str | None = None
    sandbox_host_autostart: bool = True
    """Start a local sandbox host (detached) when none answers at the address."""
    sandbox_host_state_dir: SettingPath | None = None
    """The sandbox host's own directory; default ``<data_dir>/sandbox-host``."""
    sandbox_memory_mb: int = Field(default=2048, ge=16)
    sandbox_pids: int = Field(default=512, ge=8)
    sandbox_cpus: float = Field(default=1.0, gt=0, allow_inf_nan=False)
    sandbox_sleep_after_seconds: Seconds = 300.0
    """Default idle time before a sandbox snapshots its workspace and stops."""
    sandbox_lease_seconds: Seconds = 24 * 3600.0
    """A sandbox lease's TTL, renewed by every tool call."""
    sandbox_sweep_interval_seconds: Seconds = 60.0
    work_lease_seconds: Seconds = 60.0
    """A self-hosted worker's lease on a work item when it asks for no other TTL."""
    work_max_lease_seconds: Seconds = 3600.0
    work_answer_timeout_seconds: Seconds = 3600.0
    """How long a turn waits for a worker to answer a tool call before it
    answers it itself, as in doubt."""
    # The sandbox host reads its own settings (stead.sandbox_host.settings)
    # from the same STEAD_* variables: a host started by `stead serve`
    # inherits this process's environment.

    repository_clone_timeout_seconds: Seconds = 600.0
    """Longest one clone of a ``github_repository`` resource into a sandbox may take."""

    # The web tools (web_fetch, web_search) run in the brain, not the sandbox.
    web_search_url: str | None = None
    """Base URL of the SearXNG instance web_search asks (``GET <url>/search?q=..
    &format=json``); unset, web_search answers the model that it is not configured."""
    web_timeout_seconds: Seconds = 30.0
    """Longest one web_fetch (redirects included) or web_search may take."""
    web_fetch_max_bytes: int = Field(default=10 * 1024 * 1024, gt=0)
    """Largest body web_fetch reads: longer text is cut there, a longer PDF refused."""
    egress_hosts: PinnedHosts = Field(default_factory=dict)
    """Host name -> IP address (JSON), as for the sandbox host: web tools resolve
    these names to these addresses, which pass the blocklist."""
    egress_extra_ca_file: ExtraCaFile = None
    """PEM bundle of CAs web tools trust for origins besides the system's."""

    failpoints: str | None = None
    """Test-only crash injection, see ``stead.failpoints``."""

    max_request_bytes: Count = 32 * 1024 * 1024

    # The Files API: bytes in the blob store (BlobSettings), metadata in the store.
    max_file_bytes: int = Field(default=500 * 1024 * 1024, gt=0)
    """Largest file ``POST /v1/files`` accepts (the hosted API's limit is 500 MB)."""
    file_purge_interval_seconds: Seconds = 300.0
    """How often deleted files' blobs (and abandoned uploads) are removed."""
    file_upload_grace_seconds: Seconds = 6 * 3600.0
    """An upload not finished after this long is abandoned and collected."""
    max_mounted_file_bytes: int = Field(default=500 * 1024 * 1024, gt=0)
    """Largest file put in a session's sandbox (``/mnt/session/uploads``) or
    captured from it (``/mnt/session/outputs``); its bytes cross to the sandbox
    host in parts of 8 MiB."""
    files_quota_bytes: int = Field(default=10 * 1024**3, ge=0)
    """Bytes the files of one workspace may hold together (uploads and captured
    outputs; 0: no quota), unless its ``file_storage_bytes`` limit says otherwise."""
    # Skills: each version's files, zipped, in the blob store (through the Files API's keeper).
    skill_max_bytes: int = Field(default=30 * 1024 * 1024, gt=0)
    """Largest skill version: its files together, uncompressed, and its upload."""
    skill_max_file_bytes: int = Field(default=10 * 1024 * 1024, gt=0)
    """Largest single file of a skill, uncompressed."""
    skill_max_files: int = Field(default=1000, gt=0)
    """Most files one skill version may hold."""
    idempotency_ttl_seconds: Seconds = 24 * 3600.0
    """How long an ``Idempotency-Key`` answers with the first request's answer."""
    idempotency_wait_seconds: float = Field(default=10.0, ge=0, allow_inf_nan=False)
    """How long a request waits for another that holds its key to answer,
    before it gets a retryable 409."""
    idempotency_abandoned_seconds: Seconds = 600.0
    """A key held this long without an answer is taken over (its server died):
    the request runs again."""
    idempotency_max_answer_bytes: int = Field(default=1024 * 1024, gt=0)
    """Largest answer kept for replay; a larger one is answered once and its key
    then refuses replays with a 409."""
    # webhooks (``runtime.WebhookCourier``)
    webhook_poll_seconds: Seconds = 1.0
    """How often the outbox is read for deliveries that are due."""
    webhook_timeout_seconds: Seconds = 10.0
    """One delivery's whole HTTP exchange (connect, send, answer)."""
    webhook_retry_base_seconds: Seconds = 5.0
    """The wait after a delivery's first failed attempt; doubled after each one."""
    webhook_retry_max_seconds: Seconds = 3600.0
    """The longest wait between two attempts."""
    webhook_retry_for_seconds: Seconds = 24 * 3600.0
    """A delivery still failing this long after its event is given up (``failed``)."""
    webhook_keep_seconds: Seconds = 7 * 24 * 3600.0
    """Finished deliveries and their attempts are kept this long for the admin route."""
    max_events_per_request: Count = 1000
    log_level: LogLevel = "info"
    log_format: Literal["auto", "json", "text"] = "auto"
    """``auto``: JSON lines when stderr is not a terminal, readable text when it is."""
    metrics: Literal["off", "open", "key"] = "key"
    """Who may read ``/metrics``: ``key`` (any valid API key; the counts are the
    installation's, across workspaces), ``open`` (anyone who reaches the port,
    for a scraper on a private network), ``off`` (not served)."""
    otlp_endpoint: str | None = Field(
        default=None,
        validation_alias=AliasChoices(
            "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT"
        ),
    )
    """Set (by the standard OpenTelemetry variables): spans are exported there
    over OTLP/HTTP; the exporter reads its other ``OTEL_EXPORTER_OTLP_*``
    variables (headers, timeout) itself. Unset: no spans are recorded."""
    otlp_headers: str | None = Field(
        default=None, repr=False, validation_alias="OTEL_EXPORTER_OTLP_HEADERS"
    )
    """The headers the exporter sends (it reads them itself, these or the next):
    checked here only, since the exporter drops a header it cannot read and
    logs it, credential and all. Never shown."""
    otlp_traces_headers: str | None = Field(
        default=None, repr=False, validation_alias="OTEL_EXPORTER_OTLP_TRACES_HEADERS"
    )

    @field_validator("otlp_endpoint", mode="before")
    @classmethod
    def _empty_is_unset(cls, value: object) -> object:
        """OpenTelemetry reads an empty variable as unset: no spans are recorded."""
        if isinstance(value, str) and not value.strip():
            return None
        return value

    @field_validator("otlp_headers", "otlp_traces_headers")
    @classmethod
    def _otlp_headers(cls, value: str | None) -> str | None:
        if value is not None and not all(
            OTLP_HEADER.fullmatch(part)
            for part in re.split(r"[ \t]*,[ \t]*", value.strip())
            if part
        ):
            raise ValueError(
                "not a comma-separated list of name=value headers (URL-encode a value's "
                "commas, semicolons and quotes); its value is not shown, it may hold a credential"
            )
        return value

    @field_validator("data_dir", mode="before")
    @classmethod
    def _named_dir(cls, value: object) -> object:
        if isinstance(value, str) and not value.strip():
            raise ValueError("empty: name a directory")
        return value

    _any_case = field_validator("log_level", mode="before")(any_case)

    _home_address = field_validator("sandbox_host", mode="before")(expanded_address)

    @field_validator("sandbox_host")
    @classmethod
    def _sandbox_host(cls, address: str | None) -> str | None:
        """A bad address stops start-up, not the first tool call."""
        from stead.sandbox.address import parse_address
        from stead.sandbox.errors import InvalidArgument

        if address is not None:
            try:
                parse_address(address, token="checked apart")  # the token: below
            except InvalidArgument as exc:
                raise ValueError(str(exc)) from None
        return address

    @field_validator("sandbox_host_token")
    @classmethod
    def _sandbox_host_token(cls, token: str | None, info: ValidationInfo) -> str | None:
        from stead.sandbox.address import check_token

        check_token(token)
        address = info.data.get("sandbox_host")
        if not token and address is not None and address.startswith("tcp://"):
            raise ValueError("STEAD_SANDBOX_HOST is a tcp:// address: set the host's token")
        return token

    @field_validator("web_search_url")
    @classmethod
    def _search_url(cls, url: str | None) -> str | None:
        if url is not None:
            parts = urlsplit(url)
            if parts.scheme not in ("http", "https") or not parts.hostname or parts.query:
                raise ValueError(f"{url!r} is not the http(s) base URL of a SearXNG instance")
        return url

    @field_validator("upstream_base_url")
    @classmethod
    def _upstream_url(cls, url: str | None) -> str | None:
        if url is not None:
            _check_model_url(url)
        return url

    @field_validator("openai_models")
    @classmethod
    def _openai_urls(cls, models: dict[str, str]) -> dict[str, str]:
        for model, url in models.items():
            _check_model_url(url, f"{model}: ")
        return models

    @field_validator("context_windows")
    @classmethod
    def _windows(cls, windows: dict[str, int]) -> dict[str, int]:
        for model, tokens in windows.items():
            if tokens < 1:
                raise ValueError(f"{model}: a context window is a positive number of tokens")
        return windows

    @field_validator("compaction_keep_ratio")
    @classmethod
    def _keep_ratio(cls, ratio: float, info: ValidationInfo) -> float:
        threshold = info.data.get("compaction_threshold")
        if threshold is not None and ratio >= threshold:
            raise ValueError("must be below STEAD_COMPACTION_THRESHOLD")
        return ratio

    @field_validator("model_prices")
    @classmethod
    def _prices(cls, prices: dict[str, dict[str, float]]) -> dict[str, dict[str, float]]:
        for model, price in prices.items():
            unknown = set(price) - PRICE_KEYS
            if unknown or not {"input", "output"} <= set(price):
                raise ValueError(
                    f"{model}: give input and output (and optionally cache_write_5m, "
                    "cache_write_1h, cache_read) in USD per million tokens"
                )
            if any(not 0 <= value <= MAX_PRICE for value in price.values()):
                raise ValueError(
                    f"{model}: a price must be a number from 0 to {MAX_PRICE:,.0f} "
                    "(USD per million tokens)"
                )
        return prices

    @property
    def resolved_sandbox_host_state_dir(self) -> Path:
        return self.sandbox_host_state_dir or self.data_dir / "sandbox-host"

    @property
    def embedded_database(self) -> Path:
        """The SQLite file of the data directory (the store unless ``database_url``)."""
        return self.data_dir / "stead.db"

    @property
    def resolved_database_url(self) -> str:
        if self.database_url:
            return self.database_url
        return f"sqlite:///{self.embedded_database}"

    @property
    def sqlite_file(self) -> Path | None:
        """The SQLite file the store is in; None for PostgreSQL."""
        url = self.resolved_database_url
        if not url.startswith("sqlite"):
            return None
        path = url.split(":///", 1)[-1].split("?", 1)[0] if ":///" in url else ""
        return Path(path) if path and path != ":memory:" else None


def settings_errors(error: ValidationError) -> list[str]:
    """One line per bad setting, named as the operator sets it (``STEAD_*``)."""
    lines = []
    for found in error.errors():
        name = str(found["loc"][0]) if found["loc"] else "settings"
        variable = name if name.isupper() else f"STEAD_{name.upper()}"
        lines.append(f"{variable}: {found['msg'].removeprefix('Value error, ')}")
    return lines


def unparsed_setting(error: Exception) -> str:
    """The line for a setting pydantic-settings could not even parse (a JSON
    value that is not JSON), which it reports without the variable's name."""
    found = re.search(r'field "(\w+)"', str(error))
    if found is None:
        return f"settings: {error}"
    return f"STEAD_{found.group(1).upper()}: not valid JSON"
