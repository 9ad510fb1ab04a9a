"""Which hosts and addresses a sandbox may reach: the environment's ``networking``
config made enforceable, and the host matching and address blocklist every
egress rule of stead shares. Pure data and checks; no I/O, no resolving.

Two checks, in this order, for every request:

1. ``check_host``: under ``limited``, the host must match the allowlist (exact
   names and addresses, ``*.example.com`` wildcards, the package registries, the
   MCP servers, the host's extra hosts). ``unrestricted`` allows every host.
2. ``check_addresses``: every address the host resolved to must be publicly
   routable (the safety blocklist, in both modes) unless the host is *explicit*:
   it equals, literally, an ``allowed_hosts`` entry or an extra host. Listing
   ``127.0.0.1`` or ``db.internal`` by name means it; a wildcard does not reach
   private addresses, since anyone who controls a subdomain's DNS could point it
   at the host's loopback or the cloud metadata service.

Ports are not restricted: an allowed host is allowed on every port, as the
environment config has no way to name ports.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable, Mapping, Sequence

from stead.egress_policy.errors import Denied, InvalidPolicy

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

PACKAGE_MANAGER_HOSTS: tuple[str, ...] = (
    # PyPI
    "pypi.org",
    "files.pythonhosted.org",
    # npm
    "registry.npmjs.org",
    # Debian and Ubuntu apt mirrors
    "deb.debian.org",
    "security.debian.org",
    "archive.ubuntu.com",
    "security.ubuntu.com",
    # crates.io
    "crates.io",
    "static.crates.io",
    "index.crates.io",
    # RubyGems (gem reads rubygems.org's compact index from index.rubygems.org)
    "rubygems.org",
    "index.rubygems.org",
    # Go module proxy and checksum database
    "proxy.golang.org",
    "sum.golang.org",
)
"""The registries ``allow_package_managers`` opens; the one list of them."""

NOT_LISTED = "host not in the environment's allowed_hosts"

_LABEL = r"[a-z0-9_]([a-z0-9_-]{0,61}[a-z0-9_])?"
_NAME = re.compile(rf"^{_LABEL}(\.{_LABEL})*$")
_MAX_NAME = 253
_SHARED = ipaddress.ip_network("100.64.0.0/10")  # RFC 6598 carrier-grade NAT
_NAT64 = ipaddress.ip_network("64:ff9b::/96")


def normalize_host(host: str) -> str:
    """The form hosts are compared in: lower case, one trailing dot dropped, an IP
    address (bracketed or not) in its canonical spelling."""
    host = host.strip().lower()
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    host = host.removesuffix(".")
    try:
        return str(ipaddress.ip_address(host))
    except ValueError:
        return host


def block_reason(address: str | IPAddress) -> str | None:
    """Why ``address`` is on the safety blocklist, or None when it is publicly routable.

    An IPv6 address that stands for an IPv4 one (IPv4-mapped, NAT64) is judged by
    that IPv4 address; a 6to4 address by both.
    """
    ip = ipaddress.ip_address(address) if isinstance(address, str) else address
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:
            return _own_block_reason(ip.ipv4_mapped)
        if ip in _NAT64:
            return _own_block_reason(ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF))
        if ip.sixtofour is not None:
            return _own_block_reason(ip.sixtofour) or _own_block_reason(ip)
    return _own_block_reason(ip)


def _own_block_reason(ip: IPAddress) -> str | None:
    checks = (
        (ip.is_unspecified, "unspecified"),
        (ip.is_loopback, "loopback"),
        (ip.is_link_local, "link-local"),
        (ip.is_multicast, "multicast"),
        (ip in _SHARED, "shared address space"),
        (ip.is_private, "private"),
        (ip.is_reserved, "reserved"),
        (not ip.is_global, "not globally routable"),
    )
    return next((reason for blocked, reason in checks if blocked), None)


def is_address(host: str) -> bool:
    """Whether ``host`` is an IP address (unbracketed) rather than a name."""
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def refuse_blocked(host: str, addresses: Sequence[str]) -> None:
    """Raises ``Denied`` naming the first of ``addresses`` on the blocklist."""
    for address in addresses:
        reason = block_reason(address)
        if reason is not None:
            raise Denied(host, f"address {address} is blocked ({reason})")


def host_entry(raw: object, where: str) -> str:
    """A validated, normalised host entry: a name, an address or ``*.`` + a name."""
    if not isinstance(raw, str):
        raise InvalidPolicy(f"{where}: {raw!r} is not a string")
    host = normalize_host(raw)
    name = host.removeprefix("*.")
    if is_address(host):
        return host
    if not name or len(name) > _MAX_NAME or not _NAME.match(name):
        raise InvalidPolicy(f"{where}: {raw!r} is not a host name, address or *.wildcard")
    return host


class HostSet:
    """Exact hosts and ``*.suffix`` wildcards; a wildcard matches subdomains at any
    depth, never the apex (``*.example.com`` matches ``a.b.example.com``, not
    ``example.com``)."""

    def __init__(self, entries: Iterable[str]) -> None:
        exact: set[str] = set()
        suffixes: set[str] = set()
        for entry in entries:
            if entry.startswith("*."):
                suffixes.add(entry[1:])  # keeps the dot: ".example.com"
            else:
                exact.add(entry)
        self.exact = frozenset(exact)
        self.suffixes = tuple(sorted(suffixes))

    def __contains__(self, host: object) -> bool:
        if not isinstance(host, str):
            return False
        return host in self.exact or host.endswith(self.suffixes)


class EgressPolicy:
    """The environment's ``networking`` config, checked and ready to enforce.

    ``networking`` is exactly ``{"type": "unrestricted"}`` or ``{"type": "limited",
    "allowed_hosts": [...], "allow_mcp_servers": bool, "allow_package_managers":
    bool}``; anything else raises ``InvalidPolicy`` (a policy that guesses fails
    open). ``mcp_server_hosts`` are the agent's MCP server hosts, allowed when
    ``allow_mcp_servers`` is true; ``extra_hosts`` are the sandbox host's own
    additions (the package mirrors, for installs and sandboxes that allow package
    managers), allowed in every mode and, as exact entries, explicit like
    ``allowed_hosts``.
    """

    def __init__(
        self,
        networking: Mapping[str, object],
        *,
        mcp_server_hosts: Iterable[str] = (),
        extra_hosts: Iterable[str] = (),
    ) -> None:
        kind = networking.get("type")
        extras = [host_entry(host, f"extra_hosts.{i}") for i, host in enumerate(extra_hosts)]
        listed: list[str] = []
        allowed = list(extras)
        if kind == "unrestricted":
            _expect_keys(networking, {"type"})
        elif kind == "limited":
            _expect_keys(
                networking,
                {"type", "allowed_hosts", "allow_mcp_servers", "allow_package_managers"},
            )
            listed = _host_list(networking["allowed_hosts"])
            allowed += listed
            if _flag(networking, "allow_package_managers"):
                allowed += PACKAGE_MANAGER_HOSTS
            if _flag(networking, "allow_mcp_servers"):
                allowed += [
                    host_entry(host, f"mcp_server_hosts.{i}")
                    for i, host in enumerate(mcp_server_hosts)
                ]
        else:
            raise InvalidPolicy(f"networking.type: {kind!r} is not 'unrestricted' or 'limited'")
        self.unrestricted = kind == "unrestricted"
        self.allowed = HostSet(allowed)
        self.explicit = frozenset(h for h in (*listed, *extras) if not h.startswith("*."))

    @classmethod
    def from_config(
        cls,
        networking: Mapping[str, object],
        *,
        mcp_server_hosts: Iterable[str] = (),
        extra_hosts: Iterable[str] = (),
    ) -> EgressPolicy:
        """The same as the constructor; reads well at call sites that hold a config."""
        return cls(networking, mcp_server_hosts=mcp_server_hosts, extra_hosts=extra_hosts)

    def allows_host(self, host: str) -> bool:
        """Whether requests to ``host`` pass the allowlist (any port)."""
        return self.unrestricted or normalize_host(host) in self.allowed

    def is_explicit(self, host: str) -> bool:
        """Whether ``host`` is listed literally, so the blocklist does not apply to it."""
        return normalize_host(host) in self.explicit

    def check_host(self, host: str) -> None:
        """Raises ``Denied`` unless ``host`` passes the allowlist."""
        if not self.allows_host(host):
            raise Denied(host, NOT_LISTED)

    def check_addresses(self, host: str, addresses: Sequence[str]) -> None:
        """Raises ``Denied`` if any address ``host`` resolved to is blocked (and the
        host is not explicit). All must pass: a name that resolves to a public and a
        private address is refused, not half-trusted."""
        if not self.is_explicit(host):
            refuse_blocked(host, addresses)


def _expect_keys(networking: Mapping[str, object], keys: set[str]) -> None:
    if set(networking) != keys:
        raise InvalidPolicy(
            f"networking: expected keys {sorted(keys)}, got {sorted(map(str, networking))}"
        )


def _flag(networking: Mapping[str, object], key: str) -> bool:
    value = networking[key]
    if not isinstance(value, bool):
        raise InvalidPolicy(f"networking.{key}: {value!r} is not a boolean")
    return value


def _host_list(value: object) -> list[str]:
    if not isinstance(value, list | tuple):
        raise InvalidPolicy(f"networking.allowed_hosts: {value!r} is not a list")
    return [host_entry(host, f"networking.allowed_hosts.{i}") for i, host in enumerate(value)]
