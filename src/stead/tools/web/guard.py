"""A session's ``environment_variable`` vault credentials, as the web tools must
respect them. Web tools substitute nothing: a credential is injected only by
the sandbox's egress proxy, into requests made from the sandbox. So web tools
refuse a URL or query that holds a credential's placeholder (saying where such
a request belongs) or its value headed for a host the credential's
``networking`` does not allow, and scrub every value from what the model sees.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Sequence
from dataclasses import dataclass
from urllib.parse import quote

from stead.egress_policy import HostSet, InvalidPolicy, host_entry, normalize_host
from stead.sandbox import PLACEHOLDER_PREFIX, EnvironmentCredential
from stead.tools.outcome import ToolOutcome
from stead.tools.web.errors import WebError

_PLACEHOLDER = re.compile(re.escape(PLACEHOLDER_PREFIX) + r"[0-9a-f]{40}")
PLACEHOLDER_REFUSED = (
    "{what} holds a vault credential's placeholder. Web tools do not substitute "
    "credentials: make a request that needs one from the sandbox (with bash), "
    "whose egress proxy injects it for the hosts the credential allows"
)


@dataclass(frozen=True, slots=True, repr=False)
class _Value:
    credential_id: str
    forms: tuple[str, ...]
    """The value as written and percent-encoded."""
    hosts: HostSet | None
    """Where it may go; None: anywhere (``unrestricted``)."""


class CredentialGuard:
    """Built per call from the session's credentials; holds values, shows none."""

    def __init__(self, credentials: Sequence[EnvironmentCredential] = ()) -> None:
        self._values = tuple(_value(c) for c in credentials if c.value)

    def __repr__(self) -> str:
        return f"CredentialGuard({len(self._values)} credentials)"

    def check(self, text: str, host: str, what: str) -> None:
        """Raises ``WebError`` if ``text``, about to be sent to ``host``, holds a
        placeholder or a value that may not go there. Names the credential,
        never the value."""
        if _PLACEHOLDER.search(text):
            raise WebError(PLACEHOLDER_REFUSED.format(what=what))
        name = normalize_host(host)
        for value in self._values:
            if any(form in text for form in value.forms) and not (
                value.hosts is None or name in value.hosts
            ):
                raise WebError(
                    f"{what} holds the value of vault credential {value.credential_id}, "
                    f"which may not be sent to {host}; nothing was sent"
                )

    def scrub(self, outcome: ToolOutcome) -> ToolOutcome:
        """``outcome`` with every value in its text blocks replaced."""
        if not self._values:
            return outcome
        content = [
            {**block, "text": self._scrubbed(block["text"])}
            if block.get("type") == "text"
            else block
            for block in outcome.content
        ]
        return dataclasses.replace(outcome, content=content)

    def _scrubbed(self, text: str) -> str:
        for value in self._values:
            for form in value.forms:
                text = text.replace(form, f"[value of credential {value.credential_id}]")
        return text


def _value(credential: EnvironmentCredential) -> _Value:
    hosts = None
    if credential.allowed_hosts is not None:
        entries = []
        for i, raw in enumerate(credential.allowed_hosts):
            try:
                entries.append(host_entry(raw, f"allowed_hosts.{i}"))
            except InvalidPolicy:
                continue  # an entry the API let through but no one can match: fail closed
        hosts = HostSet(entries)
    forms = tuple(dict.fromkeys((credential.value, quote(credential.value, safe=""))))
    return _Value(credential.credential_id, forms, hosts)
