"""Session resources and the outputs ledger in the SQL store, on SQLite and
PostgreSQL: a resource needs a visible file of the workspace and a free mount
path, nothing is stored when it is refused, and each (path, content) of a
session's outputs begins one file however often it is captured."""

from __future__ import annotations

import pytest

from stead.ids import new_id
from stead.store import Conflict, FileScope, NewFile, NotFound, SqlStore
from tests.databases import STORES
from tests.unit.conftest import definition

pytestmark = [pytest.mark.anyio, pytest.mark.parametrize("database_url", STORES, indirect=True)]


async def _session(store: SqlStore) -> tuple[str, str]:
    workspace = await store.create_workspace("w")
    agent = await store.create_agent(workspace.id, definition())
    env = await store.create_environment(workspace.id, "env", None, {"type": "cloud"}, {}, None)
    session, _ = await store.create_session(
        workspace.id, (agent.id, None), lambda a: {"id": a.id}, env.id, {}, []
    )
    return workspace.id, session.id


def _new_file(workspace_id: str, scope: FileScope | None = None) -> NewFile:
    file_id = new_id("file")
    return NewFile(file_id, workspace_id, "a.txt", "text/plain", 1, f"files/{file_id}", None, scope)


async def _ready_file(store: SqlStore, workspace_id: str) -> str:
    new = _new_file(workspace_id)
    await store.begin_file(new)
    await store.file_ready(workspace_id, new.id)
    return new.id


def _resource(file_id: str, path: str) -> dict[str, str]:
    return {
        "id": new_id("session_resource"),
        "type": "file",
        "file_id": file_id,
        "mount_path": path,
    }


async def test_a_resource_needs_a_visible_file_and_a_free_path(store: SqlStore) -> None:
    workspace_id, session_id = await _session(store)
    other_workspace, _ = await _session(store)
    theirs = await _ready_file(store, other_workspace)
    ours = await _ready_file(store, workspace_id)
    for missing in ("file_unknown", theirs):
        with pytest.raises(NotFound) as refused:
            await store.add_session_resource(
                workspace_id, session_id, _resource(missing, "/mnt/session/uploads/x"), limit=5
            )
        assert refused.value.field == "file_id"
    first = _resource(ours, "/mnt/session/uploads/dir")
    assert await store.add_session_resource(workspace_id, session_id, first, limit=5) == first
    for clash in ("/mnt/session/uploads/dir", "/mnt/session/uploads/dir/inner"):
        with pytest.raises(Conflict, match="mount_path"):
            await store.add_session_resource(
                workspace_id, session_id, _resource(ours, clash), limit=5
            )
    with pytest.raises(Conflict, match="1 resources"):
        await store.add_session_resource(
            workspace_id, session_id, _resource(ours, "/mnt/session/uploads/y"), limit=1
        )
    assert (await store.get_session(workspace_id, session_id)).resources == [first]
    with pytest.raises(NotFound):
        await store.delete_session_resource(other_workspace, session_id, first["id"])
    assert await store.delete_session_resource(workspace_id, session_id, first["id"]) == first
    assert (await store.get_session(workspace_id, session_id)).resources == []
    with pytest.raises(NotFound):
        await store.delete_session_resource(workspace_id, session_id, first["id"])


async def test_each_output_content_begins_one_file(store: SqlStore) -> None:
    workspace_id, session_id = await _session(store)
    scope = FileScope("session", session_id)
    begun = await store.begin_output(_new_file(workspace_id, scope), session_id, "r.txt", "aa")
    assert begun is not None and begun.ready_at is None
    again = await store.begin_output(_new_file(workspace_id, scope), session_id, "r.txt", "aa")
    assert again is not None and again.id == begun.id  # the pending one, to finish
    await store.file_ready(workspace_id, begun.id)
    done = await store.begin_output(_new_file(workspace_id, scope), session_id, "r.txt", "aa")
    assert done is not None and done.ready_at is not None and done.id == begun.id
    changed = await store.begin_output(_new_file(workspace_id, scope), session_id, "r.txt", "bb")
    assert changed is not None and changed.id != begun.id
    await store.delete_file(workspace_id, begun.id)
    assert (
        await store.begin_output(_new_file(workspace_id, scope), session_id, "r.txt", "aa") is None
    )


async def test_a_repository_token_is_kept_apart_rotated_and_dropped(store: SqlStore) -> None:
    """The token lives in ``session_repositories`` (sealed elsewhere; opaque here),
    never in the resource the API shows; an update replaces it, a delete of the
    resource or of the session drops it, and a file resource takes none."""
    workspace = await store.create_workspace("w")
    agent = await store.create_agent(workspace.id, definition())
    env = await store.create_environment(workspace.id, "env", None, {"type": "cloud"}, {}, None)
    repo = {"id": new_id("session_resource"), "type": "github_repository", "mount_path": "/w/r"}
    bare = {"id": new_id("session_resource"), "type": "github_repository", "mount_path": "/w/s"}
    fields = {
        "resources": [repo, bare],
        "repository_tokens": {repo["id"]: b"one", bare["id"]: None},
    }
    session, _ = await store.create_session(
        workspace.id, (agent.id, None), lambda a: {"id": a.id}, env.id, fields, []
    )
    states = {s.resource_id: s for s in await store.repository_states(session.id)}
    assert (states[repo["id"]].sealed_token, states[bare["id"]].sealed_token) == (b"one", None)
    assert session.resources == [repo, bare]

    changed = await store.set_repository_token(workspace.id, session.id, repo["id"], b"two", "t1")
    assert changed == repo | {"updated_at": "t1"}
    await store.mark_repository_cloned(repo["id"])
    [state, _] = sorted(
        await store.repository_states(session.id), key=lambda s: s.resource_id != repo["id"]
    )
    assert state.sealed_token == b"two" and state.cloned_at is not None
    assert "two" not in repr(state)
    with pytest.raises(NotFound):
        await store.set_repository_token(workspace.id, session.id, "sesrsc_none", b"x", "t")

    file_id = await _ready_file(store, workspace.id)
    attached = _resource(file_id, "/mnt/session/uploads/f")
    await store.add_session_resource(workspace.id, session.id, attached, limit=5)
    with pytest.raises(Conflict, match="authorization_token") as refused:
        await store.set_repository_token(workspace.id, session.id, attached["id"], b"x", "t")
    assert refused.value.status == 400

    assert (
        await store.reseal_repository_tokens(lambda i, s: s + b"!" if i == repo["id"] else None)
        == 1
    )
    await store.delete_session_resource(workspace.id, session.id, repo["id"])
    assert [s.resource_id for s in await store.repository_states(session.id)] == [bare["id"]]
    await store.delete_session(workspace.id, session.id)
    assert await store.repository_states(session.id) == []


async def test_an_archived_session_s_resources_cannot_change(store: SqlStore) -> None:
    """Not added, rotated nor deleted: an archived session is read-only."""
    workspace = await store.create_workspace("w")
    agent = await store.create_agent(workspace.id, definition())
    env = await store.create_environment(workspace.id, "env", None, {"type": "cloud"}, {}, None)
    repo = {"id": new_id("session_resource"), "type": "github_repository", "mount_path": "/w/r"}
    fields = {"resources": [repo], "repository_tokens": {repo["id"]: b"one"}}
    session, _ = await store.create_session(
        workspace.id, (agent.id, None), lambda a: {"id": a.id}, env.id, fields, []
    )
    await store.archive_session(workspace.id, session.id)
    file_id = await _ready_file(store, workspace.id)
    with pytest.raises(Conflict, match="archived"):
        await store.add_session_resource(
            workspace.id, session.id, _resource(file_id, "/mnt/session/uploads/f"), limit=5
        )
    with pytest.raises(Conflict, match="archived"):
        await store.set_repository_token(workspace.id, session.id, repo["id"], b"two", "t1")
    with pytest.raises(Conflict, match="archived"):
        await store.delete_session_resource(workspace.id, session.id, repo["id"])
    kept = await store.get_session(workspace.id, session.id)
    assert kept.resources == [repo]
    [state] = await store.repository_states(session.id)
    assert state.sealed_token == b"one"
