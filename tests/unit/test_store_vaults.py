"""Vaults and credentials on every store: one live credential per claim, archived
vaults and credentials read-only, what a session may use and name, key rotation."""

from __future__ import annotations

import pytest

from stead.store import Conflict, NotFound, PageRequest, SqlStore
from tests.databases import STORES
from tests.unit.conftest import definition

pytestmark = [pytest.mark.anyio, pytest.mark.parametrize("database_url", STORES, indirect=True)]


def bearer(url: str) -> dict[str, str]:
    return {"type": "static_bearer", "mcp_server_url": url}


async def test_a_vault_holds_one_live_credential_per_claim(store: SqlStore) -> None:
    workspace = (await store.create_workspace("w")).id
    vault = await store.create_vault(workspace, "v", {"team": "a"})
    await store.create_credential(workspace, vault.id, "cred_a", None, {}, bearer("u1"), b"s1")
    with pytest.raises(Conflict, match="cred_a"):
        await store.create_credential(workspace, vault.id, "cred_b", None, {}, bearer("u1"), b"s")
    made = await store.create_credential(workspace, vault.id, "cred_b", "b", {}, bearer("u2"), b"s")
    with pytest.raises(Conflict, match="cred_a"):
        await store.update_credential(
            workspace, vault.id, made.id, lambda c: {"auth": bearer("u1")}
        )
    await store.archive_credential(workspace, vault.id, "cred_a")
    moved = await store.update_credential(
        workspace, vault.id, made.id, lambda c: {"auth": bearer("u1")}
    )
    assert moved.auth == bearer("u1") and moved.updated_at > made.updated_at
    with pytest.raises(Conflict) as refused:
        await store.update_credential(
            workspace, vault.id, "cred_a", lambda c: {"display_name": "x"}
        )
    assert refused.value.code == "credential_archived"
    page = PageRequest(limit=10, order="asc")
    live = await store.list_credentials(workspace, vault.id, page, include_archived=False)
    every = await store.list_credentials(workspace, vault.id, page, include_archived=True)
    assert [c.id for c in live.items] == ["cred_b"]
    assert [c.id for c in every.items] == ["cred_a", "cred_b"]
    with pytest.raises(NotFound, match="vault"):
        await store.get_credential(workspace, "vlt_missing", "cred_a")


async def test_an_archived_vault_is_read_only_and_unused(store: SqlStore) -> None:
    workspace = (await store.create_workspace("w")).id
    first = await store.create_vault(workspace, "first", {})
    second = await store.create_vault(workspace, "second", {})
    for vault, name in ((first, "A"), (second, "B")):
        auth = {"type": "environment_variable", "secret_name": name}
        await store.create_credential(workspace, vault.id, f"cred_{name}", None, {}, auth, b"s")
    used = await store.active_credentials(workspace, [second.id, first.id])
    assert [c.id for c in used] == ["cred_B", "cred_A"]  # in the session's vault order
    archived = await store.archive_vault(workspace, first.id)
    again = await store.archive_vault(workspace, first.id)
    assert again.archived_at == archived.archived_at is not None
    with pytest.raises(Conflict) as refused:
        await store.update_vault(workspace, first.id, lambda v: {"display_name": "x"})
    assert refused.value.code == "vault_archived"
    assert [c.id for c in await store.active_credentials(workspace, [first.id, second.id])] == [
        "cred_B"
    ]
    agent = await store.create_agent(workspace, definition())
    env = await store.create_environment(workspace, "env", None, {"type": "cloud"}, {}, None)

    async def session_naming(*vault_ids: str) -> None:
        fields = {"vault_ids": list(vault_ids)}
        await store.create_session(workspace, (agent.id, None), lambda a: {}, env.id, fields, [])

    with pytest.raises(Conflict, match=r"vault_ids\.1"):
        await session_naming(second.id, first.id)
    with pytest.raises(NotFound) as missing:
        await session_naming("vlt_missing")
    assert missing.value.field == "vault_ids.0"
    await session_naming(second.id)
    await store.delete_vault(workspace, second.id)
    with pytest.raises(NotFound):
        await store.get_credential(workspace, second.id, "cred_B")


async def test_keys_rotate_every_credential_and_records_share_nothing(store: SqlStore) -> None:
    workspace = (await store.create_workspace("w")).id
    vault = await store.create_vault(workspace, "v", {"k": "v"})
    vault.metadata["k"] = "changed by the caller"
    assert (await store.get_vault(workspace, vault.id)).metadata == {"k": "v"}
    for n in range(3):
        await store.create_credential(workspace, vault.id, f"c{n}", None, {}, bearer(f"u{n}"), b"o")
    resealed = await store.reseal_credentials(lambda c: None if c.id == "c1" else b"new")
    assert resealed == 2
    held = await store.list_credentials(workspace, vault.id, PageRequest(10, "asc"), False)
    assert [c.sealed for c in held.items] == [b"new", b"o", b"new"]
    elsewhere = (await store.create_workspace("o")).id
    with pytest.raises(NotFound):
        await store.get_vault(elsewhere, vault.id)
