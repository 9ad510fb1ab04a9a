"""The memory block of the system prompt and the memory search tool: a session
with memory stores has each described (path, access, description,
instructions) and is offered ``stead_memory_search``, recorded as a built-in
tool use allowed without asking; one without stores, or whose agent has a
custom tool of that name, is offered nothing of it."""

from __future__ import annotations

from typing import Any

from stead.events import EventType
from stead.harness import MEMORY_SEARCH, build_request, memory_prompts, response_events

AGENT: dict[str, Any] = {"model": {"id": "claude-test"}, "system": "Be brief.", "tools": []}
LOG = [{"id": "sevt_1", "type": "user.message", "content": [{"type": "text", "text": "hi"}]}]
RESOURCES = [
    {"type": "file", "file_id": "file_1", "mount_path": "/mnt/session/uploads/file_1"},
    {
        "type": "memory_store",
        "memory_store_id": "memstore_1",
        "name": "Team <notes>",
        "description": "What we learnt",
        "access": "read_only",
        "instructions": "Cite the file.",
        "mount_path": "/mnt/memory/team-notes",
    },
]
DEFINITIONS = {MEMORY_SEARCH: {"name": MEMORY_SEARCH, "description": "d", "input_schema": {}}}
CALL = {"type": "tool_use", "id": "toolu_1", "name": MEMORY_SEARCH, "input": {"query": "q"}}


def test_memory_stores_are_described_and_searchable() -> None:
    memory = memory_prompts(RESOURCES)
    request = build_request(AGENT, LOG, DEFINITIONS, max_tokens=10, memory=memory)
    assert request.system is not None
    text = request.system[-1]["text"]
    assert "<name>Team &lt;notes&gt;</name>" in text
    assert "<path>/mnt/memory/team-notes</path>" in text and "<access>read_only</access>" in text
    assert "<instructions>Cite the file.</instructions>" in text and MEMORY_SEARCH in text
    assert [t["name"] for t in request.tools] == [MEMORY_SEARCH]
    ((kind, body),) = response_events([CALL], AGENT, LOG, memory_search=True)
    assert kind == EventType.AGENT_TOOL_USE
    assert (body["name"], body["evaluated_permission"]) == (MEMORY_SEARCH, "allow")


def test_without_stores_or_with_a_custom_tool_of_its_name_nothing_is_offered() -> None:
    plain = build_request(AGENT, LOG, DEFINITIONS, max_tokens=10)
    assert plain.tools == [] and plain.system is not None and len(plain.system) == 1
    ((_, refused),) = response_events([CALL], AGENT, LOG)
    assert refused["evaluated_permission"] == "deny"
    custom = {"type": "custom", "name": MEMORY_SEARCH, "description": "mine", "input_schema": {}}
    owner = {**AGENT, "tools": [custom]}
    request = build_request(
        owner, LOG, DEFINITIONS, max_tokens=10, memory=memory_prompts(RESOURCES)
    )
    assert [t["description"] for t in request.tools] == ["mine"]
    assert request.system is not None and MEMORY_SEARCH not in request.system[-1]["text"]
    ((kind, _),) = response_events([CALL], owner, LOG, memory_search=False)
    assert kind == EventType.AGENT_CUSTOM_TOOL_USE
