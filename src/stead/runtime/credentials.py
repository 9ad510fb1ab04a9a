"""A session's vault credentials, opened for its sandbox's egress proxy (rule 8).

Only ``environment_variable`` credentials go to the sandbox side: the sandbox
sees a placeholder, the proxy substitutes the value on the way out. MCP
credentials (``static_bearer``, ``mcp_oauth``) stay in the brain. Two
credentials with one ``secret_name`` in a session's vaults: the first vault in
``vault_ids`` wins, as an earlier entry on a PATH would.

The session's ``github_repository`` tokens join them as header credentials
for their repositories' paths (``repositories.py``).

A credential's placeholder is derived from an installation secret, the session
and the credential: a brain that restarts, or another brain on the same store,
gives the sandbox the placeholders its running processes already hold. It says
nothing of the value.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from stead.egress_policy import EgressPolicy, InvalidPolicy
from stead.jsonvalues import Json
from stead.runtime import repositories
from stead.sandbox import PLACEHOLDER_PREFIX, EgressSecret, EnvironmentCredential
from stead.store import SessionResourceStore, SessionStore, VaultStore, WorkspaceStore
from stead.vault import SealError, SecretBox

log = logging.getLogger("stead.runtime.credentials")
PLACEHOLDER_SECRET = "credential_placeholders"
"""The installation secret placeholders are derived from (made on first use)."""


def placeholder(key: bytes, session_id: str, credential_id: str, secret_name: str) -> str:
    message = f"{session_id}\0{credential_id}\0{secret_name}".encode()
    return PLACEHOLDER_PREFIX + hmac.new(key, message, hashlib.sha256).hexdigest()[:40]


@dataclass(frozen=True, slots=True)
class UnreachableCredential:
    """An ``environment_variable`` credential limited to hosts the session's
    environment does not let its sandbox reach (``credential_host_unreachable_error``)."""

    vault_id: str
    credential_id: str
    secret_name: str
    hosts: tuple[str, ...]


def _forbidden(policy: EgressPolicy, entry: str) -> bool:
    # A wildcard is reachable if a name under it is: the environment's own
    # wildcard, or a broader one, covers it.
    sample = "stead-check." + entry[2:] if entry.startswith("*.") else entry
    return not policy.allows_host(sample)


class CredentialsStore(VaultStore, WorkspaceStore, SessionStore, SessionResourceStore, Protocol):
    """What a session's credentials read: its vaults, its repository resources'
    tokens and the installation's placeholder secret."""


class SessionCredentials:
    def __init__(self, store: CredentialsStore, box: SecretBox) -> None:
        self._store = store
        self._box = box
        self._placeholder_key: bytes | None = None

    async def egress_secrets(
        self,
        session_id: str,
        workspace_id: str,
        vault_ids: Sequence[str],
        *,
        repositories_too: bool = True,
    ) -> list[EgressSecret]:
        """The session's credentials for its sandbox's egress proxy: its vaults'
        ``environment_variable`` ones and (``repositories_too``) its
        repositories' tokens."""
        secrets: list[EgressSecret] = []
        states = await self._store.repository_states(session_id) if repositories_too else []
        if states:
            held = (await self._store.session_snapshot(session_id)).resources
            secrets.extend(repositories.egress_credentials(self._box, held, states))
        if not vault_ids:
            return secrets
        found = await self._store.active_credentials(workspace_id, vault_ids)
        if self._placeholder_key is None:
            self._placeholder_key = await self._store.installation_secret(PLACEHOLDER_SECRET)
        key = self._placeholder_key
        named: set[str] = set()
        for credential in found:
            auth = credential.auth
            if auth["type"] != "environment_variable" or auth["secret_name"] in named:
                continue
            try:
                value = self._box.open(credential.id, credential.sealed)["secret_value"]
            except SealError as exc:
                # Not fatal for the session: its other credentials still work, and
                # the operator sees which one and why (never its value).
                log.error(
                    "credential %s of session %s is not used: %s", credential.id, session_id, exc
                )
                continue
            named.add(auth["secret_name"])
            networking = auth["networking"]
            secrets.append(
                EnvironmentCredential(
                    credential_id=credential.id,
                    secret_name=auth["secret_name"],
                    value=value,
                    allowed_hosts=tuple(networking["allowed_hosts"])
                    if networking["type"] == "limited"
                    else None,
                    header=auth["injection_location"]["header"],
                    body=auth["injection_location"]["body"],
                    placeholder=placeholder(key, session_id, credential.id, auth["secret_name"]),
                )
            )
        return secrets

    async def unreachable(
        self, workspace_id: str, vault_ids: Sequence[str], networking: Json
    ) -> list[UnreachableCredential]:
        """The session's ``environment_variable`` credentials whose ``limited``
        hosts its environment's ``networking`` forbids (some or all of them)."""
        if not vault_ids or networking.get("type") != "limited":
            return []
        try:
            policy = EgressPolicy.from_config(networking)
        except InvalidPolicy:
            return []  # the sandbox refuses to start and says why
        found: list[UnreachableCredential] = []
        for credential in await self._store.active_credentials(workspace_id, vault_ids):
            auth = credential.auth
            if auth["type"] != "environment_variable" or auth["networking"]["type"] != "limited":
                continue
            hosts = tuple(h for h in auth["networking"]["allowed_hosts"] if _forbidden(policy, h))
            if hosts:
                found.append(
                    UnreachableCredential(
                        credential.vault_id, credential.id, auth["secret_name"], hosts
                    )
                )
        return found
