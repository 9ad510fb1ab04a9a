"""A web tool's domain lists made enforceable: ``allowed_domains`` and
``blocked_domains`` of a ``web_fetch`` or ``web_search`` config (spec §4.6).

The environment's ``networking`` does not apply to web tools: it governs the
sandbox's own traffic (spec §4.7). What does apply, always, is the address
blocklist every stead egress keeps (``block_reason``).

* Entries are plain host names or addresses (no scheme, port, path or ``*.``);
  a name matches itself and every subdomain, an address only itself.
* ``blocked_domains`` refuses its hosts; ``allowed_domains``, when set, refuses
  every other host. An empty allowlist allows nothing (it fails closed).
* Addresses: as for a sandbox's ``allowed_hosts``, a host equal to an
  ``allowed_domains`` entry is *explicit* and may reach private and loopback
  addresses, since the agent's author named it; a subdomain matched through an
  entry may not, as whoever runs that subdomain's DNS could point it at the
  brain's loopback or the cloud metadata service.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from stead.egress_policy.errors import Denied, InvalidPolicy
from stead.egress_policy.policy import (
    HostSet,
    host_entry,
    is_address,
    normalize_host,
    refuse_blocked,
)

DOMAIN_RULE = "a plain host name such as docs.example.com (no scheme, port or path)"


def domain_entry(raw: object, where: str) -> str:
    """A validated, normalised domain list entry; ``InvalidPolicy`` names ``where``."""
    try:
        entry = host_entry(raw, where)
    except InvalidPolicy:
        raise InvalidPolicy(f"{where}: {raw!r} is not {DOMAIN_RULE}") from None
    if entry.startswith("*."):
        raise InvalidPolicy(
            f"{where}: {raw!r} is not {DOMAIN_RULE}; {entry[2:]!r} matches its subdomains too"
        )
    return entry


def _entries(key: str, values: Sequence[object]) -> list[str]:
    return [domain_entry(value, f"{key}.{i}") for i, value in enumerate(values)]


def _matching(entries: list[str]) -> HostSet:
    """Each name and its subdomains; each address alone."""
    wildcards = [f"*.{e}" for e in entries if not is_address(e)]
    return HostSet([*entries, *wildcards])


class DomainPolicy:
    """One web tool's domain lists, checked and ready to enforce. ``tool`` names
    the tool in refusals. Raises ``InvalidPolicy`` for an entry it cannot
    enforce (the API refuses such configs; an old stored one fails the call)."""

    def __init__(
        self,
        allowed: Sequence[object] | None = None,
        blocked: Sequence[object] | None = None,
        *,
        tool: str = "web",
    ) -> None:
        self.tool = tool
        allowed_entries = None if allowed is None else _entries("allowed_domains", allowed)
        blocked_entries = _entries("blocked_domains", blocked or [])
        self.allowed = None if allowed_entries is None else _matching(allowed_entries)
        self.blocked = _matching(blocked_entries)
        self.explicit = frozenset(allowed_entries or ())

    @classmethod
    def from_config(cls, config: Mapping[str, object]) -> DomainPolicy:
        """From a resolved tool config (``name``, ``allowed_domains``, ``blocked_domains``)."""
        allowed, blocked = config.get("allowed_domains"), config.get("blocked_domains")
        for key, value in (("allowed_domains", allowed), ("blocked_domains", blocked)):
            if value is not None and not isinstance(value, list | tuple):
                raise InvalidPolicy(f"{key}: {value!r} is not a list")
        return cls(allowed, blocked, tool=str(config.get("name", "web")))  # type: ignore[arg-type]

    def allows_host(self, host: str) -> bool:
        host = normalize_host(host)
        if host in self.blocked:
            return False
        return self.allowed is None or host in self.allowed

    def check_host(self, host: str) -> None:
        """Raises ``Denied`` unless ``host`` passes the domain lists."""
        name = normalize_host(host)
        if name in self.blocked:
            raise Denied(host, f"in the {self.tool} tool's blocked_domains")
        if self.allowed is not None and name not in self.allowed:
            raise Denied(host, f"not in the {self.tool} tool's allowed_domains")

    def check_addresses(self, host: str, addresses: Sequence[str]) -> None:
        """Raises ``Denied`` if any address is on the blocklist and ``host`` is
        not explicit."""
        if normalize_host(host) not in self.explicit:
            refuse_blocked(host, addresses)
