"""Egress errors. Each request-level error carries the HTTP status the proxy answers
with; ``str(error)`` is the short text body the client sees, so it names the host
as the client spelled it and never anything of the host machine's but addresses.

EgressError              base of the errors a proxied request ends in; ``status``
├── BadRequest           400 (or 431): not a proxy request the proxy can parse
├── Denied               403: the policy or the address blocklist refuses the host
├── Refused              403: a credential's placeholder is headed for a host it may not reach
├── TooLarge             413: a body the proxy must read whole to inject into is too large
└── UpstreamFailed       502: the name does not resolve or the origin refuses or breaks
    └── UpstreamTimeout  504: resolving, connecting or the origin's answer took too long

InvalidPolicy            a ``networking`` config or host entry the policy cannot
                         enforce (a ``ValueError``; raised when building the policy)
"""

from __future__ import annotations


class EgressError(Exception):
    """Base of the errors that end one proxied request with an HTTP error response."""

    status: int = 500


class BadRequest(EgressError):
    status: int = 400

    def __init__(self, reason: str, *, status: int = 400) -> None:
        self.reason = reason
        # h11 hints 431 for an oversized head; anything else is a plain 400.
        self.status = status if status in (400, 431) else 400
        super().__init__(f"bad proxy request: {reason}")


class Denied(EgressError):
    status: int = 403

    def __init__(self, host: str, reason: str) -> None:
        self.host = host
        self.reason = reason
        super().__init__(f"egress to {host} denied: {reason}")


class Refused(EgressError):
    status: int = 403

    def __init__(self, host: str, credential_id: str) -> None:
        self.host = host
        self.credential_id = credential_id
        named = f" {credential_id}" if credential_id else ""
        super().__init__(
            f"egress to {host} refused: the request holds the placeholder of credential"
            f"{named}, which may not be sent to this host; it was not replaced"
        )


class TooLarge(EgressError):
    status: int = 413

    def __init__(self, host: str, limit: int) -> None:
        self.host = host
        super().__init__(
            f"egress to {host} refused: a request body into which credentials are "
            f"injected may be at most {limit} bytes"
        )


class UpstreamFailed(EgressError):
    status: int = 502

    def __init__(self, host: str, reason: str) -> None:
        self.host = host
        self.reason = reason
        super().__init__(f"{host}: {reason}")


class UpstreamTimeout(UpstreamFailed):
    status: int = 504


class InvalidPolicy(ValueError):
    """The ``networking`` config or a host entry cannot be enforced as written."""
