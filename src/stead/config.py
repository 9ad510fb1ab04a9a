"""Settings: the one place that reads the environment (``STEAD_*`` variables).

``Settings`` is built once at the edge (the CLI) and passed down; nothing else in
stead reads ``os.environ`` or keeps configuration in module state.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict


def default_data_dir() -> Path:
    return Path.home() / ".local" / "share" / "stead"


class Settings(BaseSettings):
    """Every knob of a stead installation. Timers are settings so tests can shrink them."""

    model_config = SettingsConfigDict(env_prefix="STEAD_", frozen=True, extra="ignore")

    data_dir: Path = Field(default_factory=default_data_dir)
    database_url: str | None = None
    """SQLAlchemy URL of the store; default is ``sqlite:///<data_dir>/stead.db``."""

    host: str = "127.0.0.1"
    port: int = 8787

    sqlite_synchronous: Literal["FULL", "NORMAL"] = "FULL"
    """FULL makes every acknowledged commit survive power loss, not only a process crash."""

    sse_heartbeat_seconds: float = 15.0
    sse_subscriber_buffer: int = 4096
    """Live events a slow SSE reader may fall behind before it re-reads from the store."""

    auth_cache_seconds: float = 60.0
    """How long a verified API key is trusted without asking the store again."""

    max_request_bytes: int = 32 * 1024 * 1024
    max_events_per_request: int = 1000
    log_level: str = "info"

    @property
    def resolved_database_url(self) -> str:
        if self.database_url:
            return self.database_url
        return f"sqlite:///{self.data_dir / 'stead.db'}"
