"""An environment turned into a sandbox's config, and its networking for the
brain's own egress checks."""

from __future__ import annotations

from stead.config import Settings
from stead.jsonvalues import Json
from stead.sandbox import SandboxConfig
from stead.store import EnvironmentStore, NotFound, SessionRecord


def sandbox_config(settings: Settings, environment_config: Json) -> SandboxConfig:
    """The sandbox's config: ``networking`` and ``packages`` from its
    environment, as the API defines them; limits and ``sleep_after`` from the
    server's settings (the API's environment config has no fields for them)."""
    packages = environment_config.get("packages") or {}
    return SandboxConfig.from_json(
        {
            "memory_bytes": settings.sandbox_memory_mb * 1024**2,
            "pids": settings.sandbox_pids,
            "cpus": settings.sandbox_cpus,
            "sleep_after": settings.sandbox_sleep_after_seconds,
            "networking": environment_config.get("networking") or {"type": "unrestricted"},
            "packages": {k: v for k, v in packages.items() if k != "type" and v},
        }
    )


async def session_networking(store: EnvironmentStore, session: SessionRecord) -> Json | None:
    """The ``networking`` of the session's environment; None when it has none
    (a self-hosted environment's config) or the environment is gone."""
    try:
        environment = await store.get_environment(session.workspace_id, session.environment_id)
    except NotFound:
        return None
    networking = environment.config.get("networking")
    return networking if isinstance(networking, dict) else None
