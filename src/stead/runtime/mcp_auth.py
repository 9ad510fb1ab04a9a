"""Bearer tokens for MCP servers from a session's vaults (spec §4.8).

A server is authenticated by the first ``mcp_oauth`` or ``static_bearer``
credential, in ``vault_ids`` order, whose ``mcp_server_url`` is the server's
URL. An ``mcp_oauth`` token is refreshed shortly before it expires and after a
401, one refresh at a time per credential (a caller that waited for another's
refresh uses its token), and the new tokens are written back sealed, so every
session and the next process use them.
"""

from __future__ import annotations

import importlib
import logging
import sys
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from types import ModuleType
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from anyio import to_thread

from stead.config import Settings
from stead.egress_policy import EgressPolicy, UpstreamTls
from stead.jsonvalues import Json
from stead.runtime.keyed_locks import KeyedLocks
from stead.store import Conflict, CredentialRecord, NotFound, StaleSecretKey, VaultStore
from stead.vault import SealError, SecretBox

if TYPE_CHECKING:
    from stead.tools.mcp import EgressRules, TokenGrant

log = logging.getLogger("stead.runtime.mcp")
MCP_MODULE = "stead.tools.mcp"
MCP_AUTH_TYPES = ("mcp_oauth", "static_bearer")
REFRESH_AHEAD = timedelta(seconds=60)
"""A token this close to its ``expires_at`` is refreshed before it is used."""


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
        self, store: VaultStore, box: SecretBox, egress: McpEgress, *, timeout: float
    ) -> None:
        self._store = store
        self._box = box
        self._egress = egress
        self._timeout = timeout
        self._refreshing = KeyedLocks()
        """By credential id: one refresh at a time."""

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
            if "refresh_token" not in secret:
                raise McpAuthFailed(f"credential {credential.id} has no refresh token")
            mcp = await load_mcp()
            try:
                rules = self._egress.rules(mcp)
                grant = await refresh_grant(mcp, current, secret, self._timeout, rules)
            except mcp.RefreshFailed as exc:
                message = f"refreshing credential {credential.id} failed: {exc}"
                raise McpAuthFailed(message) from None
            updated = await self._write_back(current, secret["refresh_token"], grant)
            log.info("refreshed the access token of credential %s", credential.id)
            return ServerToken(updated, grant.access_token)

    async def _write_back(
        self, current: CredentialRecord, used: str, grant: TokenGrant
    ) -> CredentialRecord:
        """``write_back_grant``, or ``McpAuthFailed`` when the credential cannot take it."""
        try:
            return await write_back_grant(self._store, self._box, current, used, grant)
        except (NotFound, Conflict):  # deleted or archived while the grant was asked for
            raise McpAuthFailed(f"credential {current.id} was deleted or archived") from None
        except StaleSecretKey as exc:  # the key was rotated while this process ran
            log.error("the refreshed tokens of credential %s were not stored: %s", current.id, exc)
            raise McpAuthFailed(
                f"refreshing credential {current.id}: its new tokens cannot be stored, as this "
                "server's secret key is not the database's (the server must be restarted "
                "with the current STEAD_SECRET_KEY)"
            ) from None


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
        expires = None if grant.expires_at is None else _ts(grant.expires_at)
        auth = {**current.auth, "expires_at": expires}
        return {"sealed": box.seal(current.id, stored), "auth": auth}

    return await store.update_credential(
        credential.workspace_id, credential.vault_id, credential.id, change
    )


def _ts(moment: datetime) -> str:
    return moment.astimezone(UTC).isoformat().replace("+00:00", "Z")
