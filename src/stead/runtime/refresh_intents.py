"""The record of an MCP OAuth refresh under way, kept sealed in its credential,
so that a refresh whose answer died with its process is known for one.

A token endpoint may rotate refresh tokens: once it answers, the stored refresh
token is spent, and only the answer's can refresh again. The intent (which
refresh token is being exchanged, by which process, since when) is committed
before the endpoint is asked (``RefreshIntents.begin``). It goes in the commit
that stores the answer (``settled``, in ``write_back_grant``), or, when the
process saw the exchange end without an answer (the endpoint refused, could
not be reached or did not answer in time; the call was cancelled), in one of
its own (``RefreshIntents.end``), as before intents: that process asks again.

One left behind was left by a process that ended mid-exchange: whether the
endpoint took the refresh token is unknown, so it is not presented again
(``RefreshInDoubt``): an endpoint that detects the reuse of a rotated refresh
token revokes the grant it belongs to (RFC 9700 §4.14.2), access token too, and
the answer that held its successor is lost anyway. The credential needs
re-authorising; a new refresh token (``credentials.update``) ends the doubt,
as the intent names the token it was for (by digest, never the token).
"""

from __future__ import annotations

import hashlib
import os
import secrets
import socket
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from stead.jsonvalues import Json
from stead.store import CredentialRecord, VaultStore
from stead.vault import SecretBox

IN_FLIGHT = "refresh_in_flight"
"""The sealed secret's field for the intent: ``{"digest", "owner", "started_at"}``."""


class RefreshInDoubt(Exception):
    """A refresh of the same refresh token was cut off by the end of its process."""


class RefreshUnderWay(Exception):
    """Another process is refreshing the credential now (a shared store)."""


class RefreshMoved(Exception):
    """The stored refresh token is no longer the one read: a refresh (or an
    update) stored another since."""


def _digest(refresh_token: str) -> str:
    return hashlib.sha256(refresh_token.encode()).hexdigest()


def _process_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(6)}"


def _now() -> datetime:
    return datetime.now(UTC)


def settled(stored: Json) -> None:
    """Drops the intent from a secret whose refresh is over (its answer stored)."""
    stored.pop(IN_FLIGHT, None)


@dataclass(frozen=True, slots=True)
class RefreshIntents:
    """``exclusive``: this process is the store's only brain (SQLite), so an
    intent of another process is one a dead process left. On a shared store one
    younger than ``under_way_for`` may be another brain's exchange under way."""

    store: VaultStore
    box: SecretBox
    under_way_for: timedelta
    exclusive: bool = False
    owner: str = field(default_factory=_process_id)
    clock: Callable[[], datetime] = _now

    async def begin(self, credential: CredentialRecord, used: str) -> None:
        """Commits the intent to exchange ``used``, the credential's stored
        refresh token. Raises ``RefreshInDoubt`` or ``RefreshUnderWay`` when an
        intent for ``used`` is there already (this process holds the
        credential's refresh lock, so one of its own is as much in doubt),
        ``RefreshMoved`` when ``used`` is no longer stored, and what
        ``update_credential`` raises."""
        mark = _digest(used)

        def change(current: CredentialRecord) -> dict[str, object]:
            stored = self.box.open(current.id, current.sealed)
            if stored.get("refresh_token") != used:
                raise RefreshMoved(current.id)
            found = stored.get(IN_FLIGHT)
            now = self.clock()
            if isinstance(found, dict) and found.get("digest") == mark:
                self._refuse(current.id, found, now)
            stored[IN_FLIGHT] = {"digest": mark, "owner": self.owner, "started_at": now.isoformat()}
            return {"sealed": self.box.seal(current.id, stored)}

        await self.store.update_credential(
            credential.workspace_id, credential.vault_id, credential.id, change
        )

    def _refuse(self, credential_id: str, found: Json, now: datetime) -> None:
        started = found.get("started_at")
        if self._elsewhere_now(found.get("owner"), started, now):
            raise RefreshUnderWay(
                f"credential {credential_id} is being refreshed by another stead "
                "process; its new token is used once stored"
            )
        raise RefreshInDoubt(
            f"credential {credential_id} needs re-authorising: a refresh of its token was cut "
            f"off (its stead process ended after asking the token endpoint, at {started}, "
            "before it stored the answer), so its refresh token may have been spent and is "
            "not presented again. Update the credential with new tokens "
            "(vaults.credentials.update: auth.refresh.refresh_token)"
        )

    def _elsewhere_now(self, owner: object, started: object, now: datetime) -> bool:
        """Whether an intent of ``owner`` begun at ``started`` may be another
        brain's exchange under way (never one of this process: it holds the
        credential's lock, so its own intent is one it did not end)."""
        if self.exclusive or owner == self.owner or not isinstance(started, str):
            return False
        return now - datetime.fromisoformat(started) < self.under_way_for

    async def end(self, credential: CredentialRecord, used: str) -> None:
        """Drops this process's intent for ``used`` after an exchange it saw end
        with no answer to store. Raises what ``update_credential`` raises; a
        failure leaves the intent, which the next refresh takes for one in
        doubt (safe, if cautious)."""
        mark = _digest(used)

        def change(current: CredentialRecord) -> dict[str, object]:
            stored = self.box.open(current.id, current.sealed)
            found = stored.get(IN_FLIGHT)
            if not isinstance(found, dict) or found.get("digest") != mark:
                return {}
            if found.get("owner") != self.owner:
                return {}
            settled(stored)
            return {"sealed": self.box.seal(current.id, stored)}

        await self.store.update_credential(
            credential.workspace_id, credential.vault_id, credential.id, change
        )
