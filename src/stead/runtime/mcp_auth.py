"""Bearer tokens for MCP servers from a session's vaults (spec §4.8).

A server is authenticated by the first ``mcp_oauth`` or ``static_bearer``
credential, in ``vault_ids`` order, whose ``mcp_server_url`` is the server's
URL. An ``mcp_oauth`` token is refreshed shortly before it expires and after a
401, one refresh at a time per credential (a caller that waited for another's
refresh uses its token), and the new tokens are written back sealed, so every
session and the next process use them.

A token endpoint may rotate refresh tokens: once it answers, the stored refresh
token is spent, and only the answer's can refresh again. So a process that
could not store the answer (its key is not the database's) does not ask; and
an answer the store refused (a rotation since that check, the database away)
is kept in memory and stored by the next refresh of the credential instead of
asked for again. Each exchange is recorded as under way before it is asked
(``refresh_intents.py``): an answer lost with its process leaves that record,
and the next refresh reports the credential as needing re-authorisation
instead of presenting a refresh token that may be spent.
"""

from __future__ import annotations

import importlib
import logging
import sys
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from types import ModuleType
from typing import TYPE_CHECKING, Protocol
from urllib.parse import urlsplit

from anyio import CancelScope, to_thread

from stead.config import Settings
from stead.egress_policy import EgressPolicy, UpstreamTls
from stead.failpoints import FailPoints
from stead.jsonvalues import Json
from stead.runtime.bounded import Bounded
from stead.runtime.keyed_locks import KeyedLocks
from stead.runtime.refresh_intents import (
    RefreshInDoubt,
    RefreshIntents,
    RefreshMoved,
    RefreshUnderWay,
    settled,
)
from stead.store import (
    Conflict,
    CredentialRecord,
    DatabaseBusy,
    NotFound,
    StaleSecretKey,
    VaultStore,
)
from stead.vault import KEPT_KEY, SealError, SecretBox

if TYPE_CHECKING:
    from stead.tools.mcp import EgressRules, TokenGrant

log = logging.getLogger("stead.runtime.mcp")
MCP_MODULE = "stead.tools.mcp"
MCP_AUTH_TYPES = ("mcp_oauth", "static_bearer")
REFRESH_AHEAD = timedelta(seconds=60)
"""A token this close to its ``expires_at`` is refreshed before it is used."""
UNSTORED_KEPT = 1024
"""Credentials whose refreshed tokens the store refused, held until stored."""


async def load_mcp() -> ModuleType:
    """``stead.tools.mcp``. The mcp SDK costs a server about a second and 24 MB
    to import: it is loaded on first use, in a worker thread, not at start or
    on the event loop. Once loaded, every call finds it without a thread hop."""
    loaded = sys.modules.get(MCP_MODULE)
    if loaded is not None:
        return loaded
    return await to_thread.run_sync(importlib.import_module, MCP_MODULE)


UNRESTRICTED: Json = {"type": "unrestricted"}


class McpEgress:
    """The egress rules the brain's MCP and OAuth traffic keeps (the sandbox's
    address blocklist; for an MCP server, its session's environment's
    ``networking`` too: under ``limited`` the server's host must be in
    ``allowed_hosts`` or ``allow_mcp_servers`` must be true)."""

    def __init__(self, settings: Settings) -> None:
        self._settings = settings
        self._tls = UpstreamTls(settings.egress_extra_ca_file)

    def rules(self, mcp: ModuleType, networking: Json | None = None, url: str = "") -> EgressRules:
        """Rules for an MCP server at ``url`` under ``networking``; with neither,
        for an OAuth token endpoint (the blocklist alone). Raises
        ``InvalidPolicy`` for a malformed ``networking``."""
        host = urlsplit(url).hostname if url else None
        policy = EgressPolicy.from_config(
            networking or UNRESTRICTED, mcp_server_hosts=[host] if host else []
        )
        rules: EgressRules = mcp.EgressRules(
            policy,
            self._tls.context(),
            dict(self._settings.egress_hosts),
            self._settings.mcp_timeout_seconds,
        )
        return rules


class McpAuthFailed(Exception):
    """No usable token: none in the vaults, or a refresh that failed."""


class TokenStore(VaultStore, Protocol):
    """The vaults, and the id of the key the database's secrets are sealed
    under (``stead.vault.KEPT_KEY``)."""

    async def installation_value(self, name: str, value: bytes) -> bytes: ...


@dataclass(frozen=True, slots=True)
class Unstored:
    """A refresh's answer the store refused, and the refresh token it replaced."""

    used: str
    grant: TokenGrant

    def __repr__(self) -> str:
        return "Unstored(<hidden>)"


@dataclass(frozen=True, slots=True)
class ServerToken:
    credential: CredentialRecord | None
    """None: the session's vaults hold no credential for the server."""
    token: str | None

    def __repr__(self) -> str:
        found = None if self.credential is None else self.credential.id
        return f"ServerToken(credential={found!r}, token=<hidden>)"


def same_server(a: str, b: str) -> bool:
    return a.rstrip("/") == b.rstrip("/")


def _expires_soon(
    credential: CredentialRecord, now: datetime, ahead: timedelta = REFRESH_AHEAD
) -> bool:
    """Whether the credential's token expires within ``ahead`` (0: has expired)."""
    expires = credential.auth.get("expires_at")
    if not isinstance(expires, str):
        return False
    return datetime.fromisoformat(expires.replace("Z", "+00:00")) - now < ahead


class McpTokens:
    def __init__(
        self,
        store: TokenStore,
        box: SecretBox,
        egress: McpEgress,
        *,
        timeout: float,
        exclusive: bool = False,
        failpoints: FailPoints | None = None,
    ) -> None:
        """``exclusive``: this process is the store's only brain (SQLite)."""
        self._store = store
        self._box = box
        self._egress = egress
        self._timeout = timeout
        # Another brain's exchange is bounded by the timeout: twice that leaves
        # its write-back the time the database may take.
        under_way = timedelta(seconds=2 * timeout)
        self._intents = RefreshIntents(store, box, under_way, exclusive)
        self._failpoints = failpoints or FailPoints(None)
        self._refreshing = KeyedLocks()
        """By credential id: one refresh at a time."""
        self._unstored: Bounded[str, Unstored] = Bounded(UNSTORED_KEPT)
        """By credential id: an answer to write back before asking again."""

    async def token_for(self, workspace_id: str, vault_ids: list[str], url: str) -> ServerToken:
        """The token for the server at ``url``, refreshed first if it is about to expire."""
        found = await self._store.active_credentials(workspace_id, vault_ids)
        for credential in found:
            auth = credential.auth
            if auth["type"] in MCP_AUTH_TYPES and same_server(auth["mcp_server_url"], url):
                held = self._open(credential)
                if _expires_soon(credential, datetime.now(UTC)) and auth.get("refresh"):
                    return await self._refreshed_ahead(held, credential)
                return held
        return ServerToken(None, None)

    async def _refreshed_ahead(
        self, held: ServerToken, credential: CredentialRecord
    ) -> ServerToken:
        """``refreshed`` before the token expires; while a refresh fails, the
        token is used until it has expired (the server may still take it)."""
        try:
            return await self.refreshed(held)
        except McpAuthFailed as exc:
            if _expires_soon(credential, datetime.now(UTC), timedelta(0)):
                raise
            log.warning("%s; its token is used until it expires", exc)
            return held

    def _open(self, credential: CredentialRecord) -> ServerToken:
        try:
            secret = self._box.open(credential.id, credential.sealed)
        except SealError as exc:
            raise McpAuthFailed(f"credential {credential.id} cannot be opened: {exc}") from None
        token = secret.get("access_token") or secret.get("token")
        return ServerToken(credential, token if isinstance(token, str) else None)

    async def refreshed(self, held: ServerToken) -> ServerToken:
        """A new token for ``held``'s credential after ``held.token`` was refused
        or is expiring: the one another caller refreshed meanwhile, or one this
        call gets from the token endpoint. ``McpAuthFailed`` if there is none."""
        credential = held.credential
        if credential is None:
            raise McpAuthFailed("the session's vaults hold no credential for this MCP server")
        if credential.auth.get("refresh") is None:
            raise McpAuthFailed(
                f"credential {credential.id} was refused and has no refresh settings"
            )
        async with self._refreshing.hold(credential.id):
            # Read again as the session's vaults offer it: a credential deleted or
            # archived (or its vault archived) since is not refreshed.
            active = await self._store.active_credentials(
                credential.workspace_id, [credential.vault_id]
            )
            current = next((c for c in active if c.id == credential.id), None)
            if current is None:
                raise McpAuthFailed(f"credential {credential.id} was deleted or archived")
            now = self._open(current)
            if now.token != held.token and not _expires_soon(current, datetime.now(UTC)):
                return now  # refreshed by someone else while this call waited
            secret = self._box.open(current.id, current.sealed)
            used = secret.get("refresh_token")
            if not isinstance(used, str):
                raise McpAuthFailed(f"credential {credential.id} has no refresh token")
            kept = self._unstored.get(current.id)
            if kept is not None and kept.used == used:
                grant = kept.grant  # asked for already: the stored refresh token is spent
            else:
                try:
                    grant = await self._asked(current, secret, used)
                except RefreshMoved:  # another brain's refresh (or an update) stored it
                    return await self._current(current)
            updated = await self._write_back(current, used, grant)
            log.info("refreshed the access token of credential %s", credential.id)
            return ServerToken(updated, grant.access_token)

    async def _current(self, credential: CredentialRecord) -> ServerToken:
        active = await self._store.active_credentials(
            credential.workspace_id, [credential.vault_id]
        )
        current = next((c for c in active if c.id == credential.id), None)
        if current is None:
            raise McpAuthFailed(f"credential {credential.id} was deleted or archived")
        return self._open(current)

    async def _asked(
        self, current: CredentialRecord, secret: dict[str, object], used: str
    ) -> TokenGrant:
        """The token endpoint's answer, asked only when this process can store it
        (``_exchange``); ``RefreshMoved`` when ``used`` is no longer stored."""
        # Kept now, when the database kept none (as ``vault.kept_key_id`` does).
        kept = await self._store.installation_value(KEPT_KEY, self._box.key_id)
        if kept != self._box.key_id:  # the key was rotated while this process ran
            stale = StaleSecretKey(self._box.key_id, kept)
            log.error("the access token of credential %s was not refreshed: %s", current.id, stale)
            raise _unstorable(current)
        mcp = await load_mcp()
        try:
            return await self._exchange(mcp, current, secret, used)
        except (RefreshInDoubt, RefreshUnderWay) as exc:
            raise McpAuthFailed(str(exc)) from None
        except mcp.RefreshFailed as exc:
            message = f"refreshing credential {current.id} failed: {exc}"
            raise McpAuthFailed(message) from None
        except (NotFound, Conflict):  # deleted or archived since it was read
            raise McpAuthFailed(f"credential {current.id} was deleted or archived") from None
        except StaleSecretKey:  # the key was rotated since the check
            raise _unstorable(current) from None

    async def checked_exchange(
        self, mcp: ModuleType, credential: CredentialRecord, secret: dict[str, object]
    ) -> TokenGrant:
        """``_exchange`` of the credential's stored refresh token, one refresh of
        the credential at a time, for a caller that stores the answer itself
        (``write_back_grant``, which ends the intent) and reports the endpoint's
        ``mcp.RefreshFailed``: the credentials' validation."""
        async with self._refreshing.hold(credential.id):
            return await self._exchange(mcp, credential, secret, str(secret["refresh_token"]))

    async def _exchange(
        self, mcp: ModuleType, current: CredentialRecord, secret: dict[str, object], used: str
    ) -> TokenGrant:
        """The token endpoint's answer for ``used``, asked once its intent is
        committed; an exchange that ends with no answer ends the intent (shielded:
        a cancelled call is one this process saw end). Raises ``RefreshInDoubt``,
        ``RefreshUnderWay`` or ``RefreshMoved`` (nothing asked),
        ``mcp.RefreshFailed``, and the store's errors (``update_credential``'s);
        the caller holds the credential's refresh lock."""
        await self._intents.begin(current, used)
        try:
            grant: TokenGrant = await refresh_grant(
                mcp, current, secret, self._timeout, self._egress.rules(mcp)
            )
        except BaseException:
            with CancelScope(shield=True):
                await self._end(current, used)
            raise
        self._failpoints.hit("mcp.after_refresh")
        return grant

    async def _end(self, current: CredentialRecord, used: str) -> None:
        try:
            await self._intents.end(current, used)
        except (DatabaseBusy, NotFound, Conflict, StaleSecretKey) as exc:
            log.warning(
                "credential %s: the record of its refresh was not cleared (%s); its next "
                "refresh will ask for re-authorisation",
                current.id,
                exc,
            )

    async def _write_back(
        self, current: CredentialRecord, used: str, grant: TokenGrant
    ) -> CredentialRecord:
        """``write_back_grant``, or ``McpAuthFailed`` when the credential cannot take
        it. A grant the store refused for now is kept for the next refresh."""
        try:
            updated = await write_back_grant(self._store, self._box, current, used, grant)
        except (NotFound, Conflict):  # deleted or archived while the grant was asked for
            self._unstored.pop(current.id)
            raise McpAuthFailed(f"credential {current.id} was deleted or archived") from None
        except StaleSecretKey as exc:  # the key was rotated since the check
            self._unstored.put(current.id, Unstored(used, grant))
            log.error("the refreshed tokens of credential %s were not stored: %s", current.id, exc)
            raise _unstorable(current) from None
        except DatabaseBusy:
            self._unstored.put(current.id, Unstored(used, grant))
            raise
        self._unstored.pop(current.id)
        return updated


def _unstorable(credential: CredentialRecord) -> McpAuthFailed:
    return McpAuthFailed(
        f"refreshing credential {credential.id}: its new tokens cannot be stored, as this "
        "server's secret key is not the database's (the server must be restarted "
        "with the current STEAD_SECRET_KEY)"
    )


async def refresh_grant(
    mcp: ModuleType,
    credential: CredentialRecord,
    secret: dict[str, object],
    seconds: float,
    rules: EgressRules,
) -> TokenGrant:
    """The ``refresh_token`` grant for ``credential`` (raises ``mcp.RefreshFailed``)."""
    settings = credential.auth["refresh"]
    client_secret = secret.get("client_secret")
    grant: TokenGrant = await mcp.refresh_access_token(
        token_endpoint=settings["token_endpoint"],
        client_id=settings["client_id"],
        refresh_token=secret["refresh_token"],
        auth_method=settings["token_endpoint_auth"]["type"],
        client_secret=client_secret if isinstance(client_secret, str) else None,
        scope=settings.get("scope"),
        resource=settings.get("resource"),
        seconds=seconds,
        rules=rules,
    )
    return grant


async def write_back_grant(
    store: VaultStore, box: SecretBox, credential: CredentialRecord, used: str, grant: TokenGrant
) -> CredentialRecord:
    """Stores ``grant``'s tokens (sealed) and expiry, unless the refresh token
    ``used`` is no longer the stored one: another refresh won the race, and its
    tokens are the newer ones."""

    def change(current: CredentialRecord) -> dict[str, object]:
        stored = box.open(current.id, current.sealed)
        if stored.get("refresh_token") != used:
            return {}
        stored["access_token"] = grant.access_token
        if grant.refresh_token is not None:
            stored["refresh_token"] = grant.refresh_token
        settled(stored)  # in the commit that stores the answer
        expires = None if grant.expires_at is None else _ts(grant.expires_at)
        auth = {**current.auth, "expires_at": expires}
        return {"sealed": box.seal(current.id, stored), "auth": auth}

    return await store.update_credential(
        credential.workspace_id, credential.vault_id, credential.id, change
    )


def _ts(moment: datetime) -> str:
    return moment.astimezone(UTC).isoformat().replace("+00:00", "Z")
