"""The sandbox host's own options, built once at its edge and passed in."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

from stead.blobs import BlobConfig
from stead.sandbox import split_endpoint

DISK_BYTES = 10 * 1024**3
"""The size of a sandbox's disk unless ``STEAD_SANDBOX_DISK_MB`` says otherwise."""


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
    socket: Path | None = None
    """Where the host listens for its brain (``STEAD_SANDBOX_HOST``, a path);
    None: ``host.sock`` in the state directory."""
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
    advertise: str | None = None
    """``tcp://host:port`` where other processes reach this host; None: they cannot."""
    token: str | None = None
    pip_index_url: str | None = None
    npm_registry: str | None = None
    cargo_index_url: str | None = None
    """A crates.io mirror's sparse index (``sparse+`` is implied)."""
    gem_source: str | None = None
    """A rubygems.org mirror, used instead of it."""
    goproxy: str | None = None
    """``GOPROXY`` for go packages (default ``https://proxy.golang.org``)."""
    gosumdb: str | None = None
    """``GOSUMDB`` for go packages (default go's own, ``sum.golang.org``)."""
    package_hosts: tuple[str, ...] = ()
    """Hosts the package installers may reach besides the public registries
    (a mirror named in one of the settings above is added itself)."""
    apt_sources: str | None = None
    """sources.list lines apt packages come from instead of the machine's."""
    install_timeout_seconds: float = 900.0
    terminal_send_seconds: float = 30.0
    """A terminal client that takes longer to accept one frame is dropped as too slow."""
    egress_hosts: tuple[tuple[str, str], ...] = ()
    """Host name -> IP address pins for every egress proxy (``STEAD_EGRESS_HOSTS``);
    a pinned address passes the blocklist."""
    egress_extra_ca_file: Path | None = None
    """More CAs the egress proxy trusts for origins (``STEAD_EGRESS_EXTRA_CA_FILE``)."""
    proxy_connect_timeout: float = 10.0
    proxy_idle_timeout: float = 600.0
    sandbox_disk_bytes: int = DISK_BYTES
    """The size of each sandbox's disk (``disk.py``): its workspace, /tmp and
    writable mounts together (``STEAD_SANDBOX_DISK_MB``)."""
    sandbox_open_files: int | None = None
    """The soft limit on open files of every sandbox's processes: the one the
    host started with, before it raised its own (``server.py``); None: as the
    host's."""
    failpoints: str | None = None
    """Test-only crash injection (``STEAD_FAILPOINTS``, ``stead.failpoints``)."""

    @property
    def socket_path(self) -> Path:
        return self.socket or self.state_dir / "host.sock"

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


WILDCARDS = ("", "0.0.0.0", "::")
"""Listen addresses that mean every interface: no other machine can dial them."""


def check_endpoint(value: str, form: str) -> tuple[str, int]:
    """``host:port`` split (``split_endpoint``: an IPv6 host in brackets, returned
    without them), or ``ValueError`` naming ``form``."""
    try:
        return split_endpoint(value)
    except ValueError:
        raise ValueError(f"{value!r} is not {form} with a port from 1 to 65535") from None


def advertised(listen_tcp: str | None) -> str | None:
    """The address a host listening on ``listen_tcp`` is reached at, by default."""
    if listen_tcp is None:
        return None
    host, _ = check_endpoint(listen_tcp, "a host:port")
    return None if host in WILDCARDS else f"tcp://{listen_tcp}"
