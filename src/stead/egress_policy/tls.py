"""Whom outbound TLS trusts: origins are verified against the machine's trust
store plus the operator's optional bundle (``STEAD_EGRESS_EXTRA_CA_FILE``),
by the sandbox's egress proxy and the brain's web tools alike."""

from __future__ import annotations

import ssl
from pathlib import Path


def upstream_context(extra_ca_file: Path | None) -> ssl.SSLContext:
    """A client context that verifies origins (host names included) against the
    system's CAs and ``extra_ca_file``; raises ``ssl.SSLError``/``OSError`` for an
    unreadable extra bundle."""
    context = ssl.create_default_context(ssl.Purpose.SERVER_AUTH)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.set_alpn_protocols(["http/1.1"])
    if extra_ca_file is not None:
        context.load_verify_locations(cafile=str(extra_ca_file))
    return context


class UpstreamTls:
    """``upstream_context`` made at its first use, then kept: loading the system's
    CAs takes tens of milliseconds, which a start that never calls out (most
    servers' webhooks, web tools and MCP servers) does not pay."""

    def __init__(self, extra_ca_file: Path | None) -> None:
        self._extra_ca_file = extra_ca_file
        self._context: ssl.SSLContext | None = None

    def context(self) -> ssl.SSLContext:
        if self._context is None:
            self._context = upstream_context(self._extra_ca_file)
        return self._context


def checked_bundle(extra_ca_file: Path | None) -> Path | None:
    """``STEAD_EGRESS_EXTRA_CA_FILE`` checked at start: ``ValueError`` unless it loads."""
    if extra_ca_file is not None:
        try:
            upstream_context(extra_ca_file)
        except (OSError, ssl.SSLError) as exc:
            raise ValueError(f"{extra_ca_file}: not a readable PEM bundle of CAs ({exc})") from None
    return extra_ca_file
