"""What both providers' HTTP clients share: how they trust their upstream."""

from __future__ import annotations

import ssl
from urllib.parse import urlsplit


def upstream_verify(url: str) -> ssl.SSLContext | bool:
    """The ``verify`` of a client that calls only ``url``: the system's CAs
    (``httpx2``'s default) for ``https``; for plain HTTP, which never makes a TLS
    connection, a context that trusts nothing, so a TLS connection it were led
    to would fail. Loading every CA of the system costs a client 1.5 MB and tens
    of milliseconds, which a local upstream (a proxy, an OpenAI-compatible
    server on the machine) never needs."""
    if urlsplit(url).scheme.lower() == "https":
        return True
    return ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
