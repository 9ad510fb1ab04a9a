"""The sandbox-provider seam: where sessions' sandboxes live.

The brain chooses one provider at start (``providers.open_provider``) and
never asks which it is: the sandbox host (isolated, ``host.py``),
``unsafe_local`` (no isolation, in-process) and ``off`` (no built-in tools)
sit behind this interface, and later remote ones (Kubernetes agent-sandbox,
E2B) plug in here. Every provider passes the conformance suite in
``tests/unit/test_sandbox_providers.py``; ``stead.testing.MemoryProvider`` is
the in-memory fake that passes it too.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from stead.jsonvalues import Json
from stead.sandbox.base import Sandbox
from stead.sandbox.config import SandboxConfig
from stead.sandbox.mounts import SandboxMounts
from stead.sandbox.terminals import Terminal, TerminalRequest


@dataclass(frozen=True, slots=True)
class EgressCredential:
    """A credential the sandbox's egress proxy may add to requests for ``host``
    (rule 8). Travels only through ``SandboxProvider.set_secrets``: never in a
    ``SandboxConfig``, never written to disk by the host."""

    host: str
    """The host name requests must be for (matched exactly, lower case)."""
    header: str
    """The header the proxy sets, for example ``authorization``."""
    value: str
    credential_id: str = ""
    """Named in the egress audit log when the proxy sets it (never the value)."""
    paths: tuple[str, ...] = ()
    """Request paths (each with what lies below it) the header is set on; empty:
    every request for ``host``. A repository's token goes to that repository only."""
    port: int = 443
    """The port requests must be for: a token for ``https://git.example.com:8443``
    is not sent to another service of the same host."""

    def __repr__(self) -> str:  # never the value, in any traceback or log line
        return f"EgressCredential(host={self.host!r}, header={self.header!r}, value=<hidden>)"


PLACEHOLDER_PREFIX = "stead_placeholder_"
"""How every placeholder of an ``EnvironmentCredential`` starts (then 40 random
hex digits), so code outside the egress proxy can tell one when it sees it."""


@dataclass(frozen=True, slots=True)
class EnvironmentCredential:
    """An ``environment_variable`` vault credential (spec §4.8): the sandbox sees
    ``secret_name`` as an environment variable holding an opaque placeholder,
    and the egress proxy replaces the placeholder with ``value`` in requests to
    ``allowed_hosts`` (``*.`` wildcards; None: wherever the environment allows),
    in headers when ``header``, in bodies when ``body``. A placeholder headed for
    any other host is never replaced: the request is refused. Travels like an
    ``EgressCredential``."""

    credential_id: str
    secret_name: str
    value: str
    allowed_hosts: tuple[str, ...] | None = None
    header: bool = True
    body: bool = True
    placeholder: str | None = None
    """What the sandbox sees instead of ``value``: the same for the session's
    sandbox from every brain process (processes started earlier keep it in
    their environment). None: the provider makes a random one and keeps it
    while the credential stays in the sandbox's set."""

    def __repr__(self) -> str:  # never the value, in any traceback or log line
        return (
            f"EnvironmentCredential(credential_id={self.credential_id!r}, "
            f"secret_name={self.secret_name!r}, value=<hidden>)"
        )


EgressSecret = EgressCredential | EnvironmentCredential
"""Either kind of credential ``set_secrets`` takes."""


@dataclass(frozen=True, slots=True)
class HostIdentity:
    """A sandbox host as other processes know it."""

    host_id: str
    """Its identity, kept in its state directory across restarts."""
    address: str | None
    """``tcp://host:port`` where other processes reach it; None: they cannot."""


@dataclass(frozen=True, slots=True)
class Placement:
    """Where a sandbox lives, as its lease records it."""

    host: HostIdentity
    number: int
    """How many times the sandbox was placed on a host; every call carries it."""


class SandboxProvider(Protocol):
    @property
    def leased(self) -> bool:
        """Sandboxes outlive this process and are bound by leases (rule 9): the
        brain renews a lease on every use and the sweeper destroys expired ones."""
        ...

    async def home(self) -> HostIdentity | None:
        """The sandbox host this process puts sandboxes on; None when this
        provider's sandboxes live in no host (they are never placed).
        ``SandboxUnavailable`` when that host cannot be asked."""
        ...

    def place(self, sandbox_id: str, placement: Placement | None) -> bool:
        """Sends every later call for the sandbox to the host of ``placement``
        (None: this process's own host); True when that changes where calls
        go, so a ``Sandbox`` acquired before must be acquired again."""
        ...

    async def acquire(self, sandbox_id: str, config: SandboxConfig) -> Sandbox:
        """The sandbox of this id, made if new; idempotent. It need not be awake:
        its first call wakes it. Raises ``NoSandbox`` when this provider gives
        none."""
        ...

    async def status(self, sandbox_id: str) -> Json | None:
        """Its state (``state``, ``idle_seconds``, ``active_seconds``,
        ``processes``, ``terminals``, ``last_error``) without making or waking
        it; None if there is no such sandbox."""
        ...

    async def terminal(
        self, sandbox_id: str, config: SandboxConfig, request: TerminalRequest
    ) -> Terminal:
        """Attaches to a terminal (started if new, waking the sandbox); raises
        ``NoSandbox`` if this provider has no terminals."""
        ...

    async def set_secrets(
        self, sandbox_id: str, config: SandboxConfig, secrets: Sequence[EgressSecret]
    ) -> None:
        """Replaces the credentials the sandbox's egress proxy may inject; they
        are held in memory only and sent again whenever the sandbox's host
        lost them. An ``EnvironmentCredential`` keeps its placeholder while it
        stays in the set, so processes already running keep a valid one.
        Raises ``NoSandbox`` if this provider cannot keep them out of the
        sandbox."""
        ...

    async def egress_audit(self, sandbox_id: str, after: int, limit: int) -> Json | None:
        """``{"entries": [...], "last_seq": n}``: the requests the sandbox's egress
        proxy handled after entry ``after`` (host, method, status, bytes each way,
        the credential ids it injected; never a value), oldest first, at most
        ``limit``. None when the provider keeps no such log or has no such
        sandbox. Never acquires or wakes the sandbox."""
        ...

    def mounts(self) -> SandboxMounts | None:
        """Puts API content under ``/mnt`` in its sandboxes (``mounts.py``); None
        when this provider cannot, and sessions that need mounts are refused."""
        ...

    async def release(self, sandbox_id: str, *, erase: bool = False) -> float | None:
        """Destroys the sandbox (a durable provider snapshots it first); its
        active seconds, or None if there was no such sandbox. ``erase``: its
        session is gone, so nothing of it is kept: no snapshot, and a durable
        provider deletes those it took before; acquired again, it starts empty."""
        ...

    def forget(self, sandbox_id: str) -> None:
        """Drops what this process holds for the sandbox (where it is, its
        credentials) and asks nothing of any host: another process destroyed
        it. The sandbox's next acquire starts from nothing here."""
        ...

    async def aclose(self) -> None: ...
