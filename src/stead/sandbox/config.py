"""A sandbox's config as the brain sends it with every acquire, so a host that
lost its catalogue learns a sandbox's limits again from the next call."""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field
from typing import Any

from stead.package_specs import PACKAGE_MANAGERS


@dataclass(frozen=True, slots=True)
class SandboxConfig:
    memory_bytes: int = 2 * 1024**3
    pids: int = 512
    cpus: float = 1.0
    sleep_after: float = 300.0
    """Seconds without any activity before the sandbox sleeps (rule 6)."""
    networking: dict[str, Any] = field(default_factory=lambda: {"type": "unrestricted"})
    packages: dict[str, list[str]] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)
    """Extra environment variables of the sandbox's processes."""
    skills: bool = False
    """The agent has skills: ``/mnt/skills`` is also bound at ``/workspace/skills``."""
    mcp_server_hosts: list[str] = field(default_factory=list)
    """The hosts of the agent's MCP servers, which a ``limited`` ``networking``
    with ``allow_mcp_servers`` lets the sandbox reach."""

    @classmethod
    def from_json(cls, value: Any) -> SandboxConfig:
        """Raises ``ValueError`` naming the field for anything malformed."""
        if not isinstance(value, dict):
            raise ValueError("config must be an object")
        defaults = cls()
        config = cls(
            memory_bytes=_integer(value, "memory_bytes", defaults.memory_bytes, 16 * 1024**2),
            pids=_integer(value, "pids", defaults.pids, 8),
            cpus=_positive(value, "cpus", defaults.cpus),
            sleep_after=_positive(value, "sleep_after", defaults.sleep_after),
            networking=_mapping(value, "networking", defaults.networking),
            packages={
                manager: _strings(names, f"packages.{manager}")
                for manager, names in _mapping(value, "packages", {}).items()
                if manager in PACKAGE_MANAGERS
            },
            env={
                name: text
                for name, text in _mapping(value, "env", {}).items()
                if isinstance(name, str) and isinstance(text, str)
            },
            skills=value.get("skills") is True,
            mcp_server_hosts=_strings(value.get("mcp_server_hosts"), "mcp_server_hosts"),
        )
        return config

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @property
    def package_key(self) -> str | None:
        """Identifies an installed package set; None when there is nothing to install."""
        wanted = {m: list(self.packages.get(m) or []) for m in PACKAGE_MANAGERS}
        if not any(wanted.values()):
            return None
        return hashlib.sha256(json.dumps(wanted, sort_keys=True).encode()).hexdigest()[:32]


def _integer(value: dict[str, Any], name: str, default: int, low: int) -> int:
    found = value.get(name, default)
    if not isinstance(found, int) or isinstance(found, bool) or found < low:
        raise ValueError(f"{name}: expected an integer >= {low}, got {found!r}")
    return found


def _positive(value: dict[str, Any], name: str, default: float) -> float:
    found = value.get(name, default)
    if not isinstance(found, int | float) or isinstance(found, bool) or not found > 0:
        raise ValueError(f"{name}: expected a positive number, got {found!r}")
    return float(found)


def _mapping(value: dict[str, Any], name: str, default: dict[str, Any]) -> dict[str, Any]:
    found = value.get(name, default)
    if not isinstance(found, dict):
        raise ValueError(f"{name}: expected an object")
    return found


def _strings(value: Any, name: str) -> list[str]:
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ValueError(f"{name}: expected a list of strings")
    return list(value)
