"""A turn's next model request, worked out inside the transaction before it.

When a run's first step is a model request, the claim records that request as
started (``span.model_request_start`` and the ledger's ``started``) in its own
commit, so the turn makes one transaction less; so does the write of a tool
step's last result, for the request that answers it (``RunWrite.then``). The
request is built from the log exactly as the runner builds it (rule 3): the
runner, finding its span opened, builds the same request with the same op key
and sends it. A crash after that commit recovers like one before any request:
the next attempt closes the span as an error and asks again.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

from stead import usage as accounting
from stead.events import EventType
from stead.harness import (
    CallModel,
    Compact,
    CompactionLimit,
    ContextLimits,
    McpTool,
    MemoryPrompt,
    ModelRequest,
    RunTools,
    SkillPrompt,
    context_window,
    memory_prompts,
    next_step,
    plan_compaction,
    request_with,
)
from stead.jsonvalues import Json
from stead.runtime import events as ev
from stead.runtime.deps import LoopDeps
from stead.runtime.opkeys import op_key, op_key_of
from stead.runtime.planned import PlannedRequest
from stead.store import EventRecord, LeaseTerms, RunClaim, RunWrite, SessionRecord

log = logging.getLogger("stead.runtime")

Plan = Callable[[RunClaim, SessionRecord, Sequence[EventRecord]], RunWrite | None]
Planner = Callable[[list[Json]], Plan]
"""A plan made from the log a runner's cache holds (``RunWrite.then``)."""


def model_request(
    deps: LoopDeps,
    session_id: str,
    agent: Json,
    events: Sequence[Json],
    run_id: str,
    position: int,
    mcp_tools: Sequence[McpTool],
    skills: Sequence[SkillPrompt] = (),
    memory: Sequence[MemoryPrompt] = (),
) -> tuple[ModelRequest, str]:
    """The request a model step at ``position`` of the session's log ``events``
    sends, and its op key."""
    messages, messages_json = deps.renderings.messages(session_id, events)
    request = request_with(
        agent,
        messages,
        deps.tools.definitions,
        max_tokens=deps.settings.max_output_tokens,
        mcp_tools=mcp_tools,
        skills=skills,
        memory=memory,
        messages_json=messages_json,
    )
    return request, op_key_of("model", request.canonical_params, run_id, position)


def compaction(
    deps: LoopDeps,
    agent: Json,
    events: Sequence[Json],
    mcp_tools: Sequence[McpTool],
    skills: Sequence[SkillPrompt] = (),
    memory: Sequence[MemoryPrompt] = (),
    *,
    request: ModelRequest,
) -> Compact | CompactionLimit | None:
    """What a model step must do first: compact the log's context, give up, or
    nothing (None: ``request``, the one the log calls for, fits its model's window)."""
    settings = deps.settings
    model = agent["model"]["id"]
    limits = ContextLimits(
        window=context_window(model, settings.context_windows, settings.openai_models),
        threshold=settings.compaction_threshold,
        keep_ratio=settings.compaction_keep_ratio,
        max_consecutive=settings.max_consecutive_compactions,
    )
    return plan_compaction(
        agent,
        events,
        deps.tools.definitions,
        max_tokens=settings.max_output_tokens,
        limits=limits,
        mcp_tools=mcp_tools,
        skills=skills,
        memory=memory,
        request=request,
        media=deps.media,
    )


def dangling_span(events: Sequence[Json]) -> str | None:
    """The last ``span.model_request_start`` if no end answers it."""
    # From the end: an end always follows its start, so only the events after
    # the last start can answer it (a long log is not walked every step).
    ended = set()
    for event in reversed(events):
        kind = event["type"]
        if kind == EventType.SPAN_MODEL_REQUEST_END:
            ended.add(event.get("model_request_start_id"))
        elif kind == EventType.SPAN_MODEL_REQUEST_START:
            start = str(event["id"])
            return None if start in ended else start
    return None


def next_model_step(deps: LoopDeps, held: list[Json]) -> Plan:
    """The plan for a claim, or a run's write (``RunWrite.then``), whose caller's
    log cache holds ``held`` (the log up to its ``since``): the model request the
    log calls for next, recorded as started in the same transaction. It runs on
    the store's writer, so it only reads ``held``, which the cache never changes
    in place."""

    def plan(
        claim: RunClaim, session: SessionRecord, tail: Sequence[EventRecord]
    ) -> RunWrite | None:
        if claim.attempts > deps.settings.max_run_attempts:
            return None
        if accounting.at_cap(session.budget, session.usage):
            return None  # the runner's gated write stops the turn

        # An agent with MCP servers whose tools are not listed yet: listing
        # takes I/O, which the claim's transaction must not wait for.
        mcp_tools = deps.mcp.cached(claim.session_id, session.agent)
        if mcp_tools is None:
            return None
        if session.agent.get("skills"):
            return None  # resolved by a store read, which the claim must not wait for
        try:
            events = held + [ev.as_log(r) for r in tail]
            step = next_step(events)
            if not isinstance(step, CallModel) or dangling_span(events) is not None:
                return None
            memory = memory_prompts(session.resources)
            agent = session.agent
            request, key = model_request(
                deps,
                claim.session_id,
                agent,
                events,
                claim.run_id,
                step.position,
                mcp_tools,
                memory=memory,
            )
            planned = compaction(deps, agent, events, mcp_tools, memory=memory, request=request)
            if planned is not None:
                return None  # the runner compacts first, with its own ledger entry
        except Exception:  # the runner meets the same problem and reports it
            log.exception("session %s: planning the first step failed", claim.session_id)
            return None
        start = ev.new(EventType.SPAN_MODEL_REQUEST_START)
        deps.planned.put(start.id, PlannedRequest(request, key, tuple(mcp_tools)))
        return RunWrite(events=[start], ops_started=[(key, "model")])

    return plan


def next_tool_start(deps: LoopDeps, held: list[Json], lease: LeaseTerms | None) -> Plan:
    """The plan for the write of a model's answer that asks for tools: the first
    call the step runs, recorded as started in the same transaction, with the
    sandbox's lease renewed as the call's own start does (``lease``, worked out
    before the write). None when the step first refuses a call, or its first
    call is not a built-in tool. The runner then runs the call on that start."""

    def plan(
        claim: RunClaim, session: SessionRecord, tail: Sequence[EventRecord]
    ) -> RunWrite | None:
        step = next_step(held + [ev.as_log(r) for r in tail])
        if not isinstance(step, RunTools) or step.refuse or not step.run:
            return None
        use = step.run[0]
        if use["type"] != EventType.AGENT_TOOL_USE:
            return None
        renewed = None if use["name"] in deps.tools.sandbox_free else lease
        return RunWrite(ops_started=[tool_op(use, claim.run_id)], lease=renewed)

    return plan


def tool_op(use: Json, run_id: str) -> tuple[str, str]:
    """The op key and kind of the built-in call ``use`` in the run: one for the
    answer's plan that records it as started and the call that records it itself."""
    name = use["name"]
    return op_key(f"tool:{name}", use.get("input", {}), run_id, use["id"]), f"tool:{name}"
