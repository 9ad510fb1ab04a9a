"""Every store write that stores a sealed secret refuses one sealed under another
key than the database's kept one (``StaleSecretKey``), writes nothing then, and
names the keys' ids, never the secret; a database that kept no key takes any."""

from __future__ import annotations

import pytest

from stead.ids import new_id
from stead.store import (
    CredentialRecord,
    NotFound,
    PageRequest,
    SessionFilter,
    SqlStore,
    StaleSecretKey,
)
from stead.vault import KEPT_KEY, SecretBox
from stead.vault.cipher import KEY_BYTES
from tests.databases import STORES
from tests.unit.conftest import definition

pytestmark = [pytest.mark.anyio, pytest.mark.parametrize("database_url", STORES, indirect=True)]
OLD, NEW = SecretBox(b"o" * KEY_BYTES), SecretBox(b"n" * KEY_BYTES)
SECRET = "sk-never-in-an-error-3131"
BEARER = {"type": "static_bearer", "mcp_server_url": "https://m.example"}


def _refused(caught: pytest.ExceptionInfo[StaleSecretKey]) -> None:
    assert (caught.value.sealed_under, caught.value.kept) == (OLD.key_id, NEW.key_id)
    assert OLD.key_id.hex() in str(caught.value) and SECRET not in str(caught.value)


async def test_a_credential_sealed_under_another_key_is_not_stored(store: SqlStore) -> None:
    await store.replace_installation_value(KEPT_KEY, NEW.key_id)  # rotated to NEW
    workspace = (await store.create_workspace("w")).id
    vault = await store.create_vault(workspace, "v", {})
    with pytest.raises(StaleSecretKey) as made:
        await store.create_credential(
            workspace, vault.id, "cred_a", None, {}, BEARER, OLD.seal("cred_a", {"t": SECRET})
        )
    _refused(made)
    with pytest.raises(NotFound):
        await store.get_credential(workspace, vault.id, "cred_a")
    stored = NEW.seal("cred_b", {"t": "one"})
    await store.create_credential(workspace, vault.id, "cred_b", None, {}, BEARER, stored)

    def stale(_: CredentialRecord) -> dict[str, object]:
        return {"sealed": OLD.seal("cred_b", {"t": SECRET}), "display_name": "x"}

    with pytest.raises(StaleSecretKey) as changed:
        await store.update_credential(workspace, vault.id, "cred_b", stale)
    _refused(changed)
    with pytest.raises(StaleSecretKey):
        await store.reseal_credentials(lambda c: OLD.seal(c.id, {"t": SECRET}))
    kept = await store.get_credential(workspace, vault.id, "cred_b")
    assert (kept.sealed, kept.display_name) == (stored, None)


async def test_a_repository_token_sealed_under_another_key_is_not_stored(
    store: SqlStore,
) -> None:
    await store.replace_installation_value(KEPT_KEY, NEW.key_id)
    workspace = await store.create_workspace("w")
    agent = await store.create_agent(workspace.id, definition())
    env = await store.create_environment(workspace.id, "env", None, {"type": "cloud"}, {}, None)
    repo = {"id": new_id("session_resource"), "type": "github_repository", "mount_path": "/w/r"}

    async def session_with(sealed: bytes) -> str:
        fields = {"resources": [repo], "repository_tokens": {repo["id"]: sealed}}
        made, _ = await store.create_session(
            workspace.id, (agent.id, None), lambda a: {"id": a.id}, env.id, fields, []
        )
        return made.id

    with pytest.raises(StaleSecretKey) as made:
        await session_with(OLD.seal(repo["id"], {"t": SECRET}))
    _refused(made)
    page = PageRequest(limit=10, order="asc")
    assert (await store.list_sessions(workspace.id, page, SessionFilter())).items == []
    session_id = await session_with(NEW.seal(repo["id"], {"t": "one"}))
    stale = OLD.seal(repo["id"], {"t": SECRET})
    with pytest.raises(StaleSecretKey):
        await store.set_repository_token(workspace.id, session_id, repo["id"], stale, "t1")
    other = {"id": new_id("session_resource"), "type": "github_repository", "mount_path": "/w/s"}
    with pytest.raises(StaleSecretKey):
        await store.add_session_resource(
            workspace.id, session_id, other, limit=5, sealed_token=OLD.seal(other["id"], {})
        )
    [state] = await store.repository_states(session_id)
    assert state.sealed_token is not None and NEW.sealed_by_current_key(state.sealed_token)
    assert (await store.get_session(workspace.id, session_id)).resources == [repo]


async def test_a_webhook_secret_sealed_under_another_key_is_not_stored(store: SqlStore) -> None:
    await store.replace_installation_value(KEPT_KEY, NEW.key_id)
    workspace = (await store.create_workspace("w")).id
    fields = {"url": "https://hooks.example/", "event_types": ["session.created"]}
    with pytest.raises(StaleSecretKey) as made:
        await store.create_webhook_endpoint(workspace, "whk_a", fields, OLD.seal("a", {}))
    _refused(made)
    assert await store.list_webhook_endpoints(workspace) == []
    await store.create_webhook_endpoint(workspace, "whk_b", fields, NEW.seal("b", {}))
    with pytest.raises(StaleSecretKey):
        await store.update_webhook_endpoint(workspace, "whk_b", {}, OLD.seal("b", {}))
    with pytest.raises(StaleSecretKey):
        await store.reseal_webhook_secrets(lambda ident, _: OLD.seal(ident, {}))


async def test_a_database_that_kept_no_key_takes_any(store: SqlStore) -> None:
    """Every server keeps its key at start: only a store opened by no server has none."""
    workspace = (await store.create_workspace("w")).id
    vault = await store.create_vault(workspace, "v", {})
    for box, ident in ((OLD, "cred_a"), (NEW, "cred_b")):
        auth = {**BEARER, "mcp_server_url": f"https://{ident}.example"}
        await store.create_credential(
            workspace, vault.id, ident, None, {}, auth, box.seal(ident, {})
        )
