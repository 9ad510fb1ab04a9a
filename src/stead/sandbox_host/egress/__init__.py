"""The egress room: each sandbox's way out to the network, and the rules it keeps.

A sandbox has a network namespace with only loopback; its one exit is the
``EgressProxy`` on a Unix socket, which enforces the environment's ``networking``
config as an ``EgressPolicy`` (DESIGN rules 7 and 8). Other rooms import only
from here. This room imports nothing from runtime, harness, api or store.
"""

from __future__ import annotations

from stead.sandbox_host.egress.dial import Resolver, system_resolver
from stead.sandbox_host.egress.errors import (
    BadRequest,
    Denied,
    EgressError,
    InvalidPolicy,
    UpstreamFailed,
    UpstreamTimeout,
)
from stead.sandbox_host.egress.policy import (
    PACKAGE_MANAGER_HOSTS,
    EgressPolicy,
    block_reason,
    normalize_host,
)
from stead.sandbox_host.egress.proxy import Credentials, EgressProxy
from stead.sandbox_host.egress.request import MAX_HEAD_BYTES

__all__ = [
    "MAX_HEAD_BYTES",
    "PACKAGE_MANAGER_HOSTS",
    "BadRequest",
    "Credentials",
    "Denied",
    "EgressError",
    "EgressPolicy",
    "EgressProxy",
    "InvalidPolicy",
    "Resolver",
    "UpstreamFailed",
    "UpstreamTimeout",
    "block_reason",
    "normalize_host",
    "system_resolver",
]
