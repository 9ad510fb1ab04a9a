"""What the sandbox host is told: its own options, and each sandbox's config.

``HostOptions`` is built once from stead's settings at the edge (the CLI) and
passed in; ``SandboxConfig`` travels with every acquire, so a host that lost
its catalogue learns a sandbox's limits again from the next call.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from stead.blobs import BlobConfig
from stead.egress import EgressPolicy, InvalidPolicy

PACKAGE_MANAGERS = ("apt", "cargo", "gem", "go", "npm", "pip")
SUPPORTED_PACKAGE_MANAGERS = ("apt", "npm", "pip")


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
        )
        try:
            EgressPolicy.from_config(config.networking)
        except InvalidPolicy as exc:
            raise ValueError(str(exc)) from None
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


@dataclass(frozen=True, slots=True)
class HostOptions:
    state_dir: Path
    """The catalogue, the lock and the RPC socket; root only (0700)."""
    work_dir: Path
    """Workspaces, egress sockets, installed packages and the supervisor's code.
    bubblewrap opens them as the sandbox's uid, so every directory above this
    one must be searchable by other users (``/var/lib/stead/...`` is; ``/root``
    is not); the host checks at start and refuses if not."""
    blobs: BlobConfig
    uid_base: int | None = None
    """First uid of this host's range as the operator set it; None: the
    machine's registry picks a free range (``uids.py``)."""
    uid_count: int = 100_000
    """How many uids the range holds: its sandboxes, the installer and the probe."""
    uid_registry: Path = Path("/var/lib/stead/uid-ranges.json")
    """The registry every sandbox host on the machine claims its range in."""
    bwrap: str = "bwrap"
    snapshot_ttl_seconds: float = 7 * 24 * 3600.0
    exec_record_seconds: float = 7 * 24 * 3600.0
    """How long an exec's result stays collectable by its op key. A brain that
    asks later finds the op key unknown and reports the call in doubt, never
    runs it again."""
    idle_check_seconds: float = 5.0
    gc_interval_seconds: float = 600.0
    listen_tcp: str | None = None
    """``host:port`` for a remote brain; requires ``token``."""
    token: str | None = None
    pip_index_url: str | None = None
    npm_registry: str | None = None
    package_hosts: tuple[str, ...] = ()
    """Hosts the package installers may reach besides the public registries
    (a mirror named in ``pip_index_url`` or ``npm_registry`` is added itself)."""
    apt_sources: str | None = None
    """sources.list lines apt packages come from instead of the machine's."""
    install_timeout_seconds: float = 900.0
    terminal_send_seconds: float = 30.0
    """A terminal client that takes longer to accept one frame is dropped as too slow."""
    proxy_connect_timeout: float = 10.0
    proxy_idle_timeout: float = 600.0

    @property
    def socket_path(self) -> Path:
        return self.state_dir / "host.sock"

    @property
    def host_tag(self) -> str:
        """Names this host's cgroups apart from any other host's on the machine."""
        return host_tag(self.state_dir)


def host_tag(state_dir: Path) -> str:
    return hashlib.sha256(str(state_dir.resolve()).encode()).hexdigest()[:10]


def default_work_dir(state_dir: Path) -> Path:
    """``/var/lib/stead/host-<tag>``: searchable by the sandbox uids wherever
    the state directory is (a root home directory is not)."""
    return Path("/var/lib/stead") / f"host-{host_tag(state_dir)}"


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
