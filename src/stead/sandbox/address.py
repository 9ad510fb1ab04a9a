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


MIN_TOKEN_CHARS = 16
"""The shared token is the key to every host (and its TLS, ``host_tls.py``)."""


def check_token(token: str | None) -> str | None:
    """``token`` (``STEAD_SANDBOX_HOST_TOKEN``) if long enough; ``ValueError`` if not."""
    if token is not None and len(token) < MIN_TOKEN_CHARS:
        raise ValueError(
            f"at least {MIN_TOKEN_CHARS} characters (it keys every host and its TLS; "
            "make one with: openssl rand -hex 32)"
        )
    return token


def split_endpoint(value: str) -> tuple[str, int]:
    """``host:port`` as the host to dial or bind and the port; an IPv6 address
    is written in brackets (``[::1]:7070``), as URLs write it, and comes back
    without them. ``ValueError`` if ``value`` is not one."""
    host, sep, port = value.rpartition(":")
    if not sep or not (port.isascii() and port.isdigit()) or not 0 < int(port) < 65536:
        raise ValueError(f"{value!r}: no port from 1 to 65535")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    return host, int(port)


def parse_address(value: str, token: str | None = None) -> HostAddress:
    """``unix:///path``, a plain path, or ``tcp://host:port`` (needs ``token``)."""
    if value.startswith("tcp://"):
        where = value.removeprefix("tcp://")
        try:
            host, _ = split_endpoint(where)
        except ValueError:
            host = ""
        if not host:
            raise InvalidArgument(f"{value!r} is not tcp://host:port")
        if not token:
            raise InvalidArgument("a tcp:// sandbox host address needs a token")
        return HostAddress(tcp=where, token=token)
    path = value.removeprefix("unix://")
    if not path:
        raise InvalidArgument("the sandbox host address is empty")
    return HostAddress(unix_path=Path(path))
