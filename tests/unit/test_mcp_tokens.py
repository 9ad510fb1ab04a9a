"""MCP bearer tokens from vault credentials (``runtime/mcp_auth.py``) on a real
SQLite store and a real OAuth token endpoint on loopback (which rotates refresh
tokens: each is taken once): concurrent callers share one refresh, a caller
that waited uses the winner's token, an expiring token is refreshed before use,
a refresh by a process whose key is no longer the database's fails the call
without spending the refresh token, tokens the store did not take are
stored by the next attempt instead of asked for again, and a refresh token
whose exchange a process's end cut off is not presented again."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import anyio
import pytest

from stead.config import Settings
from stead.ids import new_id
from stead.runtime.mcp_auth import McpAuthFailed, McpEgress, McpTokens, ServerToken
from stead.runtime.refresh_intents import RefreshIntents
from stead.store import CredentialRecord, DatabaseBusy, SqlStore, StaleSecretKey
from stead.testing.mcp_server import MCP_TEST_PIN, FakeMcpServer
from stead.vault import KEPT_KEY, SecretBox
from stead.vault.cipher import key_id
from stead.vault.keys import new_key

pytestmark = pytest.mark.anyio


@pytest.fixture(scope="module")
def mcp() -> Iterator[FakeMcpServer]:
    server = FakeMcpServer().start()
    yield server
    server.stop()


async def _tokens(
    store: SqlStore, mcp: FakeMcpServer, expires_at: datetime | None
) -> tuple[McpTokens, SecretBox, str, str]:
    """(tokens, box, workspace id, vault id) with one mcp_oauth credential whose
    access token the server has revoked."""
    box = SecretBox(new_key())
    workspace = await store.create_workspace("w")
    vault = await store.create_vault(workspace.id, "v", {})
    stale = mcp.issue_token()
    mcp.revoke(stale)
    credential_id = new_id("credential")
    auth = {
        "type": "mcp_oauth",
        "mcp_server_url": mcp.url,
        "expires_at": None if expires_at is None else expires_at.isoformat(),
        "refresh": {
            "client_id": mcp.client.client_id,
            "token_endpoint": mcp.token_url,
            "token_endpoint_auth": {"type": "none"},
        },
    }
    secret = {"access_token": stale, "refresh_token": mcp.issue_refresh_token()}
    await store.create_credential(
        workspace.id, vault.id, credential_id, None, {}, auth, box.seal(credential_id, secret)
    )
    egress = McpEgress(Settings(egress_hosts=MCP_TEST_PIN))
    return McpTokens(store, box, egress, timeout=10.0), box, workspace.id, vault.id


async def test_concurrent_refreshes_of_one_credential_make_one_request(
    store: SqlStore, mcp: FakeMcpServer
) -> None:
    tokens, _, workspace_id, vault_id = await _tokens(store, mcp, None)
    held = await tokens.token_for(workspace_id, [vault_id], mcp.url)
    before = mcp.refreshes
    got: list[ServerToken] = []

    async def refresh() -> None:
        got.append(await tokens.refreshed(held))

    async with anyio.create_task_group() as group:
        for _ in range(5):
            group.start_soon(refresh)
    assert mcp.refreshes == before + 1
    assert len({t.token for t in got}) == 1 and got[0].token != held.token
    again = await tokens.token_for(workspace_id, [vault_id], mcp.url.rstrip("/"))
    assert again.token == got[0].token  # written back, and the URL matched without its slash


async def test_a_token_about_to_expire_is_refreshed_before_use(
    store: SqlStore, mcp: FakeMcpServer
) -> None:
    soon = datetime.now(UTC) + timedelta(seconds=20)
    tokens, _, workspace_id, vault_id = await _tokens(store, mcp, soon)
    before = mcp.refreshes
    held = await tokens.token_for(workspace_id, [vault_id], mcp.url)
    assert mcp.refreshes == before + 1
    assert held.credential is not None and held.credential.auth["expires_at"] > soon.isoformat()


async def test_a_refused_refresh_says_so_without_the_tokens(
    store: SqlStore, mcp: FakeMcpServer
) -> None:
    tokens, box, workspace_id, vault_id = await _tokens(store, mcp, None)
    held = await tokens.token_for(workspace_id, [vault_id], mcp.url)
    assert held.credential is not None
    await tokens.refreshed(held)
    # The endpoint rotates refresh tokens: the one ``held`` came with is spent.
    # A caller still holding the old access token after the credential's
    # refresh token was swapped for one the endpoint never issued is refused.
    await store.update_credential(
        workspace_id,
        vault_id,
        held.credential.id,
        lambda current: {
            "sealed": box.seal(current.id, {"access_token": "old", "refresh_token": "unknown"})
        },
    )
    with pytest.raises(McpAuthFailed) as failed:
        await tokens.refreshed(ServerToken(held.credential, "old"))
    assert "unknown" not in str(failed.value) and "HTTP 400" in str(failed.value)


@pytest.mark.parametrize("ended", ["deleted", "archived", "vault archived"])
async def test_a_credential_gone_since_the_call_began_is_not_refreshed(
    store: SqlStore, mcp: FakeMcpServer, ended: str
) -> None:
    """Refused by the server after its credential was deleted or archived: an
    authentication failure for the call, with no refresh made (before, the
    store's error ended the run, which was retried as if it had crashed)."""
    tokens, _, workspace_id, vault_id = await _tokens(store, mcp, None)
    held = await tokens.token_for(workspace_id, [vault_id], mcp.url)
    assert held.credential is not None
    if ended == "deleted":
        await store.delete_credential(workspace_id, vault_id, held.credential.id)
    elif ended == "archived":
        await store.archive_credential(workspace_id, vault_id, held.credential.id)
    else:
        await store.archive_vault(workspace_id, vault_id)
    before = mcp.refreshes
    with pytest.raises(McpAuthFailed, match="deleted or archived"):
        await tokens.refreshed(held)
    assert mcp.refreshes == before


async def test_a_refresh_under_a_key_the_database_no_longer_keeps_spends_nothing(
    store: SqlStore, mcp: FakeMcpServer, caplog: pytest.LogCaptureFixture
) -> None:
    """A rotation moved the database's key while this process ran on the old one:
    the call fails saying why, logged once, and the token endpoint is not asked.
    Before, it was: the endpoint rotated the refresh token, the new one could
    not be stored, and the stored one was spent, so once a server ran on the
    right key every refresh of the credential was refused (HTTP 400) until its
    user authorised stead again."""
    tokens, box, workspace_id, vault_id = await _tokens(store, mcp, None)
    held = await tokens.token_for(workspace_id, [vault_id], mcp.url)
    assert held.credential is not None and held.token is not None
    await store.replace_installation_value(KEPT_KEY, key_id(new_key()))
    before = mcp.refreshes
    with caplog.at_level(logging.INFO, "stead.runtime.mcp"), pytest.raises(McpAuthFailed) as failed:
        await tokens.refreshed(held)
    assert "this server's secret key is not the database's" in str(failed.value)
    assert "STEAD_SECRET_KEY" in str(failed.value)
    [logged] = [r.getMessage() for r in caplog.records]
    assert "not refreshed" in logged and "sealed under key" in logged
    assert held.token not in str(failed.value) + logged
    assert mcp.refreshes == before
    stored = await store.get_credential(workspace_id, vault_id, held.credential.id)
    assert stored.sealed == held.credential.sealed
    await store.replace_installation_value(KEPT_KEY, box.key_id)  # served on the right key
    renewed = await tokens.refreshed(held)
    assert renewed.token is not None and renewed.token != held.token


class RefusingCredentialWrites:
    """The store, refusing the next credential write but one with ``error`` (the
    refresh's record of its exchange goes through, its write-back does not): a
    rotation between the refresh's key check and its write-back, or the
    database away."""

    def __init__(self, store: SqlStore, error: Exception) -> None:
        self._store = store
        self.error: Exception | None = error
        self._let_through = 1

    def __getattr__(self, name: str) -> object:
        return getattr(self._store, name)

    async def update_credential(self, *args: object) -> object:
        if self._let_through:
            self._let_through -= 1
        elif self.error is not None:
            error, self.error = self.error, None
            raise error
        return await self._store.update_credential(*args)  # type: ignore[arg-type]


@pytest.mark.parametrize("refusal", ["key rotated", "database busy"])
async def test_tokens_the_store_refused_are_stored_by_the_next_refresh(
    store: SqlStore, mcp: FakeMcpServer, refusal: str
) -> None:
    """The endpoint rotated the refresh token, and the store refused the new
    tokens: the next refresh stores them instead of asking again with the
    stored refresh token, which the endpoint would refuse as spent."""
    tokens, box, workspace_id, vault_id = await _tokens(store, mcp, None)
    held = await tokens.token_for(workspace_id, [vault_id], mcp.url)
    assert held.credential is not None
    error = (
        StaleSecretKey(box.key_id, b"k" * 8) if refusal == "key rotated" else DatabaseBusy("gone")
    )
    refusing = RefusingCredentialWrites(store, error)
    egress = McpEgress(Settings(egress_hosts=MCP_TEST_PIN))
    tokens = McpTokens(refusing, box, egress, timeout=10.0)  # type: ignore[arg-type]
    before = mcp.refreshes
    with pytest.raises((McpAuthFailed, DatabaseBusy)):
        await tokens.refreshed(held)
    assert mcp.refreshes == before + 1
    renewed = await tokens.refreshed(held)
    assert mcp.refreshes == before + 1
    again = await tokens.token_for(workspace_id, [vault_id], mcp.url)
    assert renewed.token is not None and again.token == renewed.token != held.token


async def test_a_refresh_token_whose_exchange_a_process_s_end_cut_off_is_not_presented(
    store: SqlStore, mcp: FakeMcpServer
) -> None:
    """Another process recorded its exchange and ended before storing an answer
    (the endpoint may have rotated the token): the refresh fails saying the
    credential needs re-authorising, and the endpoint is not asked. Before, the
    stored refresh token was presented again, spent or not. A new one ends it."""
    tokens, box, workspace_id, vault_id = await _tokens(store, mcp, None)
    held = await tokens.token_for(workspace_id, [vault_id], mcp.url)
    assert held.credential is not None
    used = box.open(held.credential.id, held.credential.sealed)["refresh_token"]
    await RefreshIntents(store, box, timedelta(seconds=20)).begin(held.credential, used)
    egress = McpEgress(Settings(egress_hosts=MCP_TEST_PIN))
    alone = McpTokens(store, box, egress, timeout=10.0, exclusive=True)
    given = len(mcp.refresh_tokens_given)
    with pytest.raises(McpAuthFailed, match="needs re-authorising"):
        await alone.refreshed(held)
    assert len(mcp.refresh_tokens_given) == given
    new = mcp.issue_refresh_token()

    def reauthorised(current: CredentialRecord) -> dict[str, object]:
        secret = box.open(current.id, current.sealed)
        return {"sealed": box.seal(current.id, {**secret, "refresh_token": new})}

    await store.update_credential(workspace_id, vault_id, held.credential.id, reauthorised)
    renewed = await alone.refreshed(held)
    assert renewed.token is not None and renewed.token != held.token
    assert mcp.refresh_tokens_given[given:] == [new]


async def test_an_exchange_that_timed_out_is_asked_again_with_the_same_token(
    store: SqlStore,
) -> None:
    """The process saw its exchange end (here, cut at the timeout): its record
    goes with it, and the next refresh asks again, as it did before records."""
    stalled = FakeMcpServer().start()
    try:
        tokens, box, workspace_id, vault_id = await _tokens(store, stalled, None)
        held = await tokens.token_for(workspace_id, [vault_id], stalled.url)
        assert held.credential is not None
        used = box.open(held.credential.id, held.credential.sealed)["refresh_token"]
        egress = McpEgress(Settings(egress_hosts=MCP_TEST_PIN))
        quick = McpTokens(store, box, egress, timeout=0.5)
        stalled.stall_token_endpoint = True
        with pytest.raises(McpAuthFailed, match="did not answer within"):
            await quick.refreshed(held)
        stalled.stall_token_endpoint = False
        renewed = await quick.refreshed(held)
        assert renewed.token is not None and renewed.token != held.token
        assert stalled.refresh_tokens_given == [used]  # the stall answered none
    finally:
        stalled.stop()
