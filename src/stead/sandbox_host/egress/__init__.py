"""The egress room: each sandbox's way out to the network, and the rules it keeps.

A sandbox has a network namespace with only loopback; its one exit is the
``EgressProxy`` on a Unix socket, which enforces the environment's ``networking``
config as an ``EgressPolicy`` (DESIGN rules 7 and 8). The rules themselves
(policies, blocklist, resolving, origin trust) are ``stead.egress_policy``,
shared with the brain's web tools. Other rooms import only from here. This
room imports nothing from runtime, harness, api or store.
"""

from __future__ import annotations

from stead.sandbox_host.egress.audit import AuditEntry, AuditLog
from stead.sandbox_host.egress.ca import CertificateAuthority
from stead.sandbox_host.egress.errors import BadRequest, Refused, TooLarge
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
    write_sandbox_bundle,
)

__all__ = [
    "BUNDLE",
    "MAX_HEAD_BYTES",
    "SANDBOX_BUNDLE",
    "SANDBOX_CA_DIR",
    "AuditEntry",
    "AuditLog",
    "BadRequest",
    "CertificateAuthority",
    "EgressProxy",
    "EgressTls",
    "HeaderSecret",
    "PlaceholderSecret",
    "Refused",
    "Secrets",
    "TooLarge",
    "system_bundles",
    "trust_environment",
    "write_sandbox_bundle",
]
