"""The model steps of a turn (``turn.py``): the model request the log calls
for, the compaction it may need first, and the asking itself, with its retries,
each bracketed by the op ledger as ``turn.py``'s notes say."""

from __future__ import annotations

import functools
import logging
from collections.abc import Sequence
from typing import Any

from stead import usage as accounting
from stead.events import EventType
from stead.harness import (
    TOOL_USE_TYPES,
    CallModel,
    Compact,
    CompactionLimit,
    McpTool,
    MemoryPrompt,
    ModelRequest,
    ModelResponse,
    SkillPrompt,
    UpstreamError,
    compacted_body,
    media_bytes,
    megabytes,
    memory_search_offered,
    next_step,
    response_events,
)
from stead.jsonvalues import Json
from stead.runtime import events as ev
from stead.runtime.opkeys import op_key
from stead.runtime.plan import Planner, compaction, dangling_span, model_request, next_tool_start
from stead.runtime.previews import PreviewTracker
from stead.runtime.skills import resolve_skills
from stead.runtime.turn_tools import ToolSteps, mcp_error
from stead.store import BudgetReached, LimitReached, NewEvent, RequestUsage, RunStatus

log = logging.getLogger("stead.runtime")


class ModelSteps(ToolSteps):
    """Mixed into ``TurnRunner``, which provides the state and the writes
    (``ToolSteps``'s)."""

    _mcp_tools: tuple[McpTool, ...] | None
    _skills: tuple[SkillPrompt, ...] | None
    _memory: tuple[MemoryPrompt, ...]

    async def _close_dangling_span(self, events: Sequence[Json]) -> None:
        """A request started by an attempt that died gets its end, marked as an error."""
        dangling = dangling_span(events)
        if dangling is not None:
            await self._write([ev.span_end(dangling, {}, is_error=True)])

    async def _planned_step(self, agent: Json, events: list[Json], span_id: str) -> bool:
        """Sends the request the claim planned with the span ``span_id``: as the
        claim built it when this process made the claim, else built again from
        the same log with the MCP tools it offered. False when those tools are
        no longer known here (the span is then closed as a dangling one)."""
        held = self.deps.planned.take(span_id)
        tools = held.mcp_tools if held else self.deps.mcp.cached(self.session_id, agent)
        if tools is None:
            return False
        self._mcp_tools = tuple(tools)
        step = next_step(events)
        assert isinstance(step, CallModel)
        prepared = (held.request, held.key) if held else None
        await self._model_step(agent, events, step.position, opened=span_id, prepared=prepared)
        return True

    async def _model_step(
        self,
        agent: Json,
        events: list[Json],
        position: int,
        *,
        opened: str | None = None,
        prepared: tuple[ModelRequest, str] | None = None,
    ) -> None:
        """``opened``: the span the claim opened for this very request (the
        claim opens none for a request that needs compacting first);
        ``prepared``: the request and op key the claim built for it."""
        mcp_tools = await self._offered_mcp_tools()
        skills = await self._offered_skills()
        memory = self._memory
        request, key = prepared or model_request(
            self.deps,
            self.session_id,
            agent,
            events,
            self.claim.run_id,
            position,
            mcp_tools,
            skills,
            memory,
        )
        if opened is None:
            await self._close_dangling_span(events)
            planned = compaction(
                self.deps, agent, events, mcp_tools, skills, memory, request=request
            )
            if planned is not None:
                return await self._compact(agent["model"]["id"], planned)
            start = ev.new(EventType.SPAN_MODEL_REQUEST_START)
            await self._start_model_op([start], key, "model")
            opened = start.id
        self.deps.failpoints.hit("model.before_request")
        previews = PreviewTracker(functools.partial(self.deps.bus.preview, self.session_id))
        try:
            response = await self._ask(agent["model"]["id"], request, key, previews)
        except UpstreamError as exc:
            overflowed = _overflowed(exc, request, opened)
            if overflowed is not None:
                # The model counts more than the estimate did, or its API takes
                # fewer bytes than the media hold: by what the span's end
                # records, the next step compacts and asks again.
                error = ev.session_error(exc.error_type, f"{exc}; compacting", "retrying")
                await self._write([overflowed, error])
                return
            failed = [
                ev.span_end(opened, {}, is_error=True),
                ev.session_error(exc.error_type, _failure(exc, request), "exhausted"),
            ]
            await self._end(
                failed, {"type": "retries_exhausted"}, RunStatus.FAILED, answer_drained=False
            )
        self.deps.failpoints.hit("model.after_answer")
        search = memory_search_offered(agent, memory)
        content = response.content
        if response.cut_call:  # the answer's text and its whole calls stand
            log.warning("session %s: a tool call cut off by max_tokens; not run", self.session_id)
            content = content[:-1]
        found = response_events(content, agent, events, mcp_tools, memory_search=search)
        answer = previews.named(found)
        refused = response.stop_reason == "refusal"
        if refused:  # what a refused answer asked to run is not run (nor kept for later)
            answer = [e for e in answer if e.type not in TOOL_USE_TYPES]
        model = agent["model"]["id"]
        counters = accounting.request_usage(response.usage, self.deps.prices.price(model))
        self._usage = accounting.added(self._usage, counters)
        delta = RequestUsage(model, counters)  # written with the span's end: counted once
        recorded = [*answer, ev.span_end(opened, response.usage)]
        completed = [(key, {"stop_reason": response.stop_reason})]
        if not any(e.type in TOOL_USE_TYPES for e in answer):
            # A plain answer ends the turn: record it and go idle in one commit.
            await self._end(
                recorded,
                {"type": "refusal" if refused else "end_turn"},
                RunStatus.DONE,
                stop_details=ev.refusal_details(response.stop_details) if refused else None,
                ops_completed=completed,
                usage=delta,
            )
        then = await self._tool_start_ahead(answer)
        await self._write(recorded, ops_completed=completed, usage=delta, then=then)

    async def _tool_start_ahead(self, answer: Sequence[NewEvent]) -> Planner | None:
        """The plan that records the first tool call of the answer as started in
        the answer's own commit (``plan.next_tool_start``), when nothing the tool
        step does first comes between: no worker runs the calls, and the run's
        credential check has nothing to do (done, or no vault and no repository)."""
        uses = [e for e in answer if e.type == EventType.AGENT_TOOL_USE]
        if not uses or await self._self_hosted():
            return None
        session = self.start.session
        if not self._credentials_checked:
            if session.vault_ids or self._has_repositories():
                return None
            self._credentials_checked = True  # nothing to check: no vault, no repository
        free = self.deps.tools.sandbox_free
        needs_lease = any(u.body.get("name") not in free for u in uses)
        lease = await self.deps.tools.lease_terms(session) if needs_lease else None
        return functools.partial(next_tool_start, self.deps, lease=lease)

    async def _start_model_op(self, events: list[NewEvent], key: str, kind: str) -> None:
        """Records a model request as started, unless the session is at its budget
        or its workspace at a limit."""
        try:
            await self._write(events, ops_started=[(key, kind)], budget_gate=True)
        except BudgetReached:
            # Queued messages stay queued: raising the budget answers them.
            stop = {"type": "budget_reached"}
            await self._end([], stop, RunStatus.DONE, answer_drained=False, drain=False)
        except LimitReached as exc:
            # The spec's error for a spend limit; the next message asks again.
            error = ev.session_error("billing_error", str(exc), "exhausted")
            stop = {"type": "retries_exhausted"}
            await self._end([error], stop, RunStatus.DONE, answer_drained=False)

    async def _compact(self, model: str, planned: Compact | CompactionLimit) -> None:
        """Has the model summarise the older context and records the summary
        (``agent.thread_context_compacted``) with its usage, in one commit. A
        crash before that commit plans the same request again and re-asks. A
        summarising request the model refuses as too long is asked once more
        with each medium it showed a note (``Compact.without_media``)."""
        exhausted = {"type": "retries_exhausted"}
        if isinstance(planned, CompactionLimit):
            error = ev.session_error("compaction_limit_reached_error", planned.message, "exhausted")
            return await self._end([error], exhausted, RunStatus.FAILED, answer_drained=False)
        done: dict[str, Any] = {}
        try:
            try:
                response, key = await self._summarised(model, planned.request, planned.kept_from)
            except UpstreamError as exc:
                if not exc.too_long or planned.without_media is None:
                    raise
                # The model counts its media past their estimate (a dense PDF):
                # the summary can still name them, and the rest fits.
                message = f"{exc}; summarising: asking again with no media"
                await self._write([ev.session_error(exc.error_type, message, "retrying")])
                asked = planned.without_media
                response, key = await self._summarised(model, asked, planned.kept_from)
            counters = accounting.request_usage(response.usage, self.deps.prices.price(model))
            self._usage = accounting.added(self._usage, counters)
            done = {"usage": RequestUsage(model, counters), "ops_completed": [(key, {})]}
            body = compacted_body(response, planned)
        except UpstreamError as exc:  # an answer with no summary is counted all the same
            # A summarising request too long for the model: compacting is what failed.
            kind = "compaction_limit_reached_error" if exc.too_long else exc.error_type
            error = ev.session_error(kind, str(exc), "exhausted")
            return await self._end(
                [error], exhausted, RunStatus.FAILED, answer_drained=False, **done
            )
        await self._write([ev.new(EventType.AGENT_THREAD_CONTEXT_COMPACTED, body)], **done)

    async def _summarised(
        self, model: str, request: ModelRequest, kept_from: int
    ) -> tuple[ModelResponse, str]:
        """The model's answer to the summarising ``request``, and its op key."""
        key = op_key("compaction", request.as_params(), self.claim.run_id, kept_from)
        await self._start_model_op([], key, "compaction")
        self.deps.failpoints.hit("compaction.before_request")
        response = await self._ask(model, request, key)
        self.deps.failpoints.hit("compaction.after_answer")
        return response, key

    async def _offered_mcp_tools(self) -> tuple[McpTool, ...]:
        """The MCP tools this run offers the model: listed on its first request;
        a server that fails is reported (``session.error``, the turn goes on
        without its tools) and asked again next turn."""
        if self._mcp_tools is None:
            found = await self.deps.mcp.discover(self.start.session)
            reported = [mcp_error(p) for p in found.problems]
            reported += [ev.session_error("unknown_error", m, "retrying") for m in found.left_out]
            if reported:
                await self._write(reported)
            self._mcp_tools = found.tools
        return self._mcp_tools

    async def _offered_skills(self) -> tuple[SkillPrompt, ...]:
        """The skills this run describes to the model, resolved on its first
        request; one deleted since the agent named it is reported and left out."""
        if self._skills is None:
            session = self.start.session
            refs = session.agent.get("skills") or []
            found = await resolve_skills(self.deps.store, session.workspace_id, refs)
            if found.missing:
                await self._write(
                    [ev.session_error("unknown_error", m, "retrying") for m in found.missing]
                )
            self._skills = tuple(SkillPrompt(v.name, v.description) for v in found.versions)
        return self._skills

    async def _ask(
        self, model: str, request: ModelRequest, key: str, previews: PreviewTracker | None = None
    ) -> ModelResponse:
        """The model's answer, retrying retryable upstream errors with backoff;
        ``previews`` (none for a summary, which is never logged as a message)
        names what streams."""
        settings = self.deps.settings
        client = self.deps.models.client_for(model)
        attempt = 0
        while True:
            try:
                if previews is not None:
                    previews.restart()
                with self.deps.telemetry.model_call(self.session_id, model) as call:
                    response = await client.complete(request, op_key=key, observer=previews)
                    call.answered(response.usage)
                    return response
            except UpstreamError as exc:
                if not exc.retryable or attempt >= settings.upstream_retries:
                    raise
                attempt += 1
                await self._pause_for_retry(attempt, exc.error_type, str(exc), exc.retry_after)

    async def _pause_for_retry(
        self, attempt: int, error_type: str, message: str, retry_after: float | None = None
    ) -> None:
        """Says the turn is retrying (``session.error`` ``retrying``, rescheduled),
        backs off exponentially, and says it runs again."""
        settings = self.deps.settings
        backoff = settings.retry_initial_seconds * 2 ** (attempt - 1)
        delay = min(settings.retry_max_seconds, max(retry_after or 0.0, backoff))
        log.info("session %s: retry %d in %.1fs: %s", self.session_id, attempt, delay, message)
        await self._write(
            [
                ev.session_error(error_type, message, "retrying"),
                ev.new(EventType.SESSION_STATUS_RESCHEDULED),
            ],
            status=RunStatus.RETRYING,
        )
        await self.deps.clock.sleep(delay)
        await self._write([ev.new(EventType.SESSION_STATUS_RUNNING)], status=RunStatus.RUNNING)


def _overflowed(exc: UpstreamError, request: ModelRequest, opened: str) -> NewEvent | None:
    """The end of the span ``opened`` of a request refused so that compacting
    may cure it: too long for the model's window, or more bytes than its API
    takes (413) where its images and PDFs are the most of them (a summarising
    request shows none, and the part it keeps holds half as many)."""
    if exc.too_long:
        return ev.span_end(opened, {}, too_long=exc.counted or 0)
    if exc.too_large:
        size = len(request.canonical_params.encode())
        if 2 * media_bytes(request.messages) > size:
            return ev.span_end(opened, {}, too_large=size)
    return None


def _failure(exc: UpstreamError, request: ModelRequest) -> str:
    """What the session says of a refusal that ends the turn."""
    if not exc.too_large:
        return str(exc)
    size = megabytes(len(request.canonical_params.encode()))
    return (
        f"{exc}: the request ({size}) is larger than the model's API takes, and not for its "
        "images or PDFs, which compacting could leave out: its text, tools and system prompt "
        "make it so"
    )
