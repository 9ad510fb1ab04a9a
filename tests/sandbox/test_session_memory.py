"""``memory_store`` session resources, through the official SDK against a real
``stead serve`` and sandbox host (bubblewrap): a store is mounted at
``/mnt/memory/<slug>``, what the agent changes there with bash becomes memory
versions by the session, a read-only store cannot be changed, two sessions
editing one memory keep both contents and the later one is told, memories
written through the API appear at the next turn, the system prompt describes
the stores, and ``stead_memory_search`` answers with cited results."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import pytest

from stead.mount_paths import LISTED_ENTRIES
from stead.testing import FakeModel, HostProcess, ServeForker, ServerProcess, ToolCall, Turn
from tests.conftest import make_client, sdk_of
from tests.integration.helpers import message, wait_idle
from tests.sandbox.conftest import (
    WAIT,
    bash_turn,
    requires_isolation,
    shell,
    sweepless_server,
    workspace_on_host,
)

pytestmark = requires_isolation

SEARCH = "stead_memory_search"


def script(body: dict[str, Any]) -> Turn:
    """``shell``, a user message ``search <query>`` as a memory search, and
    ``call <name> <json input>`` as that one tool call."""
    last = body["messages"][-1]
    text = "".join(b.get("text", "") for b in last["content"] if b.get("type") == "text")
    if last["role"] == "user" and "tool_result" not in str(last):
        if text.startswith("search "):
            return Turn([ToolCall(SEARCH, {"query": text.removeprefix("search ")})])
        if text.startswith("call "):
            name, tool_input = text.removeprefix("call ").split(" ", 1)
            return Turn([ToolCall(name, json.loads(tool_input))])
    return shell(body)


def tool_turn(client: anthropic.Anthropic, session_id: str, name: str, **tool_input: Any) -> str:
    """One call of the tool ``name``; its result's text once the session is idle."""
    sent = message(f"call {name} {json.dumps(tool_input)}")
    client.beta.sessions.events.send(session_id, events=[sent])
    wait_idle(client, session_id, timeout=WAIT)
    results = [
        e for e in client.beta.sessions.events.list(session_id) if e.type == "agent.tool_result"
    ]
    return "".join(block.text for block in results[-1].content)  # type: ignore[union-attr]


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeModel]:
    with FakeModel(script) as model:
        yield model


@pytest.fixture(scope="module")
def server(
    host: HostProcess,
    fake: FakeModel,
    tmp_path_factory: pytest.TempPathFactory,
    forker: ServeForker,
) -> Iterator[ServerProcess]:
    data = tmp_path_factory.mktemp("memory") / "data"
    with sweepless_server(host, fake, data, forker) as started:
        yield started


@pytest.fixture
def client(server: ServerProcess) -> Iterator[anthropic.Anthropic]:
    with sdk_of(server) as opened:
        yield opened


def new_store(client: anthropic.Anthropic, name: str, **memories: str) -> str:
    store = client.beta.memory_stores.create(name=name, description=f"{name} notes")
    for path, content in memories.items():
        client.beta.memory_stores.memories.create(store.id, path=path, content=content)
    return store.id


def new_session(client: anthropic.Anthropic, *resources: dict[str, Any]) -> str:
    agent = client.beta.agents.create(
        name="memory", model="claude-sonnet-4-6", tools=[{"type": "agent_toolset_20260401"}]
    )
    environment = client.beta.environments.create(name=f"memory-{uuid.uuid4().hex[:8]}")
    return client.beta.sessions.create(
        agent=agent.id, environment_id=environment.id, resources=list(resources)
    ).id


def memories_of(client: anthropic.Anthropic, store_id: str) -> dict[str, str]:
    listed = client.beta.memory_stores.memories.list(store_id, view="full")
    return {m.path: m.content for m in listed if m.type == "memory"}  # type: ignore[union-attr]


def versions_by(client: anthropic.Anthropic, store_id: str, session_id: str) -> list[Any]:
    return list(
        client.beta.memory_stores.memory_versions.list(store_id, session_id=session_id, view="full")
    )


def test_an_agent_changes_its_memories_with_bash(
    client: anthropic.Anthropic, fake: FakeModel
) -> None:
    name = f"Team Notes {uuid.uuid4().hex[:6]}"
    store_id = new_store(client, name, **{"/prefs/style.md": "tabs", "/old.md": "stale"})
    session_id = new_session(
        client,
        {"type": "memory_store", "memory_store_id": store_id, "instructions": "Keep it short."},
    )
    [resource] = client.beta.sessions.retrieve(session_id).resources
    mount = f"/mnt/memory/{name.lower().replace(' ', '-')}"
    assert (resource.type, resource.mount_path, resource.access) == (  # type: ignore[union-attr]
        "memory_store",
        mount,
        "read_write",
    )
    assert [s.id for s in client.beta.sessions.list(memory_store_id=store_id)] == [session_id]

    output = bash_turn(
        client,
        session_id,
        f"cat {mount}/prefs/style.md && printf spaces > {mount}/prefs/style.md && "
        f"mkdir -p {mount}/new && printf hello > {mount}/new/hi.md && rm {mount}/old.md",
    )
    assert output == "tabs"
    assert memories_of(client, store_id) == {"/prefs/style.md": "spaces", "/new/hi.md": "hello"}
    made = versions_by(client, store_id, session_id)
    assert sorted((v.operation, v.path) for v in made) == [
        ("created", "/new/hi.md"),
        ("deleted", "/old.md"),
        ("modified", "/prefs/style.md"),
    ]
    assert {v.created_by.session_id for v in made} == {session_id}  # type: ignore[union-attr]

    # The system prompt names the mount, its access and the instructions; the
    # search tool is offered.
    request = fake.requests[-1].body
    system = "".join(block["text"] for block in request["system"])
    assert f"<path>{mount}</path>" in system and "Keep it short." in system
    assert SEARCH in [tool["name"] for tool in request["tools"]]

    # Written through the API: in the sandbox at the next turn.
    memory = client.beta.memory_stores.memories.create(store_id, path="/api.md", content="from api")
    client.beta.memory_stores.memories.update(
        memory.id, memory_store_id=store_id, content="from api, edited"
    )
    assert bash_turn(client, session_id, f"cat {mount}/api.md") == "from api, edited"

    # The search tool finds it and cites the memory, its version and its file.
    client.beta.sessions.events.send(session_id, events=[message("search edited from the api")])
    wait_idle(client, session_id, timeout=WAIT)
    [*_, result] = [
        e for e in client.beta.sessions.events.list(session_id) if e.type == "agent.tool_result"
    ]
    current = client.beta.memory_stores.memories.retrieve(memory.id, memory_store_id=store_id)
    cited = result.content[0].text  # type: ignore[union-attr]
    assert f"{mount}/api.md (memory {memory.id}, version {current.memory_version_id}" in cited

    # A sandbox destroyed and made again starts from the store: its empty mount
    # deletes nothing.
    before = memories_of(client, store_id)
    client.delete(f"/v1/sessions/{session_id}/sandbox", cast_to=object)
    assert bash_turn(client, session_id, f"cat {mount}/new/hi.md") == "hello"
    assert memories_of(client, store_id) == before


def test_an_agent_changes_its_memories_with_the_file_tools(client: anthropic.Anthropic) -> None:
    """read, write, edit and glob reach /mnt/memory as bash does, and what write
    and edit change is written back as memory versions by the session."""
    name = f"tools-{uuid.uuid4().hex[:6]}"
    store_id = new_store(client, name, **{"/todo.md": "milk\neggs\n"})
    session_id = new_session(client, {"type": "memory_store", "memory_store_id": store_id})
    mount = f"/mnt/memory/{name}"
    assert "eggs" in tool_turn(client, session_id, "read", file_path=f"{mount}/todo.md")
    tool_turn(client, session_id, "write", file_path=f"{mount}/people/ada.md", content="math")
    tool_turn(
        client,
        session_id,
        "edit",
        file_path=f"{mount}/todo.md",
        old_string="eggs",
        new_string="bread",
    )
    assert f"{mount}/people/ada.md" in tool_turn(
        client, session_id, "glob", pattern="**/*.md", path=mount
    )
    assert memories_of(client, store_id) == {"/todo.md": "milk\nbread\n", "/people/ada.md": "math"}
    made = versions_by(client, store_id, session_id)
    assert sorted((v.operation, v.path) for v in made) == [
        ("created", "/people/ada.md"),
        ("modified", "/todo.md"),
    ]


def test_memories_that_cannot_all_be_files_leave_the_session_working(
    client: anthropic.Anthropic,
) -> None:
    """``/x`` beside ``/x/y``: ``/x`` stays out of the mount and the agent is
    told; a memory moved from ``/a/b`` to ``/a`` takes the place of the emptied
    directory. Before, either one made every tool call of the session fail."""
    name = f"Shapes {uuid.uuid4().hex[:6]}"
    store_id = new_store(client, name, **{"/a/b": "moved", "/x": "held back", "/x/y": "kept"})
    session_id = new_session(client, {"type": "memory_store", "memory_store_id": store_id})
    mount = f"/mnt/memory/{name.lower().replace(' ', '-')}"
    assert bash_turn(client, session_id, f"cat {mount}/a/b {mount}/x/y") == "movedkept"
    [*_, result] = [
        e for e in client.beta.sessions.events.list(session_id) if e.type == "agent.tool_result"
    ]
    told = [block.text for block in result.content[1:]]  # type: ignore[union-attr]
    assert told == [
        f"The memory /x is not in {mount}: other memories are below /x/, "
        "so it cannot be a file there."
    ]
    [moved] = [m for m in client.beta.memory_stores.memories.list(store_id) if m.path == "/a/b"]
    client.beta.memory_stores.memories.update(moved.id, memory_store_id=store_id, path="/a")
    assert bash_turn(client, session_id, f"cat {mount}/a") == "moved"
    assert memories_of(client, store_id) == {"/a": "moved", "/x": "held back", "/x/y": "kept"}


def test_a_mount_with_more_entries_than_a_listing_deletes_no_memory(
    client: anthropic.Anthropic,
) -> None:
    """The agent makes more directories than one listing of the mount visits:
    the files it did not list are not deleted from the store (before, an
    unlisted memory was deleted by the session), and the agent is told."""
    name = f"Crowded {uuid.uuid4().hex[:6]}"
    kept = {f"/keep{i}.md": f"note {i}" for i in range(8)}
    store_id = new_store(client, name, **kept)
    session_id = new_session(client, {"type": "memory_store", "memory_store_id": store_id})
    mount = f"/mnt/memory/{name.lower().replace(' ', '-')}"
    output = bash_turn(
        client,
        session_id,
        f"mkdir -p {mount}/many && cd {mount}/many && "
        f"seq {LISTED_ENTRIES + 50} | xargs mkdir && printf edited > {mount}/keep0.md && "
        "echo made",
    )
    assert output == "made"
    [*_, result] = [
        e for e in client.beta.sessions.events.list(session_id) if e.type == "agent.tool_result"
    ]
    told = " ".join(block.text for block in result.content[1:])  # type: ignore[union-attr]
    assert f"{mount} holds more than {LISTED_ENTRIES} files and directories" in told
    held = memories_of(client, store_id)
    assert set(held) == set(kept)  # none deleted
    assert all(v.operation != "deleted" for v in versions_by(client, store_id, session_id))
    # Back under the limit, the whole mount is seen again: the edit is saved.
    assert bash_turn(client, session_id, f"rm -r {mount}/many && echo gone") == "gone"
    assert memories_of(client, store_id) == {**kept, "/keep0.md": "edited"}


def test_a_file_whose_name_is_not_utf_8_is_no_memory_and_the_others_are_saved(
    client: anthropic.Anthropic,
) -> None:
    """Before, such a name reached the store as surrogates, which it refused:
    every write-back failed its run, retried until its attempts ran out."""
    name = f"Bytes {uuid.uuid4().hex[:6]}"
    store_id = new_store(client, name, **{"/plan.md": "draft"})
    session_id = new_session(client, {"type": "memory_store", "memory_store_id": store_id})
    mount = f"/mnt/memory/{name.lower().replace(' ', '-')}"
    output = bash_turn(
        client,
        session_id,
        f"printf odd > {mount}/$'odd\\xff.md' && printf final > {mount}/plan.md && echo done",
    )
    assert output == "done"
    assert memories_of(client, store_id) == {"/plan.md": "final"}
    assert bash_turn(client, session_id, f"cat {mount}/plan.md") == "final"


def test_a_change_the_store_refuses_is_told_once_in_each_result(
    client: anthropic.Anthropic,
) -> None:
    """Each write-back finds a change it cannot save again (at a turn's end, at
    the next turn's staging, after the call): a later call's result said so
    once for each, the same note three times, and more after turns without a
    sandbox call."""
    store_id = new_store(client, f"Refusing {uuid.uuid4().hex[:6]}")
    session_id = new_session(client, {"type": "memory_store", "memory_store_id": store_id})
    [resource] = client.beta.sessions.retrieve(session_id).resources
    big = f"{resource.mount_path}/big.md"  # type: ignore[union-attr]
    bash_turn(client, session_id, f"head -c 200000 /dev/zero | tr '\\0' a > {big}")
    for _ in range(2):
        bash_turn(client, session_id, "true")
        [*_, result] = [
            e for e in client.beta.sessions.events.list(session_id) if e.type == "agent.tool_result"
        ]
        note = result.content[-1].text  # type: ignore[union-attr]
        assert note == f"Memory not saved: {big}: a memory holds at most 102400 bytes.", note
    assert memories_of(client, store_id) == {}


def test_a_read_only_store_cannot_be_changed(client: anthropic.Anthropic) -> None:
    store_id = new_store(client, "Shared Facts", **{"/fact.md": "water is wet"})
    session_id = new_session(
        client, {"type": "memory_store", "memory_store_id": store_id, "access": "read_only"}
    )
    mount = "/mnt/memory/shared-facts"
    output = bash_turn(
        client,
        session_id,
        f"echo dry > {mount}/fact.md; echo rc=$?; touch {mount}/new.md; echo rc=$?; "
        f"rm -f {mount}/fact.md; cat {mount}/fact.md",
    )
    assert output.count("rc=1") == 2 and output.endswith("water is wet")
    assert memories_of(client, store_id) == {"/fact.md": "water is wet"}
    assert versions_by(client, store_id, session_id) == []


def test_two_sessions_editing_one_memory_keep_both_contents(
    client: anthropic.Anthropic, host: HostProcess
) -> None:
    store_id = new_store(client, "Plan", **{"/plan.md": "v0"})
    attach = {"type": "memory_store", "memory_store_id": store_id}
    first, second = new_session(client, attach), new_session(client, attach)
    plan = "/mnt/memory/plan/plan.md"
    # The second session reads the memory, then waits (in its sandbox) until
    # the first has written it, and writes its own content.
    ready = workspace_on_host(host, second) / "ready"
    go = workspace_on_host(host, second) / "go"
    command = (
        f"cat {plan} > /workspace/ready; "
        "while [ ! -e /workspace/go ]; do sleep 0.02; done; "
        f"printf second > {plan}"
    )
    client.beta.sessions.events.send(second, events=[message(f"$ {command}")])
    _wait_for(ready)
    assert ready.read_text() == "v0"
    bash_turn(client, first, f"printf first > {plan}")
    go.touch()
    wait_idle(client, second, timeout=WAIT)

    [told] = [e for e in client.beta.sessions.events.list(second) if e.type == "agent.tool_result"]
    note = told.content[-1].text  # type: ignore[union-attr]
    assert "Memory conflict: /mnt/memory/plan/plan.md" in note
    # The first write stays current; the second is kept as a version.
    assert memories_of(client, store_id) == {"/plan.md": "first"}
    [kept] = versions_by(client, store_id, second)
    assert (kept.content, kept.operation) == ("second", "modified")
    assert f"memory version {kept.id}" in note
    [mine] = versions_by(client, store_id, first)
    assert mine.content == "first"
    # The file shows the current content at once, before any next turn.
    on_host = workspace_on_host(host, second).parent / "mnt" / "memory" / "plan" / "plan.md"
    assert on_host.read_text() == "first"


def test_bad_memory_store_resources_are_refused(
    client: anthropic.Anthropic, server: ServerProcess
) -> None:
    live = new_store(client, "Live")
    archived = new_store(client, "Archived")
    client.beta.memory_stores.archive(archived)
    with pytest.raises(anthropic.NotFoundError, match=r"resources\.1\.memory_store_id"):
        new_session(
            client,
            {"type": "memory_store", "memory_store_id": live},
            {"type": "memory_store", "memory_store_id": "memstore_unknown"},
        )
    with pytest.raises(anthropic.BadRequestError, match=r"resources\.0\.memory_store_id"):
        new_session(client, {"type": "memory_store", "memory_store_id": archived})
    with pytest.raises(anthropic.BadRequestError, match=r"resources\.1\.memory_store_id"):
        new_session(
            client,
            {"type": "memory_store", "memory_store_id": live},
            {"type": "memory_store", "memory_store_id": live},
        )
    other = make_client(server.url, server.create_key(new_workspace="elsewhere"))
    with other as elsewhere, pytest.raises(anthropic.NotFoundError, match="memory_store_id"):
        new_session(elsewhere, {"type": "memory_store", "memory_store_id": live})
    session_id = new_session(client, {"type": "memory_store", "memory_store_id": live})
    with pytest.raises(anthropic.BadRequestError, match="type"):
        client.beta.sessions.resources.add(
            session_id,
            type="memory_store",  # type: ignore[arg-type]
            file_id="x",
        )
    [resource] = client.beta.sessions.resources.list(session_id).data
    with pytest.raises(anthropic.BadRequestError, match="memory_store resource"):
        client.beta.sessions.resources.delete(resource.id, session_id=session_id)  # type: ignore[union-attr]


def _wait_for(path: Path) -> None:
    """Polls for a file the sandbox writes (no wall-clock assertion)."""
    deadline = time.monotonic() + WAIT
    while not path.exists() or not path.read_text():
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.02)
