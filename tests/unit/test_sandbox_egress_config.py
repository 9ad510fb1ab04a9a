"""What of a session reaches its sandbox's egress rules: the environment's
``networking`` and the hosts of its agent's MCP servers, which
``allow_mcp_servers`` opens (``runtime.sandboxconfig``, ``sandbox_egress.egress_policy``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from stead.config import Settings
from stead.runtime.sandboxconfig import mcp_server_hosts, sandbox_config
from stead.sandbox import SandboxConfig
from stead.sandbox_host.sandbox_egress import egress_policy


def _limited(*, mcp: bool) -> dict[str, Any]:
    return {
        "type": "limited",
        "allowed_hosts": ["listed.example"],
        "allow_mcp_servers": mcp,
        "allow_package_managers": False,
    }


def _server(url: str) -> dict[str, Any]:
    return {"type": "url", "name": url, "url": url}


def test_the_agents_mcp_server_hosts_are_taken_once_each_in_their_compared_form() -> None:
    servers = [
        _server("https://MCP.Example.com/mcp"),
        _server("https://mcp.example.com:8443/other"),
        _server("http://[2001:DB8::1]:9000/"),
        _server("https://bad_host!/"),  # no host the egress rules take: left out
    ]
    assert mcp_server_hosts(servers) == ["2001:db8::1", "mcp.example.com"]


def test_allow_mcp_servers_opens_the_agents_hosts_and_nothing_else(tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path)
    servers = [_server("https://mcp.example.com/mcp")]
    for mcp in (True, False):
        environment = {"networking": _limited(mcp=mcp)}
        config = sandbox_config(settings, environment, servers)
        # The host gets the config as JSON with every acquire.
        policy = egress_policy(SandboxConfig.from_json(config.to_json()))
        assert policy.allows_host("listed.example")
        assert policy.allows_host("mcp.example.com") is mcp
        assert not policy.allows_host("other.example.com")
        # An MCP server's host is not listed by name: the address blocklist applies.
        assert not policy.is_explicit("mcp.example.com")
