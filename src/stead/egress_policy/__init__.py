"""The egress rules: which hosts and addresses traffic leaving stead on an
agent's behalf may reach, and whom its TLS trusts. One copy, shared by the
sandbox host's egress proxy (an environment's ``networking``, ``EgressPolicy``)
and the brain's web tools (a tool's domain lists, ``DomainPolicy``); both keep
the same address blocklist and resolve through ``checked_addresses``.

Imports nothing from stead's rooms, so both sides of the brain/body line may
import it (DESIGN §2).
"""

from __future__ import annotations

from stead.egress_policy.domains import DOMAIN_RULE, DomainPolicy, domain_entry
from stead.egress_policy.errors import (
    Denied,
    EgressError,
    InvalidPolicy,
    UpstreamFailed,
    UpstreamTimeout,
)
from stead.egress_policy.policy import (
    NOT_LISTED,
    PACKAGE_MANAGER_HOSTS,
    EgressPolicy,
    HostSet,
    block_reason,
    host_entry,
    is_address,
    normalize_host,
    refuse_blocked,
)
from stead.egress_policy.resolve import (
    HostPolicy,
    Resolver,
    checked_addresses,
    pinned_hosts,
    system_resolver,
    threaded_resolver,
)
from stead.egress_policy.settings import ExtraCaFile, PinnedHosts
from stead.egress_policy.tls import UpstreamTls, checked_bundle, upstream_context

__all__ = [
    "DOMAIN_RULE",
    "NOT_LISTED",
    "PACKAGE_MANAGER_HOSTS",
    "Denied",
    "DomainPolicy",
    "EgressError",
    "EgressPolicy",
    "ExtraCaFile",
    "HostPolicy",
    "HostSet",
    "InvalidPolicy",
    "PinnedHosts",
    "Resolver",
    "UpstreamFailed",
    "UpstreamTimeout",
    "UpstreamTls",
    "block_reason",
    "checked_addresses",
    "checked_bundle",
    "domain_entry",
    "host_entry",
    "is_address",
    "normalize_host",
    "pinned_hosts",
    "refuse_blocked",
    "system_resolver",
    "threaded_resolver",
    "upstream_context",
]
