"""The egress room: each sandbox's way out to the network, and the rules it keeps.

A sandbox has a network namespace with only loopback; its one exit is the
``EgressProxy`` on a Unix socket, which enforces the environment's ``networking``
config as an ``EgressPolicy`` (DESIGN rules 7 and 8). Other rooms import only
from here. This room imports nothing from runtime, harness, api or store.
"""

from __future__ import annotations

from stead.sandbox_host.egress.audit import AuditEntry, AuditLog
from stead.sandbox_host.egress.ca import CertificateAuthority
from stead.sandbox_host.egress.dial import Resolver, system_resolver
from stead.sandbox_host.egress.errors import (
    BadRequest,
    Denied,
    EgressError,
    InvalidPolicy,
    Refused,
    TooLarge,
    UpstreamFailed,
    UpstreamTimeout,
)
from stead.sandbox_host.egress.policy import (
    PACKAGE_MANAGER_HOSTS,
    EgressPolicy,
    HostSet,
    block_reason,
    host_entry,
    normalize_host,
)
from stead.sandbox_host.egress.proxy import EgressProxy
from stead.sandbox_host.egress.request import MAX_HEAD_BYTES
from stead.sandbox_host.egress.secrets import HeaderSecret, PlaceholderSecret, Secrets
from stead.sandbox_host.egress.trust import (
    BUNDLE,
    SANDBOX_BUNDLE,
    SANDBOX_CA_DIR,
    EgressTls,
    system_bundles,
    trust_environment,
    upstream_context,
    write_sandbox_bundle,
)

__all__ = [
    "BUNDLE",
    "MAX_HEAD_BYTES",
    "PACKAGE_MANAGER_HOSTS",
    "SANDBOX_BUNDLE",
    "SANDBOX_CA_DIR",
    "AuditEntry",
    "AuditLog",
    "BadRequest",
    "CertificateAuthority",
    "Denied",
    "EgressError",
    "EgressPolicy",
    "EgressProxy",
    "EgressTls",
    "HeaderSecret",
    "HostSet",
    "InvalidPolicy",
    "PlaceholderSecret",
    "Refused",
    "Resolver",
    "Secrets",
    "TooLarge",
    "UpstreamFailed",
    "UpstreamTimeout",
    "block_reason",
    "host_entry",
    "normalize_host",
    "system_bundles",
    "system_resolver",
    "trust_environment",
    "upstream_context",
    "write_sandbox_bundle",
]
