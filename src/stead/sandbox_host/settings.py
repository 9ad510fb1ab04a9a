"""The sandbox host's settings: the ``STEAD_*`` variables it reads itself.

A host started by ``stead serve`` inherits the brain's environment (with the
data and state directories the brain resolved), so both read the same
variables, and no list of names is kept by hand in between. Built once at the
host's edge (``stead sandbox-host``) and turned into ``HostOptions``.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import Field, ValidationInfo, field_validator
from pydantic_settings import SettingsConfigDict

from stead.blob_settings import BlobSettings
from stead.durations import Seconds
from stead.egress_policy import ExtraCaFile, PinnedHosts
from stead.failpoints import FailPoints
from stead.log_levels import LogLevel, any_case
from stead.sandbox import check_token
from stead.sandbox_host.config import (
    DISK_BYTES,
    HostOptions,
    advertised,
    check_endpoint,
    default_work_dir,
)
from stead.setting_paths import SettingPath, expanded_address

LAST_UID = 2**31 - 2
"""The highest sandbox uid: some tools read uids as signed 32-bit numbers."""
MAX_UID_COUNT = 2**31 - 1 - 2_000_000
"""The most uids one host may claim: all the registry hands out."""
MIN_DISK_MB = 16
"""The smallest sandbox disk: ext4's journal and tables need a few MiB."""
MAX_DISK_MB = 16 * 1024**2
"""16 TiB: refuses a size given in bytes by mistake."""


def _default_data_dir() -> Path:
    return Path.home() / ".local" / "share" / "stead"


def socket_path(address: str | None) -> Path | None:
    """The Unix socket ``STEAD_SANDBOX_HOST`` names (read as the brain reads it,
    ``stead.sandbox.parse_address``), or None: unset, or another machine's host."""
    if not address or address.startswith("tcp://"):
        return None
    return Path(address.removeprefix("unix://"))


def check_makeable(path: Path) -> None:
    """``ValueError`` if ``path`` cannot be a directory: it, or the nearest of
    its parents that is there, is something else (a file)."""
    for there in (path, *path.parents):
        if there.exists():
            if not there.is_dir():
                raise ValueError(f"{there} is not a directory")
            return


class HostSettings(BlobSettings):
    model_config = SettingsConfigDict(env_prefix="STEAD_", frozen=True, extra="ignore")

    data_dir: SettingPath = Field(default_factory=_default_data_dir)
    sandbox_host_state_dir: SettingPath | None = None
    """The host's own directory; default ``<data_dir>/sandbox-host``."""
    sandbox_work_dir: SettingPath | None = None
    """Workspaces and installed packages; every directory above it must be
    searchable by others. Default ``/var/lib/stead/host-<hash of the state dir>``."""
    sandbox_host: str | None = None
    """Where the brain dials its host (``STEAD_SANDBOX_HOST``): a Unix socket
    path there is where this host listens, so a host the brain starts, or one
    run with the brain's settings, answers where it dials. Unset (or a
    ``tcp://`` address, a remote host's): ``<state dir>/host.sock``."""
    sandbox_host_token: str | None = None
    sandbox_host_listen_tcp: str | None = None
    """``host:port`` on which the host also serves a remote brain (needs the token)."""
    sandbox_host_advertise: str | None = None
    """``tcp://host:port`` where other machines' processes reach this host (a
    sandbox's lease records it). Default: the TCP listen address, unless that is
    a wildcard (0.0.0.0, ::), which other machines cannot dial."""
    sandbox_uid_count: int = Field(default=100_000, ge=3, le=MAX_UID_COUNT)
    """How many uids the host's range holds: its sandboxes, the package
    installer and the start-up probe."""
    sandbox_uid_base: int | None = Field(default=None, ge=65_536)
    """First host uid of the range, set by the operator; unset, the host claims
    a free range in ``sandbox_uid_registry``. Below 65536 are the machine's own
    users and groups."""
    sandbox_uid_registry: SettingPath = Path("/var/lib/stead/uid-ranges.json")
    """Where every sandbox host on the machine records the uid range it holds."""
    sandbox_disk_mb: int = Field(default=DISK_BYTES // 1024**2, ge=MIN_DISK_MB, le=MAX_DISK_MB)
    """The size of each sandbox's disk, in MiB: everything it can write to
    (/workspace, /tmp, its writable mounts) together. A sparse file: what is
    not written takes nothing on the host's disk. Raised, it grows existing
    disks at their next mount; lowered, it shrinks none."""
    sandbox_idle_check_seconds: Seconds = 5.0
    snapshot_ttl_seconds: Seconds = 7 * 24 * 3600.0
    snapshot_gc_interval_seconds: Seconds = 600.0
    """How often the host deletes expired snapshots and exec records."""
    sandbox_exec_record_seconds: Seconds = 7 * 24 * 3600.0
    """How long the host keeps an exec's result for its op key."""
    pip_index_url: str | None = None
    """A PyPI mirror for environment packages; its host is allowed while installing."""
    npm_registry: str | None = None
    cargo_index_url: str | None = None
    """The sparse index of a crates.io mirror (``https://host/index/``); a
    download host its ``config.json`` names elsewhere goes in ``package_hosts``."""
    gem_source: str | None = None
    """A rubygems.org mirror for environment gem packages."""
    goproxy: str | None = None
    """``GOPROXY`` for environment go packages (default ``https://proxy.golang.org``)."""
    gosumdb: str | None = None
    """``GOSUMDB`` for environment go packages (``off`` for a private proxy)."""
    apt_sources: str | None = None
    """sources.list lines for environment apt packages (default: the machine's sources)."""
    package_hosts: list[str] = Field(default_factory=list)
    """More hosts the package installers may reach (mirrors, private indexes)."""
    egress_hosts: PinnedHosts = Field(default_factory=dict)
    """JSON object of host name -> IP address, like /etc/hosts, for every
    sandbox's egress proxy: the name resolves to that address only, and the
    address is reachable even if private or loopback (the operator chose it).
    The environment's allowlist still decides whether the name may be reached."""
    egress_extra_ca_file: ExtraCaFile = None
    """A PEM bundle of CAs the egress proxy trusts for origins, besides the
    host's own trust store (a private CA of the operator's)."""
    terminal_send_timeout_seconds: Seconds = 30.0
    """A terminal client that cannot take output for this long is dropped (too slow)."""
    log_level: LogLevel = "info"
    """The brain's levels (``stead.log_levels``; a host it starts is passed
    its own), in any case."""
    failpoints: str | None = None
    """Test-only crash injection, see ``stead.failpoints``."""

    _any_case = field_validator("log_level", mode="before")(any_case)
    _home_address = field_validator("sandbox_host", mode="before")(expanded_address)

    @field_validator("failpoints")
    @classmethod
    def _failpoints(cls, spec: str | None) -> str | None:
        FailPoints(spec)  # ValueError naming an unknown one
        return spec

    @field_validator("sandbox_host_state_dir", "sandbox_work_dir")
    @classmethod
    def _directory(cls, path: Path | None) -> Path | None:
        if path is not None:
            check_makeable(path)
        return path

    @field_validator("sandbox_host")
    @classmethod
    def _socket(cls, value: str | None) -> str | None:
        path = socket_path(value)
        if path is not None and path.exists() and not path.is_socket():
            raise ValueError(f"{path} is there and is not a socket")
        return value

    @field_validator("sandbox_host_token")
    @classmethod
    def _token(cls, value: str | None) -> str | None:
        return check_token(value)

    @field_validator("sandbox_host_listen_tcp")
    @classmethod
    def _listen(cls, value: str | None, info: ValidationInfo) -> str | None:
        if value is not None:
            check_endpoint(value, "a host:port")
            if not info.data.get("sandbox_host_token"):
                raise ValueError("a TCP listener needs STEAD_SANDBOX_HOST_TOKEN")
        return value

    @field_validator("sandbox_host_advertise")
    @classmethod
    def _advertise(cls, value: str | None, info: ValidationInfo) -> str | None:
        if value is None:
            return None
        if not value.startswith("tcp://"):
            raise ValueError(f"{value!r} is not tcp://host:port")
        check_endpoint(value.removeprefix("tcp://"), "tcp://host:port")
        if not info.data.get("sandbox_host_listen_tcp"):
            raise ValueError("the host listens on no TCP port (STEAD_SANDBOX_HOST_LISTEN_TCP)")
        return value

    @field_validator("sandbox_uid_base")
    @classmethod
    def _range_fits(cls, base: int | None, info: ValidationInfo) -> int | None:
        count = info.data.get("sandbox_uid_count")
        if base is not None and count is not None and base + count - 1 > LAST_UID:
            raise ValueError(
                f"{base} + STEAD_SANDBOX_UID_COUNT ({count}) - 1 is past uid {LAST_UID}"
            )
        return base

    def options(self) -> HostOptions:
        state_dir = self.sandbox_host_state_dir or self.data_dir / "sandbox-host"
        return HostOptions(
            state_dir=state_dir,
            work_dir=self.sandbox_work_dir or default_work_dir(state_dir),
            socket=socket_path(self.sandbox_host),
            blobs=self.blob_config(),
            uid_base=self.sandbox_uid_base,
            uid_count=self.sandbox_uid_count,
            uid_registry=self.sandbox_uid_registry,
            snapshot_ttl_seconds=self.snapshot_ttl_seconds,
            gc_interval_seconds=self.snapshot_gc_interval_seconds,
            exec_record_seconds=self.sandbox_exec_record_seconds,
            idle_check_seconds=self.sandbox_idle_check_seconds,
            sandbox_disk_bytes=self.sandbox_disk_mb * 1024**2,
            listen_tcp=self.sandbox_host_listen_tcp,
            advertise=self.sandbox_host_advertise or advertised(self.sandbox_host_listen_tcp),
            token=self.sandbox_host_token,
            pip_index_url=self.pip_index_url,
            npm_registry=self.npm_registry,
            cargo_index_url=self.cargo_index_url,
            gem_source=self.gem_source,
            goproxy=self.goproxy,
            gosumdb=self.gosumdb,
            package_hosts=tuple(self.package_hosts),
            apt_sources=self.apt_sources,
            terminal_send_seconds=self.terminal_send_timeout_seconds,
            egress_hosts=tuple(self.egress_hosts.items()),
            egress_extra_ca_file=self.egress_extra_ca_file,
            failpoints=self.failpoints,
        )
