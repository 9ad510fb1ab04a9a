"""``SandboxToolbox.forget``: what another process's destroy asks of this one.
The toolbox lets go of the sandbox it served only when the destroyed lease is
the one it served under and has not been taken again; its own destroy says
whether it destroyed anything (only then are the others told)."""

from __future__ import annotations

import pytest

from stead.config import Settings
from stead.ids import new_id
from stead.runtime.credentials import SessionCredentials
from stead.runtime.toolbox import SandboxToolbox
from stead.store import LeaseExpiry, SandboxLease
from stead.store.inmemory import InMemoryStore
from stead.testing import MemoryProvider
from stead.vault import SecretBox
from stead.vault.keys import new_key
from tests.unit.conftest import definition, new_session

pytestmark = pytest.mark.anyio


class LeasedMemoryProvider(MemoryProvider):
    """The in-memory sandboxes, bound by leases as the sandbox host's are."""

    leased = True


async def _served(
    store: InMemoryStore, provider: MemoryProvider | None = None
) -> tuple[SandboxToolbox, str]:
    """A toolbox that has run one call in a new session's sandbox."""
    credentials = SessionCredentials(store, SecretBox(new_key()))
    toolbox = SandboxToolbox(Settings(), store, provider or LeasedMemoryProvider(), credentials)
    _, session_id = await new_session(store)
    outcome = await toolbox.run(session_id, "bash", {"command": "echo hi"}, "op-1")
    assert not outcome.is_error, outcome
    assert toolbox.served == 1
    return toolbox, session_id


async def _lease(store: InMemoryStore, session_id: str) -> SandboxLease:
    lease = await store.sandbox_lease(session_id)
    assert lease is not None
    return lease


async def test_a_destroyed_lease_s_sandbox_is_let_go_of() -> None:
    store, provider = InMemoryStore(), LeasedMemoryProvider()
    toolbox, session_id = await _served(store, provider)
    served_under = (await _lease(store, session_id)).created_at.isoformat()
    assert await store.expire_sandbox_lease(session_id, reason=LeaseExpiry.EXPLICIT)
    await provider.release(session_id)  # what the other process's destroy did
    await toolbox.forget(session_id, served_under)
    assert toolbox.served == 0
    # The next call serves it afresh.
    assert not (await toolbox.run(session_id, "bash", {"command": "echo again"}, "op-2")).is_error
    assert toolbox.served == 1


async def test_an_active_lease_s_sandbox_is_kept() -> None:
    store = InMemoryStore()
    toolbox, session_id = await _served(store)
    await toolbox.forget(session_id, (await _lease(store, session_id)).created_at.isoformat())
    assert toolbox.served == 1


async def test_a_notice_about_an_older_lease_keeps_the_newer_one_s_sandbox() -> None:
    store = InMemoryStore()
    toolbox, session_id = await _served(store)
    older = (await _lease(store, session_id)).created_at.isoformat()
    # Released and taken again by a call here: a newer lease, which ends too.
    assert await store.expire_sandbox_lease(session_id, reason=LeaseExpiry.EXPLICIT)
    assert not (await toolbox.run(session_id, "bash", {"command": "echo new"}, "op-2")).is_error
    assert (await _lease(store, session_id)).created_at.isoformat() != older
    assert await store.expire_sandbox_lease(session_id, reason=LeaseExpiry.EXPLICIT)
    await toolbox.forget(session_id, older)
    assert toolbox.served == 1


async def test_destroy_says_which_lease_it_ended() -> None:
    store = InMemoryStore()
    toolbox, session_id = await _served(store)
    lease = await _lease(store, session_id)
    assert await toolbox.destroy(lease) is None  # active: in use, kept
    assert toolbox.served == 1
    assert await store.expire_sandbox_lease(session_id, reason=LeaseExpiry.EXPLICIT)
    ended = await toolbox.destroy(lease)  # as listed before it ended
    assert ended is not None and ended.status == "expired"  # as read when destroyed
    assert toolbox.served == 0


async def test_a_changed_credential_is_not_pushed_to_a_sandbox_whose_lease_ended() -> None:
    """Destroyed by another process whose notice never came: a push would make the
    sandbox again, with the credentials in it and no lease to end it (the call
    that takes the lease again pushes them, marked stale)."""
    store, provider = InMemoryStore(), LeasedMemoryProvider()
    box = SecretBox(new_key())
    workspace = await store.create_workspace("w")
    vault = await store.create_vault(workspace.id, "v", {})
    credential_id = new_id("credential")
    auth = {
        "type": "environment_variable",
        "secret_name": "TOKEN",
        "networking": {"type": "unrestricted"},
        "injection_location": {"header": True, "body": False},
    }
    sealed = box.seal(credential_id, {"secret_value": "first"})
    await store.create_credential(workspace.id, vault.id, credential_id, None, {}, auth, sealed)
    agent = await store.create_agent(workspace.id, definition())
    env = await store.create_environment(workspace.id, "env", None, {"type": "cloud"}, {}, None)
    session, _ = await store.create_session(
        workspace.id,
        (agent.id, None),
        lambda a: {"id": a.id},
        env.id,
        {"vault_ids": [vault.id]},
        [],
    )
    toolbox = SandboxToolbox(Settings(), store, provider, SessionCredentials(store, box))
    assert not (await toolbox.run(session.id, "bash", {"command": "echo hi"}, "op-1")).is_error
    assert [s.value for s in provider.sandboxes[session.id].secrets] == ["first"]

    assert await store.expire_sandbox_lease(session.id, reason=LeaseExpiry.EXPLICIT)
    await provider.release(session.id)  # another process's destroy; its notice is lost
    await toolbox.credentials_changed(vault.id)
    assert session.id not in provider.sandboxes
