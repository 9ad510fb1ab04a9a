"""One TLS context for every HTTP client a test or benchmark makes.

httpx2 builds a new context for each client it is not given one, reading the
machine's whole CA bundle each time: 50 ms on a slow machine, paid by every
client, even one that only speaks plain HTTP to a server on loopback. Tests
make thousands (a client per SDK fixture, per request of ``httpx2.get``, per
poll while a server starts), so they pass ``verify=client_tls()`` instead.
"""

from __future__ import annotations

import ssl
from functools import cache

import httpx2


@cache
def client_tls() -> ssl.SSLContext:
    """The context httpx2 would make by default (the machine's CAs, verified),
    made once per process; an ``ssl.SSLContext`` is safe to share between clients."""
    return httpx2.create_ssl_context()
