"""Where the brain finds a sandbox host, and how long it waits on one: light
records the brain reads at start-up, apart from the host protocol's client
(``client.py``), which a server imports only once it first reaches a host."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from stead.sandbox.errors import InvalidArgument


@dataclass(frozen=True, slots=True)
class HostAddress:
    """A Unix socket path, or ``host:port`` with the host's token."""

    unix_path: Path | None = None
    tcp: str | None = None
    token: str | None = None

    def __str__(self) -> str:
        return str(self.unix_path) if self.unix_path is not None else f"tcp://{self.tcp}"


@dataclass(frozen=True, slots=True)
class ClientTimeouts:
    connect: float = 5.0
    call: float = 60.0
    """An ordinary call: a file operation, a status."""
    wake: float = 960.0
    """Added to any call that may wake a sandbox (restore, package install)."""


def parse_address(value: str, token: str | None = None) -> HostAddress:
    """``unix:///path``, a plain path, or ``tcp://host:port`` (needs ``token``)."""
    if value.startswith("tcp://"):
        where = value.removeprefix("tcp://")
        host, _, port = where.rpartition(":")
        if not host or not (port.isascii() and port.isdigit()) or not 0 < int(port) < 65536:
            raise InvalidArgument(f"{value!r} is not tcp://host:port")
        if not token:
            raise InvalidArgument("a tcp:// sandbox host address needs a token")
        return HostAddress(tcp=where, token=token)
    path = value.removeprefix("unix://")
    if not path:
        raise InvalidArgument("the sandbox host address is empty")
    return HostAddress(unix_path=Path(path))
