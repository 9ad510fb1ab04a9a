"""What a sandbox's egress proxy enforces: its environment's ``networking``, the
agent's MCP server hosts it may open, and the package mirrors of the host's
settings when the sandbox may use package managers."""

from __future__ import annotations

from stead.egress_policy import EgressPolicy, InvalidPolicy, host_entry
from stead.sandbox import SandboxConfig
from stead.sandbox_host.config import HostOptions
from stead.sandbox_host.installers import mirror_hosts


def egress_policy(config: SandboxConfig, options: HostOptions | None = None) -> EgressPolicy:
    """What the sandbox's egress proxy enforces: its ``networking``, which may
    open the agent's MCP server hosts (``allow_mcp_servers``); with the host's
    ``options``, the package mirrors' hosts too when it allows package managers,
    as the installer's proxy does. Raises ``InvalidPolicy`` for a config it
    cannot enforce (``rpc`` refuses those)."""
    mirrors = mirror_hosts(options) if options and allows_package_managers(config) else []
    return EgressPolicy.from_config(
        config.networking,
        mcp_server_hosts=config.mcp_server_hosts,
        extra_hosts=[host for host in mirrors if _is_host(host)],
    )


def _is_host(host: str) -> bool:
    """Whether the egress rules take ``host``. A mirror setting they do not take
    fails the installs that need it (``packages.py``), never every sandbox's wake."""
    try:
        host_entry(host, "mirror")
    except InvalidPolicy:
        return False
    return True


def allows_package_managers(config: SandboxConfig) -> bool:
    """Whether the sandbox's networking lets its package managers reach registries."""
    networking = config.networking
    return networking.get("type") != "limited" or networking.get("allow_package_managers") is True


def egress_terms(config: SandboxConfig) -> tuple[object, ...]:
    """What of ``config`` makes its ``egress_policy``."""
    return (config.networking, config.mcp_server_hosts)
