"""The credentials one sandbox's egress proxy injects (DESIGN rule 8), and how.

Two kinds, both held in memory only and never shown by ``repr``:

* ``HeaderSecret``: a header set on every request over TLS for one host (or
  only on requests for some paths of it), replacing any the sandbox sent
  (``static_bearer``-style credentials, a repository's token); a plain-HTTP
  request gets none.
* ``PlaceholderSecret``: the sandbox holds an opaque placeholder (in an
  environment variable); the proxy replaces it with the value in a request's
  headers and/or body, and only for the hosts the credential allows. A
  placeholder headed anywhere else is never replaced: the request is refused.

``Secrets.for_host`` sorts them for one request's host into a ``HostSecrets``,
which does the work on that request's head and body.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from stead.egress_policy import HostSet, normalize_host
from stead.sandbox_host.egress.errors import Refused
from stead.sandbox_host.egress.scrub import Scrubber, ScrubRules

Headers = list[tuple[bytes, bytes]]


@dataclass(frozen=True, slots=True, repr=False)
class HeaderSecret:
    host: str
    """The host the header is set for: exactly, once both it and a request's
    host are spelled as ``normalize_host`` spells them (lower case, no trailing
    dot, an IP address without brackets in its canonical form)."""
    header: bytes
    """Lower-case header name."""
    value: bytes
    credential_id: str = ""
    paths: tuple[bytes, ...] = ()
    """Request paths it is set on, each with what lies below it; empty: all."""
    port: int = 443
    """The port a request must be for, as well as the host."""

    def __repr__(self) -> str:
        return f"HeaderSecret(host={self.host!r}, header={self.header!r}, value=<hidden>)"

    def applies(self, target: bytes) -> bool:
        """Whether a request for ``target`` (origin or absolute form) gets it."""
        if not self.paths:
            return True
        # A target never holds a fragment, so some origins read a ``#`` as a
        # character of the path (or, absolute-form, of the authority).
        if b"#" in target.split(b"?", 1)[0]:
            return False
        path = _path(target)
        if not _plain_path(path):
            return False
        return any(path == p or path.startswith(p.rstrip(b"/") + b"/") for p in self.paths)


def _path(target: bytes) -> bytes:
    """The path of a request target, without its query (an absolute-form
    target, ``https://host/path``, loses its scheme and authority)."""
    # The query goes first: in ``https://host?x=/o/r`` the path is ``/``, not ``/o/r``.
    target = target.split(b"?", 1)[0]
    if not target.startswith(b"/"):
        scheme = target.find(b"://")
        slash = target.find(b"/", scheme + 3) if scheme >= 0 else -1
        target = target[slash:] if slash >= 0 else b"/"
    return target


def _plain_path(path: bytes) -> bool:
    """Whether every origin reads ``path`` as the segments it shows. Origins
    differ in what they resolve before routing, so a path that one of them
    could read as another place gets no scoped credential: escapes (``%2e%2e``,
    ``%2f``, ``%5c``), a backslash (a separator to some), an empty segment
    (``//``) and a segment that is only dots (``..``), once its ``;``
    parameters are dropped (``..;``, which Tomcat resolves as ``..``)."""
    if b"%" in path or b"\\" in path:
        return False
    *inner, last = (segment.split(b";", 1)[0] for segment in path.split(b"/")[1:])
    return all(s.strip(b".") for s in inner) and (not last or bool(last.strip(b".")))


@dataclass(frozen=True, slots=True, repr=False)
class PlaceholderSecret:
    credential_id: str
    placeholder: bytes
    value: bytes
    hosts: HostSet | None
    """Where the value may go; None: wherever the environment allows."""
    header: bool = True
    body: bool = True

    def __repr__(self) -> str:
        return f"PlaceholderSecret(credential_id={self.credential_id!r}, value=<hidden>)"

    def allows(self, host: str) -> bool:
        return self.hosts is None or normalize_host(host) in self.hosts


class Secrets:
    """Every credential of one sandbox; immutable, replaced as a whole."""

    def __init__(
        self,
        headers: Iterable[HeaderSecret] = (),
        placeholders: Iterable[PlaceholderSecret] = (),
    ) -> None:
        self._headers: dict[str, list[HeaderSecret]] = {}
        for secret in headers:
            self._headers.setdefault(normalize_host(secret.host), []).append(secret)
        self._placeholders = tuple(placeholders)
        self._rules: dict[frozenset[tuple[bytes, bytes]], ScrubRules] = {}
        """Scrubbing rules by the values they hide, made once, not per request:
        as many as the credentials make distinct sets, whatever hosts the
        sandbox asks for; dropped with the rest when the set is replaced."""

    def __repr__(self) -> str:
        count = sum(map(len, self._headers.values())) + len(self._placeholders)
        return f"Secrets({count} credentials)"

    def for_host(self, host: str, port: int, *, tls: bool = True) -> HostSecrets:
        """What applies to a request for ``host`` on ``port``. A header (a
        repository's token, for an ``https`` URL) is set only on a request for
        its own port that the proxy sends over TLS (``tls``), never on plain
        HTTP, where it would cross the network in clear text, to whatever
        listens on the port asked for."""
        headers = self._headers.get(normalize_host(host), []) if tls else []
        found = HostSecrets([s for s in headers if s.port == port])
        for secret in self._placeholders:
            if not secret.allows(host):
                found.forbidden.append(secret)
                continue
            if secret.header:
                found.in_headers.append(secret)
            if secret.body:
                found.in_body.append(secret)
        hidden = found.hidden()
        if hidden:
            key = frozenset(hidden.items())
            if key not in self._rules:
                self._rules[key] = ScrubRules(hidden)
            found.rules = self._rules[key]
        return found


@dataclass(slots=True, repr=False)
class HostSecrets:
    """The credentials for one request's host, and the ids of those it used."""

    set_headers: Sequence[HeaderSecret]
    in_headers: list[PlaceholderSecret] = field(default_factory=list)
    in_body: list[PlaceholderSecret] = field(default_factory=list)
    forbidden: list[PlaceholderSecret] = field(default_factory=list)
    used: set[str] = field(default_factory=set)
    rules: ScrubRules | None = None
    """How ``hidden`` shows in an answer; None: nothing to hide."""

    @property
    def rewrites_body(self) -> bool:
        """Whether the body must be read whole to replace placeholders in it."""
        return bool(self.in_body)

    @property
    def scans_body(self) -> bool:
        """Whether a streamed body must be watched for forbidden placeholders."""
        return bool(self.forbidden)

    def longest_placeholder(self) -> int:
        return max((len(s.placeholder) for s in self.forbidden), default=0)

    def check_head(self, target: bytes, headers: Headers, host: str) -> None:
        """``Refused`` if the target or a header holds a placeholder that may not
        go to ``host``."""
        self.check(target, host)
        for _, value in headers:
            self.check(value, host)

    def head(self, target: bytes, headers: Headers, host: str) -> Headers:
        """``headers`` with the host's headers set and placeholders replaced;
        raises ``Refused`` as ``check_head`` does (for the headers it keeps)."""
        setting: dict[bytes, HeaderSecret] = {}
        for given in self.set_headers:  # one value per header: the first that applies
            if given.applies(target):
                setting.setdefault(given.header, given)
        kept = [(name, value) for name, value in headers if name not in setting]
        self.check_head(target, kept, host)
        out: Headers = []
        for name, value in kept:
            for secret in self.in_headers:
                if secret.placeholder in value:
                    value = value.replace(secret.placeholder, secret.value)
                    self.used.add(secret.credential_id)
            out.append((name, value))
        for header in setting.values():
            out.append((header.header, header.value))
            self.used.add(header.credential_id)
        return out

    def body(self, data: bytes, host: str) -> bytes:
        """A whole body with placeholders replaced; ``Refused`` as ``head``."""
        self.check(data, host)
        for secret in self.in_body:
            if secret.placeholder in data:
                data = data.replace(secret.placeholder, secret.value)
                self.used.add(secret.credential_id)
        return data

    def check(self, data: bytes, host: str) -> None:
        for secret in self.forbidden:
            if secret.placeholder in data:
                raise Refused(host, secret.credential_id)

    def hidden(self) -> dict[bytes, bytes]:
        """This host's secret values, each with what the sandbox sees instead."""
        pairs = {s.value: s.placeholder for s in (*self.in_headers, *self.in_body)}
        for header in self.set_headers:
            shown = header.credential_id or "credential"
            pairs.setdefault(header.value, f"[{shown} hidden by stead]".encode())
        return {value: shown for value, shown in pairs.items() if value}

    def scrubber(self) -> Scrubber | None:
        """What hides this host's secrets in its answers (an origin that echoes a
        request back must not carry a value into the sandbox, ``scrub.py``);
        None: none to hide."""
        return Scrubber(self.rules) if self.rules is not None else None


def credential_ids(used: Iterable[str]) -> tuple[str, ...]:
    """The non-empty ids of the credentials a request used, in a stable order."""
    return tuple(sorted(i for i in used if i))
