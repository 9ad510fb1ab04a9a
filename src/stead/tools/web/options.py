"""What the operator set for web tools, ready to use: the time and size limits,
the origin trust, ``STEAD_EGRESS_HOSTS`` pins and the search provider."""

from __future__ import annotations

import ssl
from collections.abc import Mapping
from dataclasses import dataclass, field

from stead.egress_policy import Resolver, system_resolver


@dataclass(frozen=True, slots=True)
class WebOptions:
    timeout: float
    """Seconds one call may take in all (every redirect of a fetch included)."""
    max_bytes: int
    """Largest body read (after decompression)."""
    tls: ssl.SSLContext
    """Verifies origins: the system's CAs plus ``STEAD_EGRESS_EXTRA_CA_FILE``."""
    pinned: Mapping[str, str] = field(default_factory=dict)
    """``STEAD_EGRESS_HOSTS``: names resolved to these addresses only."""
    resolver: Resolver = system_resolver
    search_url: str | None = None
    """``STEAD_WEB_SEARCH_URL``: the SearXNG instance web_search asks."""
