"""The egress proxy's own request errors, beside the shared ones of
``stead.egress_policy`` (``EgressError``, ``Denied``, ``UpstreamFailed``,
``UpstreamTimeout``, ``InvalidPolicy``). Each carries the HTTP status the proxy
answers with; ``str(error)`` is the short text body the client sees.

EgressError              (stead.egress_policy) base; ``status``
├── BadRequest           400 (or 431): not a proxy request the proxy can parse
├── Denied               403 (stead.egress_policy): the policy or the blocklist refuses the host
├── Refused              403: a credential's placeholder is headed for a host it may not reach
├── Unsendable           400: a credential's value a header cannot hold (a line break)
├── TooLarge             413: a body the proxy must read whole to inject into is too large
├── Crowded              503: the proxy holds as many such bodies at once as it may
└── UpstreamFailed       502 (stead.egress_policy), UpstreamTimeout 504
"""

from __future__ import annotations

from stead.egress_policy import EgressError


class BadRequest(EgressError):
    status: int = 400

    def __init__(self, reason: str, *, status: int = 400) -> None:
        self.reason = reason
        # h11 hints 431 for an oversized head; anything else is a plain 400.
        self.status = status if status in (400, 431) else 400
        super().__init__(f"bad proxy request: {reason}")


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


class Unsendable(EgressError):
    status: int = 400

    def __init__(self, host: str) -> None:
        self.host = host
        # Never the value, nor the HTTP library's message, which quotes it.
        super().__init__(
            f"egress to {host} refused: a credential's value cannot be put in this "
            "request's header (it holds a character a header may not: a line break, say)"
        )


class Crowded(EgressError):
    status: int = 503

    def __init__(self, host: str, limit: int) -> None:
        self.host = host
        super().__init__(
            f"egress to {host} refused for now: this sandbox's requests already hold "
            f"{limit} bytes of bodies into which credentials are injected; try again"
        )
