"""The record of an MCP OAuth refresh under way (``runtime/refresh_intents.py``)
on every store (SQLite, PostgreSQL, the in-memory one): committed before the
exchange, gone with the answer's write-back or the exchange's end, and, when
left by a process that ended mid-exchange, refusing the refresh token it was
for until the credential holds another."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import anyio
import pytest

from stead.ids import new_id
from stead.jsonvalues import Json
from stead.runtime.mcp_auth import write_back_grant
from stead.runtime.refresh_intents import (
    IN_FLIGHT,
    RefreshInDoubt,
    RefreshIntents,
    RefreshMoved,
    RefreshUnderWay,
)
from stead.store import CredentialRecord, SqlStore
from stead.tools.mcp import TokenGrant
from stead.vault import SecretBox
from stead.vault.keys import new_key
from tests.databases import STORES

pytestmark = [pytest.mark.anyio, pytest.mark.parametrize("database_url", STORES, indirect=True)]
UNDER_WAY = timedelta(seconds=60)


async def _credential(store: SqlStore, box: SecretBox) -> CredentialRecord:
    workspace = await store.create_workspace("w")
    vault = await store.create_vault(workspace.id, "v", {})
    credential_id = new_id("credential")
    auth = {
        "type": "mcp_oauth",
        "mcp_server_url": "https://mcp.example/",
        "refresh": {
            "client_id": "c",
            "token_endpoint": "https://auth.example/token",
            "token_endpoint_auth": {"type": "none"},
        },
    }
    secret = {"access_token": "at-1", "refresh_token": "rt-1"}
    return await store.create_credential(
        workspace.id, vault.id, credential_id, None, {}, auth, box.seal(credential_id, secret)
    )


async def _secret(store: SqlStore, box: SecretBox, credential: CredentialRecord) -> Json:
    current = await store.get_credential(
        credential.workspace_id, credential.vault_id, credential.id
    )
    return box.open(current.id, current.sealed)


async def _reauthorised(store: SqlStore, box: SecretBox, credential: CredentialRecord) -> None:
    """The credential given a new refresh token, as ``credentials.update`` gives it."""

    def change(current: CredentialRecord) -> dict[str, object]:
        secret = box.open(current.id, current.sealed)
        return {"sealed": box.seal(current.id, {**secret, "refresh_token": "rt-new"})}

    await store.update_credential(
        credential.workspace_id, credential.vault_id, credential.id, change
    )


async def test_an_intent_is_committed_then_settled_by_the_answer_s_write_back(
    store: SqlStore,
) -> None:
    box = SecretBox(new_key())
    credential = await _credential(store, box)
    intents = RefreshIntents(store, box, UNDER_WAY, exclusive=True)
    await intents.begin(credential, "rt-1")
    assert (await _secret(store, box, credential))[IN_FLIGHT]["owner"] == intents.owner
    grant = TokenGrant("at-2", "rt-2", datetime.now(UTC) + timedelta(hours=1))
    await write_back_grant(store, box, credential, "rt-1", grant)
    stored = await _secret(store, box, credential)
    assert IN_FLIGHT not in stored and stored["refresh_token"] == "rt-2"
    await intents.begin(credential, "rt-2")  # the next refresh begins afresh


async def test_an_exchange_its_process_saw_end_leaves_no_doubt(store: SqlStore) -> None:
    box = SecretBox(new_key())
    credential = await _credential(store, box)
    intents = RefreshIntents(store, box, UNDER_WAY, exclusive=True)
    await intents.begin(credential, "rt-1")
    await intents.end(credential, "rt-1")
    assert IN_FLIGHT not in await _secret(store, box, credential)
    await intents.begin(credential, "rt-1")


@pytest.mark.parametrize("exclusive", [True, False])
async def test_an_intent_left_by_a_process_that_ended_refuses_its_refresh_token(
    store: SqlStore, exclusive: bool
) -> None:
    """Alone on the store, a process takes another's intent for one its end cut
    off at once; sharing it, once the other's exchange would have ended. Its
    own intent, not ended, is cut off too (it holds the credential's lock). A
    new refresh token ends the doubt."""
    box = SecretBox(new_key())
    credential = await _credential(store, box)
    an_hour_ago = datetime.now(UTC) - timedelta(hours=1)
    ended = RefreshIntents(store, box, UNDER_WAY, clock=lambda: an_hour_ago)
    await ended.begin(credential, "rt-1")
    live = RefreshIntents(store, box, UNDER_WAY, exclusive=exclusive)
    with pytest.raises(RefreshInDoubt, match="needs re-authorising") as refused:
        await live.begin(credential, "rt-1")
    assert "rt-1" not in str(refused.value)
    with pytest.raises(RefreshInDoubt):
        await ended.begin(credential, "rt-1")
    await _reauthorised(store, box, credential)
    await live.begin(credential, "rt-new")
    assert (await _secret(store, box, credential))[IN_FLIGHT]["owner"] == live.owner


async def test_on_a_shared_store_one_brain_refreshes_at_a_time(store: SqlStore) -> None:
    """Two brains begin at once: one exchange, the other told it is under way."""
    box = SecretBox(new_key())
    credential = await _credential(store, box)
    brains = [RefreshIntents(store, box, UNDER_WAY) for _ in range(2)]
    outcomes: list[str] = []

    async def begin(intents: RefreshIntents) -> None:
        try:
            await intents.begin(credential, "rt-1")
            outcomes.append("began")
        except RefreshUnderWay:
            outcomes.append("under way")

    async with anyio.create_task_group() as group:
        for intents in brains:
            group.start_soon(begin, intents)
    assert sorted(outcomes) == ["began", "under way"]


async def test_a_refresh_token_no_longer_stored_is_not_begun(store: SqlStore) -> None:
    box = SecretBox(new_key())
    credential = await _credential(store, box)
    await _reauthorised(store, box, credential)
    with pytest.raises(RefreshMoved):
        await RefreshIntents(store, box, UNDER_WAY).begin(credential, "rt-1")
    assert IN_FLIGHT not in await _secret(store, box, credential)
