"""An environment turned into a sandbox's config, and its networking for the
brain's own egress checks."""

from __future__ import annotations

from collections.abc import Sequence
from urllib.parse import urlsplit

from stead.config import Settings
from stead.egress_policy import InvalidPolicy, host_entry
from stead.jsonvalues import Json
from stead.sandbox import SandboxConfig
from stead.store import EnvironmentStore, NotFound, SessionRecord


def sandbox_config(
    settings: Settings, environment_config: Json, mcp_servers: Sequence[Json] = ()
) -> SandboxConfig:
    """The sandbox's config: ``networking`` and ``packages`` from its
    environment, as the API defines them; the hosts of the agent's
    ``mcp_servers`` (which ``allow_mcp_servers`` opens); limits and
    ``sleep_after`` from the server's settings (the API's environment config
    has no fields for them)."""
    packages = environment_config.get("packages") or {}
    return SandboxConfig.from_json(
        {
            "memory_bytes": settings.sandbox_memory_mb * 1024**2,
            "pids": settings.sandbox_pids,
            "cpus": settings.sandbox_cpus,
            "sleep_after": settings.sandbox_sleep_after_seconds,
            "networking": environment_config.get("networking") or {"type": "unrestricted"},
            "packages": {k: v for k, v in packages.items() if k != "type" and v},
            "mcp_server_hosts": mcp_server_hosts(mcp_servers),
        }
    )


def mcp_server_hosts(mcp_servers: Sequence[Json]) -> list[str]:
    """The hosts of ``mcp_servers`` (an agent's), normalised, sorted, once each.
    One the egress rules cannot take is left out: the brain's MCP client refuses
    that server too (``mcp_auth.McpEgress``), so the sandbox must not reach it."""
    hosts: set[str] = set()
    for server in mcp_servers:
        url = server.get("url")
        try:
            host = urlsplit(url).hostname if isinstance(url, str) else None
            hosts.add(host_entry(host, "mcp_servers"))
        except (ValueError, InvalidPolicy):
            continue
    return sorted(hosts)


async def session_networking(store: EnvironmentStore, session: SessionRecord) -> Json | None:
    """The ``networking`` of the session's environment; None when it has none
    (a self-hosted environment's config) or the environment is gone."""
    try:
        environment = await store.get_environment(session.workspace_id, session.environment_id)
    except NotFound:
        return None
    networking = environment.config.get("networking")
    return networking if isinstance(networking, dict) else None
