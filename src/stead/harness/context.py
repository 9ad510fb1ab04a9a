"""Session log -> Messages API request. Pure: the same log gives the same request.

Tool-use ids in the history are the ``agent.*_tool_use`` event ids, so the
request needs nothing but the log. Prompt-caching breakpoints go on the system
prompt, the last tool and the last message block, so each step re-reads the
whole prefix from the cache.

After a compaction (``agent.thread_context_compacted``) the history is the
latest one's summary, then the events from the first one it kept word for word
(``_internal.kept_from``, a ``seq``): older events never reach the model again.
The summary carries a breakpoint of its own, as it opens every request until
the next compaction.

A turn that ended in a refusal (its ``session.status_idle`` says ``refusal``)
never reaches the model again either, from the event after the turn before it
ended to that idle: shown the refused turn, a model refuses again, and the
Messages API asks a conversation to drop it before going on. The log keeps it.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType

from stead.events import EventType
from stead.harness.mcp import McpTool, definition, enabled_mcp_tools, model_tool_name
from stead.harness.memory import (
    MEMORY_SEARCH,
    MemoryPrompt,
    memory_prompt,
    memory_search_offered,
)
from stead.harness.model import ModelRequest
from stead.harness.skills import SkillPrompt, skills_prompt
from stead.jsonvalues import Json, canonical, canonical_array, weight

CACHE = {"type": "ephemeral"}
AGENT_TOOLSET = "agent_toolset_20260401"
USER_BLOCKS = ("text", "image", "document")


def enabled_builtin_tools(agent: Json) -> dict[str, Json]:
    """Name -> resolved config of every enabled built-in tool of the agent."""
    enabled: dict[str, Json] = {}
    for toolset in agent.get("tools", []):
        if toolset.get("type") != AGENT_TOOLSET:
            continue
        default = toolset["default_config"]
        configs = {c["name"]: c for c in toolset.get("configs", [])}
        for name in BUILTIN_NAMES:
            config = configs.get(name, {"name": name, **default})
            if config.get("enabled", default["enabled"]):
                enabled[name] = config
    return enabled


BUILTIN_NAMES = ("bash", "read", "write", "edit", "glob", "grep", "web_fetch", "web_search")
"""Built-in tools stead executes: in the session's sandbox, or in the brain
(web_fetch and web_search)."""


def custom_tools(agent: Json) -> dict[str, Json]:
    return {t["name"]: t for t in agent.get("tools", []) if t.get("type") == "custom"}


def _tool_definitions(
    agent: Json,
    builtin_definitions: Mapping[str, Json],
    mcp_tools: Sequence[McpTool],
    memory: Sequence[MemoryPrompt],
) -> list[Json]:
    tools = [dict(builtin_definitions[name]) for name in enabled_builtin_tools(agent)]
    if memory_search_offered(agent, memory):
        tools.append(dict(builtin_definitions[MEMORY_SEARCH]))
    tools += [definition(found.tool) for found in enabled_mcp_tools(agent, mcp_tools).values()]
    for tool in custom_tools(agent).values():
        tools.append(
            {
                "name": tool["name"],
                "description": tool["description"],
                "input_schema": tool["input_schema"],
            }
        )
    if tools:
        tools[-1] = {**tools[-1], "cache_control": CACHE}
    return tools


def _user_blocks(event: Json) -> list[Json]:
    return [dict(b) for b in event.get("content", []) if b.get("type") in USER_BLOCKS]


def _tool_result(event: Json, key: str) -> Json:
    content = [dict(b) for b in event.get("content") or []]
    block: Json = {"type": "tool_result", "tool_use_id": event[key], "content": content}
    if event.get("is_error"):
        block["is_error"] = True
    return block


def _system_message(event: Json) -> tuple[str, list[Json]]:
    text = "\n".join(b["text"] for b in event.get("content", []))
    return "user", [{"type": "text", "text": f"<system-message>\n{text}\n</system-message>"}]


def _thinking(event: Json) -> tuple[str, list[Json]] | None:
    internal = event.get("_internal", {})
    if "thinking" in internal:
        block = {"type": "thinking", "thinking": internal["thinking"]}
        return "assistant", [{**block, "signature": internal.get("signature", "")}]
    if "redacted" in internal:
        return "assistant", [{"type": "redacted_thinking", "data": internal["redacted"]}]
    return None


def _agent_text(event: Json) -> tuple[str, list[Json]]:
    return "assistant", [dict(b) for b in event.get("content", []) if b.get("type") == "text"]


def _tool_use(event: Json) -> tuple[str, list[Json]]:
    block = {"type": "tool_use", "id": event["id"], "name": event["name"]}
    return "assistant", [{**block, "input": event.get("input", {})}]


def _mcp_tool_use(event: Json) -> tuple[str, list[Json]]:
    name = model_tool_name(event["mcp_server_name"], event["name"])
    block = {"type": "tool_use", "id": event["id"], "name": name}
    return "assistant", [{**block, "input": event.get("input", {})}]


def _answer(key: str) -> Callable[[Json], tuple[str, list[Json]]]:
    return lambda event: ("user", [_tool_result(event, key)])


RENDERERS: Mapping[str, Callable[[Json], tuple[str, list[Json]] | None]] = MappingProxyType(
    {
        EventType.USER_MESSAGE: lambda event: ("user", _user_blocks(event)),
        "system.message": _system_message,
        EventType.AGENT_THINKING: _thinking,
        EventType.AGENT_MESSAGE: _agent_text,
        EventType.AGENT_TOOL_USE: _tool_use,
        EventType.AGENT_CUSTOM_TOOL_USE: _tool_use,
        EventType.AGENT_MCP_TOOL_USE: _mcp_tool_use,
        EventType.AGENT_TOOL_RESULT: _answer("tool_use_id"),
        EventType.USER_TOOL_RESULT: _answer("tool_use_id"),
        EventType.AGENT_MCP_TOOL_RESULT: _answer("mcp_tool_use_id"),
        EventType.USER_CUSTOM_TOOL_RESULT: _answer("custom_tool_use_id"),
    }
)
"""Event type -> what it contributes to the model's messages. A step renders the
whole log, most of which (spans, statuses, usage) contributes nothing: one lookup
turns those away, where a chain of comparisons with enum members cost
microseconds an event."""


def event_blocks(event: Json) -> tuple[str, list[Json]] | None:
    """The message role and content blocks an event contributes, if any."""
    render = RENDERERS.get(event["type"])
    return None if render is None else render(event)


def live_context(events: Sequence[Json]) -> tuple[str | None, list[Json]]:
    """The latest compaction's summary (None if none) and the events the model
    still sees word for word: those from its ``kept_from`` on, compactions and
    refused turns aside."""
    found = _latest_compaction(events)
    if found is None:
        return None, without_refused_turns(events)
    summary, start = found
    live = [e for e in events[start:] if not _is_compaction(e)]
    return summary, without_refused_turns(live)


def _latest_compaction(events: Sequence[Json], since: int = 0) -> tuple[str, int] | None:
    """The summary of the latest compaction at or after index ``since``, and the
    index of the first event it kept (None if there is none). The log is in
    ``seq`` order, so that event is found by bisection: a step on a long log
    does not walk the events summarised long ago."""
    for index in range(len(events) - 1, since - 1, -1):
        event = events[index]
        if _is_compaction(event):
            internal = event.get("_internal", {})
            start = bisect.bisect_left(events, int(internal["kept_from"]), key=_seq)
            return str(internal["summary"]), start
    return None


def without_refused_turns(events: Sequence[Json]) -> list[Json]:
    """``events`` less every turn that ended in a refusal: the events after the
    idle that ended the turn before it (an idle that waits for input ends no
    turn), up to and with the refusal's idle."""
    kept: list[Json] = []
    turn_start = 0
    for index, event in enumerate(events):
        ended = idle_reason(event)
        if ended is None or ended == "requires_action":
            continue
        if ended != "refusal":
            kept += events[turn_start : index + 1]
        turn_start = index + 1
    kept += events[turn_start:]
    return kept


def _seq(event: Json) -> int:
    return int(event["_seq"])


COMPACTED = str(EventType.AGENT_THREAD_CONTEXT_COMPACTED)
"""A plain string: the log is walked at every step, and reading an enum member
costs more than the comparison."""
IDLE = str(EventType.SESSION_STATUS_IDLE)


def _is_compaction(event: Json) -> bool:
    return bool(event["type"] == COMPACTED)


def idle_reason(event: Json) -> str | None:
    """The stop reason of a ``session.status_idle`` ("" if it names none); None
    for any other event."""
    if event["type"] != IDLE:
        return None
    reason = (event.get("stop_reason") or {}).get("type")
    return reason if isinstance(reason, str) else ""


def _is_refusal(event: Json) -> bool:
    return idle_reason(event) == "refusal"


def summary_block(summary: str) -> Json:
    text = f"<conversation-summary>\n{summary}\n</conversation-summary>"
    return {"type": "text", "text": text, "cache_control": CACHE}


def build_messages(events: Sequence[Json]) -> list[Json]:
    return render_messages(*live_context(events))


def render_messages(summary: str | None, events: Sequence[Json]) -> list[Json]:
    """Messages of ``events``, after a user turn holding ``summary`` if given."""
    finished: list[Json] = []
    role, blocks = ("user", [summary_block(summary)]) if summary is not None else (None, [])
    role, blocks = _merged(finished, role, blocks, events)
    if role is not None:
        finished.append(_finished(role, blocks))
    return _marked(finished)


def _merged(
    finished: list[Json], role: str | None, blocks: list[Json], events: Sequence[Json]
) -> tuple[str | None, list[Json]]:
    """The open message (``role``, ``blocks``) with the blocks of ``events`` added:
    each change of role finishes it onto ``finished`` and opens the next."""
    for event in events:
        found = event_blocks(event)
        if found is None or not found[1]:
            continue
        if found[0] == role:
            blocks.extend(found[1])
            continue
        if role is not None:
            finished.append(_finished(role, blocks))
        role, blocks = found[0], list(found[1])
    return role, blocks


def _finished(role: str, content: list[Json]) -> Json:
    if role == "user":
        # Tool results must lead the user turn that follows the tool uses.
        content = [b for b in content if b["type"] == "tool_result"] + [
            b for b in content if b["type"] != "tool_result"
        ]
    return {"role": role, "content": content}


def _marked(messages: list[Json]) -> list[Json]:
    """``messages`` with a cache breakpoint on the last block (a copy of it)."""
    if messages and messages[-1]["content"]:
        last = messages[-1]
        content = list(last["content"])
        content[-1] = {**content[-1], "cache_control": CACHE}
        messages[-1] = {"role": last["role"], "content": content}
    return messages


@dataclass(frozen=True, slots=True)
class Rendering:
    """``build_messages`` of a log with no refused turn in its context, kept
    so that a longer log that starts with it is rendered from where it ended:
    every model step renders the whole context otherwise, which grows with the
    session. After a compaction it renders the summary and the events from the
    first one kept (``start``). The messages before
    the last are finished (shared by the requests made from it, which only read
    them); the last is still open, as the next event of its role joins it."""

    count: int
    """How many events of the log it renders."""
    start: int
    """The index of the first event whose blocks it holds (0 with no compaction)."""
    first_id: str
    """The id of the event at ``start``."""
    last_id: str
    finished: tuple[Json, ...]
    finished_json: tuple[str, ...]
    """Each finished message in canonical form, encoded once when it finished."""
    open_role: str | None
    open_blocks: tuple[Json, ...]
    finished_weight: int
    """What the finished messages and their texts weigh (``jsonvalues.weight``)."""
    weight: int
    """Roughly the bytes it holds, the open message's included: caches of
    renderings are bounded by it."""

    def renders_prefix_of(self, events: Sequence[Json]) -> bool:
        count = self.count
        return (
            len(events) >= count > self.start
            and events[self.start]["id"] == self.first_id
            and events[count - 1]["id"] == self.last_id
        )

    def messages(self) -> list[Json]:
        """What ``build_messages`` gives for the log it renders."""
        messages = list(self.finished)
        if self.open_role is not None:
            messages.append(_finished(self.open_role, list(self.open_blocks)))
        return _marked(messages)

    def messages_with_json(self) -> tuple[list[Json], str]:
        """``messages()`` and their list in canonical form, in which only the last
        message (open, or a marked copy) is encoded now."""
        messages = self.messages()
        if not messages:
            return messages, canonical_array(())
        texts = [*self.finished_json[: len(messages) - 1], canonical(messages[-1])]
        return messages, canonical_array(texts)


def rendering(events: Sequence[Json], previous: Rendering | None = None) -> Rendering | None:
    """The ``Rendering`` of the log ``events``, carried on from ``previous`` when
    that renders a prefix of it and no compaction came since (else started over
    from the latest compaction, or from the log's start); None for a log whose
    context holds a refused turn (its history is not the events in a row:
    ``build_messages`` renders it whole)."""
    if not events:
        return None
    carried = previous if previous is not None and previous.renders_prefix_of(events) else None
    compacted = _latest_compaction(events, carried.count if carried is not None else 0)
    if compacted is not None:
        summary, start = compacted
        if start >= len(events):
            return None
        new = [e for e in events[start:] if not _is_compaction(e)]
        carried, blocks = None, [summary_block(summary)]
    elif carried is not None:
        start, new, blocks = carried.start, list(events[carried.count :]), list(carried.open_blocks)
    else:
        start, new, blocks = 0, list(events), []
    if any(_is_refusal(event) for event in new):
        return None
    finished = list(carried.finished) if carried is not None else []
    texts = list(carried.finished_json) if carried is not None else []
    role = carried.open_role if carried is not None else ("user" if blocks else None)
    role, blocks = _merged(finished, role, blocks, new)
    done = len(texts)
    texts += [canonical(message) for message in finished[done:]]
    finished_weight = (carried.finished_weight if carried is not None else 0) + sum(
        weight(message) + len(text)
        for message, text in zip(finished[done:], texts[done:], strict=True)
    )
    return Rendering(
        count=len(events),
        start=start,
        first_id=str(events[start]["id"]),
        last_id=str(events[-1]["id"]),
        finished=tuple(finished),
        finished_json=tuple(texts),
        open_role=role,
        open_blocks=tuple(blocks),
        finished_weight=finished_weight,
        weight=finished_weight + weight(blocks),
    )


def _system(
    agent: Json, skills: Sequence[SkillPrompt], memory: Sequence[MemoryPrompt]
) -> list[Json] | None:
    search = memory_search_offered(agent, memory)
    found = (agent.get("system"), skills_prompt(skills), memory_prompt(memory, search=search))
    texts = [text for text in found if text]
    blocks: list[Json] = [{"type": "text", "text": text} for text in texts]
    if not blocks:
        return None
    blocks[-1]["cache_control"] = CACHE
    return blocks


def build_request(
    agent: Json,
    events: Sequence[Json],
    builtin_definitions: Mapping[str, Json],
    *,
    max_tokens: int,
    mcp_tools: Sequence[McpTool] = (),
    skills: Sequence[SkillPrompt] = (),
    memory: Sequence[MemoryPrompt] = (),
) -> ModelRequest:
    """``mcp_tools``: what the agent's MCP servers listed (the runtime asks
    them); ``skills``: the agent's skills as the runtime resolved them;
    ``memory``: the session's memory stores (``memory_prompts``)."""
    return request_with(
        agent,
        build_messages(events),
        builtin_definitions,
        max_tokens=max_tokens,
        mcp_tools=mcp_tools,
        skills=skills,
        memory=memory,
    )


def request_with(
    agent: Json,
    messages: list[Json],
    builtin_definitions: Mapping[str, Json],
    *,
    max_tokens: int,
    mcp_tools: Sequence[McpTool] = (),
    skills: Sequence[SkillPrompt] = (),
    memory: Sequence[MemoryPrompt] = (),
    messages_json: str | None = None,
) -> ModelRequest:
    """The agent's request (system prompt, tools) carrying ``messages``
    (``messages_json``: their canonical form, when the caller has it)."""
    model = agent["model"]
    effort = model.get("effort")
    return ModelRequest(
        model=model["id"],
        system=_system(agent, skills, memory),
        tools=_tool_definitions(agent, builtin_definitions, mcp_tools, memory),
        messages=messages,
        max_tokens=max_tokens,
        messages_json=messages_json,
        effort=effort["type"] if isinstance(effort, dict) else effort,
        speed=model.get("speed"),
        inference_geo=model.get("inference_geo"),
    )
