"""What the toolbox holds of each session whose sandbox this process serves:
the session's record (``Served``) and the credentials given to its sandbox
(``ServedSecrets``). Both go when the sandbox is destroyed, by this process or
(``SandboxToolbox.forget``) by another one."""

from __future__ import annotations

from dataclasses import dataclass

import anyio

from stead.runtime.credentials import SessionCredentials
from stead.runtime.memory_mounts import MemorySession
from stead.sandbox import NoSandbox, SandboxConfig, SandboxProvider


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
