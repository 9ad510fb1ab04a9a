"""``WorkspaceStore``: workspaces, their API keys, the installation's secrets and
the integrity check ``stead db check`` runs (the narrow protocol and its
records; SQL in ``_workspaces.py`` and ``_integrity.py``)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Protocol


@dataclass(frozen=True, slots=True)
class Workspace:
    id: str
    name: str
    created_at: datetime


@dataclass(frozen=True, slots=True)
class ApiKey:
    id: str
    workspace_id: str
    name: str
    hint: str
    created_at: datetime
    revoked_at: datetime | None = None
    admin: bool = False
    """An operator's key: it may also use the admin routes."""


@dataclass(frozen=True, slots=True)
class IntegrityFinding:
    """One problem ``stead db check`` found: where, what (``repaired``: rewritten by this run)."""

    where: str
    problem: str
    repaired: bool = False

    def __str__(self) -> str:
        done = " (repaired)" if self.repaired else ""
        return f"{self.where}: {self.problem}{done}"


class WorkspaceStore(Protocol):
    async def create_workspace(self, name: str) -> Workspace: ...
    async def list_workspaces(self) -> list[Workspace]: ...
    async def create_api_key(
        self, workspace_id: str, name: str, *, admin: bool = False
    ) -> tuple[ApiKey, str]:
        """Returns the key record and the secret, which is never stored in clear."""
        ...

    async def new_workspace_key(
        self, workspace_name: str, key_name: str, *, admin: bool = False
    ) -> tuple[ApiKey, str]:
        """A new workspace and a key of it, made in one transaction: a key that
        cannot be made leaves no workspace behind."""
        ...

    async def authenticate(self, secret: str) -> ApiKey | None: ...
    async def count_api_keys(self) -> int: ...
    async def first_api_key(self, workspace_name: str, key_name: str) -> tuple[ApiKey, str] | None:
        """A new workspace and its key, when the store has no key at all (else
        None): checked and made in one transaction, so of several processes
        starting at once on one database only one makes them."""
        ...

    async def end_console_login(self, token_hash: str, expires_at: datetime) -> None:
        """Ends the console login of this token (by its SHA-256) for every
        process; kept until ``expires_at``, when the login ends anyway. Logouts
        already past theirs are dropped."""
        ...

    async def console_login_ended(self, token_hash: str) -> bool: ...
    async def list_api_keys(self) -> list[ApiKey]:
        """Every key of every workspace, revoked ones too, oldest first."""
        ...

    async def revoke_api_key(self, key_id: str) -> ApiKey:
        """The key stops authenticating (servers that verified it recently trust it
        for at most ``STEAD_AUTH_CACHE_SECONDS`` more). ``NotFound`` if unknown."""
        ...

    async def installation_secret(self, name: str) -> bytes:
        """32 random bytes kept for this installation under ``name`` (made on first use),
        the same for every process that opens the store."""
        ...

    async def installation_value(self, name: str, value: bytes) -> bytes:
        """The bytes kept for this installation under ``name``: ``value``, kept now,
        when nothing was; else what the first process to keep one kept."""
        ...

    async def replace_installation_value(self, name: str, value: bytes) -> None:
        """Keeps ``value`` under ``name`` in place of what was kept (if anything)."""
        ...

    async def check_integrity(self, repair: bool) -> list[IntegrityFinding]:
        """What ``stead db check`` reports; with ``repair``, unrenderable JSON is rewritten."""
        ...
