"""Errors of the egress rules. ``str(error)`` is the short text a client or the
model sees, so it names the host as the client spelled it and never anything
of the machine's but addresses. ``status`` is the HTTP status the sandbox's
egress proxy answers with (the brain's web tools turn the text into a tool
error instead).

EgressError              base of the errors one outbound request ends in; ``status``
├── Denied               403: the policy or the address blocklist refuses the host
└── UpstreamFailed       502: the name does not resolve or the origin refuses or breaks
    └── UpstreamTimeout  504: resolving, connecting or the origin's answer took too long

InvalidPolicy            a ``networking`` config, host entry or domain list the
                         rules cannot enforce (a ``ValueError``; raised when
                         building a policy)

The sandbox host's proxy adds its own request errors under ``EgressError``
(``stead.sandbox_host.egress``).
"""

from __future__ import annotations


class EgressError(Exception):
    """Base of the errors that end one outbound request."""

    status: int = 500


class Denied(EgressError):
    status: int = 403

    def __init__(self, host: str, reason: str) -> None:
        self.host = host
        self.reason = reason
        super().__init__(f"egress to {host} denied: {reason}")


class UpstreamFailed(EgressError):
    status: int = 502

    def __init__(self, host: str, reason: str) -> None:
        self.host = host
        self.reason = reason
        super().__init__(f"{host}: {reason}")


class UpstreamTimeout(UpstreamFailed):
    status: int = 504


class InvalidPolicy(ValueError):
    """The ``networking`` config, a host entry or a domain list cannot be enforced
    as written."""
