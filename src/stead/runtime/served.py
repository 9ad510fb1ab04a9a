"""What the toolbox holds of each session whose sandbox this process serves
(``HeldSandboxes``): the handle, the session's record (``Served``), the
credentials given to its sandbox (``ServedSecrets``), its staging. All of it
goes at once (``drop``) when the sandbox is destroyed, by this process or
(``SandboxToolbox.forget``) by another one: anything new held per sandbox
belongs here, so that nothing outlives it. Also what a session's owner is
shown of its sandbox (``SandboxView``)."""

from __future__ import annotations

from dataclasses import dataclass

import anyio

from stead.jsonvalues import Json
from stead.runtime.credentials import SessionCredentials
from stead.runtime.memory_mounts import MemorySession
from stead.sandbox import NoSandbox, Sandbox, SandboxConfig, SandboxProvider
from stead.store import SandboxLease


@dataclass(frozen=True, slots=True)
class SandboxView:
    """A session's sandbox as its owner sees it."""

    lease: SandboxLease | None
    """None until the session's first tool call or terminal."""
    host: Json | None
    """The sandbox host's status of it (``state``, ``idle_seconds``,
    ``processes``, ``terminals``, ``last_error``); None when the host holds no
    such sandbox (never made, or destroyed) or could not be asked."""
    active_seconds: float
    """Awake time, all wakes together."""
    error: str | None = None
    """Why the host could not be asked."""


@dataclass(frozen=True, slots=True)
class Served:
    """A session this process gave a sandbox: what its sandbox is made of and
    where its credentials come from (``vault_ids`` never change after create)."""

    session_id: str
    workspace_id: str
    vault_ids: tuple[str, ...]
    config: SandboxConfig
    memory: MemorySession


class ServedSecrets:
    """Which served sandboxes must get their credentials before their next use,
    and which hold some from this process (so an emptied set is sent too)."""

    def __init__(self, provider: SandboxProvider, credentials: SessionCredentials) -> None:
        self._provider = provider
        self._credentials = credentials
        self._stale: set[str] = set()
        self._held: set[str] = set()
        self._lock = anyio.Lock()
        """One push at a time: a set computed earlier never overtakes a later one."""

    def mark_stale(self, session_id: str) -> None:
        self._stale.add(session_id)

    def stale(self, session_id: str) -> bool:
        return session_id in self._stale

    async def give(self, served: Served) -> None:
        """Sends the session's vault credentials to its sandbox if they are stale.
        A session with none sends nothing, so providers that cannot hold any
        still serve it; one with some on such a provider gets ``NoSandbox``."""
        session_id = served.session_id
        async with self._lock:
            if session_id not in self._stale:
                return
            secrets = await self._credentials.egress_secrets(
                session_id, served.workspace_id, served.vault_ids
            )
            if secrets or session_id in self._held:
                try:
                    await self._provider.set_secrets(session_id, served.config, secrets)
                except NoSandbox as exc:
                    message = f"the session's credentials cannot be used: {exc}"
                    raise NoSandbox(message) from None
                self._held.add(session_id)
            self._stale.discard(session_id)

    def forget(self, session_id: str) -> None:
        """The session's sandbox is gone, and the credentials it held with it."""
        self._stale.discard(session_id)
        self._held.discard(session_id)


class HeldSandboxes:
    """By session id (a session's sandbox id is its session id)."""

    def __init__(self, provider: SandboxProvider, credentials: SessionCredentials) -> None:
        self.handles: dict[str, Sandbox] = {}
        self.served: dict[str, Served] = {}
        """Sessions this process gave a sandbox (tools or a terminal)."""
        self.secrets = ServedSecrets(provider, credentials)
        self.stale_mounts: set[str] = set()
        """Sessions served here whose sandbox is staged (``mounts.py``) before its
        next use (only those: any other is staged when it is first served)."""
        self.notes: dict[str, list[str]] = {}
        """What the agent must hear of its memories (a staging's write-back found
        a conflict), said at the end of its next call's result (``tell``)."""

    def tell(self, session_id: str, notes: list[str]) -> None:
        """Keeps ``notes`` for the session's next call, each once: every
        write-back (a turn's end, a staging, a call's) finds a change it cannot
        save again and says so again."""
        waiting = self.notes.setdefault(session_id, [])
        waiting += [note for note in dict.fromkeys(notes) if note not in waiting]

    def restage(self, session_id: str) -> None:
        """Stages the session's sandbox before its next use, if served here."""
        if session_id in self.served:
            self.stale_mounts.add(session_id)

    def moved(self, session_id: str) -> None:
        """The sandbox's calls go to another host now: it is acquired and staged
        again there (its handle here is for the host it left)."""
        self.handles.pop(session_id, None)
        self.restage(session_id)

    def drop(self, session_id: str) -> Sandbox | None:
        """Lets go of all of it; the handle, for the caller to close."""
        self.served.pop(session_id, None)
        self.secrets.forget(session_id)
        self.stale_mounts.discard(session_id)
        self.notes.pop(session_id, None)
        return self.handles.pop(session_id, None)
