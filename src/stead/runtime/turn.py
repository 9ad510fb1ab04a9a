"""One claimed run of a session: agent-loop steps until the turn ends, waits, or fails.

Every step starts from the log (``harness.next_step``), so a run claimed again
after a crash simply continues. Every write is one fenced transaction
(``Store.run_write``): a process that lost the run's lease cannot append.
Side effects are bracketed by the ops ledger (DESIGN rule 5):

* model request: ``started`` with ``span.model_request_start``, ``completed`` with
  the answer's events. Idempotent: a crash in between re-asks the model.
* compaction (the model summarising the older context, ``plan.compaction``):
  ``started`` alone, ``completed`` with ``agent.thread_context_compacted``. Its
  request and key come from the log up to the kept part: a crash in between
  asks the same request again, and the summary is recorded once.
* tool call: ``started`` before it runs, ``completed`` with ``agent.tool_result``.
  After a crash in between, idempotent tools run again; ``bash`` is asked of the
  sandbox again under the same op key, which runs it at most once (re-attaching
  to a recorded or running command, running one that never reached it);
  anything else tells the model the call may have run and must be verified,
  and is never re-run.
* MCP tool call: the same, with ``agent.mcp_tool_result``; only a tool its
  server calls read-only runs again after a crash in between.
* tool call on a self-hosted environment: ``started``, then the worker's
  ``user.tool_result`` (``work.py``), then ``completed``. After a crash in
  between the run waits again: the worker, not this process, runs the call.

A run given up after its attempts answers every tool use it left open as one
that may have run: its op keys are the run's own, so a later turn would take
the call for a new one and run it again.

The runner here holds the run (its lease, writes, end and interrupt); the
model steps are ``turn_model.py``'s, the tool steps ``turn_tools.py``'s.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import anyio

from stead.events import EventType
from stead.harness import (
    AwaitInput,
    CallModel,
    EndTurn,
    McpTool,
    MemoryPrompt,
    RunTools,
    SkillPrompt,
    memory_prompts,
    next_step,
    unresolved_tool_uses,
)
from stead.jsonvalues import Json
from stead.runtime import events as ev
from stead.runtime.deps import LoopDeps
from stead.runtime.plan import Planner, dangling_span
from stead.runtime.turn_model import ModelSteps
from stead.runtime.work import in_doubt_result
from stead.store import (
    DatabaseBusy,
    EventRecord,
    LeaseLost,
    NewEvent,
    RunClaim,
    RunStart,
    RunStatus,
    RunWrite,
    WriteResult,
)

log = logging.getLogger("stead.runtime")
GIVEN_UP = (
    "This call may have run: its turn failed {attempts} times before the call's result "
    "was recorded, and was given up. Running it again could repeat its effect. Verify "
    "its effect before retrying."
)


def opening_events(attempts: int, *, max_attempts: int) -> list[NewEvent]:
    """What a run logs when it is claimed: running, after a cut if this is a retry;
    nothing past the attempt limit, where the run only gives up."""
    if attempts > max_attempts:
        return []
    opening = [ev.new(EventType.SESSION_STATUS_RUNNING)]
    if attempts > 1:
        opening.insert(0, ev.new(EventType.SESSION_STATUS_RESCHEDULED))
    return opening


class TurnOver(Exception):
    """The run is finished (its final events are written); unwinds the step loop."""


def _opened_span(logged: Sequence[EventRecord]) -> str | None:
    """The ``span.model_request_start`` among ``logged``, which only a plan logs
    with other events (``plan.py``)."""
    return next((e.id for e in logged if e.type == EventType.SPAN_MODEL_REQUEST_START), None)


def _first_cause(group: BaseExceptionGroup[BaseException]) -> BaseException:
    """The failure a turn's task group reports: ``LeaseLost`` if any (the run moved
    on, whatever else failed with it), else the first."""
    leaves: list[BaseException] = []
    pending: list[BaseException] = [group]
    while pending:
        exc = pending.pop(0)
        if isinstance(exc, BaseExceptionGroup):
            pending[:0] = exc.exceptions
        else:
            leaves.append(exc)
    lost = [exc for exc in leaves if isinstance(exc, LeaseLost)]
    return (lost or leaves or [group])[0]


@dataclass
class TurnRunner(ModelSteps):
    deps: LoopDeps
    start: RunStart

    def __post_init__(self) -> None:
        self.claim: RunClaim = self.start.claim
        self.next_run: str | None = None
        self._usage: Json = dict(self.start.session.usage)
        self._log: list[Json] | None = None
        self._mcp_tools: tuple[McpTool, ...] | None = None
        """What the agent's MCP servers offer, asked once per run."""
        self._skills: tuple[SkillPrompt, ...] | None = None
        """The agent's skills, resolved once per run."""
        self._memory: tuple[MemoryPrompt, ...] = memory_prompts(self.start.session.resources)
        """The session's memory stores (its resources say, and they never change)."""
        self._credentials_checked = False
        self._on_workers: bool | None = None
        """The session's environment is self-hosted: workers run its tools."""
        self._planned: str | None = None
        """The span of a model request the last write recorded as started (``plan.py``)."""
        self._ahead: WriteResult | None = None
        """The last write that made a plan's write too: a tool call it recorded as
        started is run on that start (``_run_tool``)."""

    async def run(self) -> None:
        """Runs the turn; keeps the lease alive meanwhile. Raises ``LeaseLost``."""
        self.deps.failpoints.hit("turn.before_start")
        claim = self.claim
        with self.deps.telemetry.turn(self.session_id, claim.run_id, claim.attempts):
            try:
                async with anyio.create_task_group() as group:
                    group.start_soon(self._heartbeat)
                    try:
                        with contextlib.suppress(TurnOver):
                            await self._steps()
                    finally:
                        group.cancel_scope.cancel()
            except BaseExceptionGroup as failed:
                # The task group wraps even a single failure; the actor tells a
                # lost lease from a failed run by the exception's type.
                raise _first_cause(failed) from failed

    async def _heartbeat(self) -> None:
        settings = self.deps.settings
        while True:
            await self.deps.clock.sleep(settings.lease_seconds / 3)
            try:
                renewed = await self.deps.store.renew_lease(
                    self.claim.run_id, self.claim.epoch, settings.lease_seconds
                )
            except DatabaseBusy as exc:  # the next beat tries again, within the lease
                log.warning("run %s: lease not renewed now: %s", self.claim.run_id, exc)
                continue
            if not renewed:
                raise LeaseLost(self.claim.run_id, self.claim.epoch)

    async def _write(
        self, events: Sequence[NewEvent] = (), *, then: Planner | None = None, **change: Any
    ) -> WriteResult:
        """``then``: the plan (made from the cached log) of the turn's next write,
        made in this commit when it returns one (``RunWrite.then``): the next model
        request's start, which the loop's next step sends, or the next tool
        call's, which its run takes (``_ahead``)."""
        since, held = self.deps.logs.held(self.session_id)
        plan = then(held) if then is not None else None
        with anyio.CancelScope(shield=True):
            # An interrupt does not stop a commit under way (the store finishes
            # it anyway): it waits for it, so the turn is closed on a log that
            # holds it (its span ended once, its tool uses answered).
            done = await self.deps.store.run_write(
                self.claim, RunWrite(events=events, since=since, then=plan, **change)
            )
        # Committed: now, and only now, readers may see it (rule 1).
        self.deps.bus.publish(self.session_id, done.logged)
        if done.next_run is not None:
            self.next_run = done.next_run
        if plan is not None:
            self._planned = _opened_span(done.logged)
            self._ahead = done
        assert done.log is not None
        self._log = self.deps.logs.add(self.session_id, since, done.log)
        return done

    async def _refresh(self) -> list[Json]:
        """The log as of this run's last commit (read only if the cache lost it)."""
        if self._log is None:
            self._log = await self.deps.logs.read(self.session_id)
        return self._log

    async def _steps(self) -> None:
        self._log = self.deps.logs.add(self.session_id, self.start.since, self.start.log)
        if self.claim.attempts > self.deps.settings.max_run_attempts:
            await self._give_up(await self._refresh())
        agent = self.start.session.agent
        if await self._self_hosted():
            # Queued before the model answers, so a worker is ready for its calls.
            await self.deps.work.ensure(self.start.session)
        self._planned = _opened_span(self.start.opened)
        while True:
            events = await self._refresh()
            # The claim, or the write before, may have opened the next request's
            # span (``plan.py``): then step on the log as it planned it, and send
            # that request.
            planned, self._planned = self._planned, None
            if (
                planned is not None
                and events
                and events[-1]["id"] == planned
                and await self._planned_step(agent, events[:-1], planned)
            ):
                continue
            step = next_step(events)
            if isinstance(step, CallModel):
                await self._model_step(agent, events, step.position)
            elif isinstance(step, RunTools):
                await self._tools_step(step)
            elif isinstance(step, AwaitInput):
                stop = {"type": "requires_action", "event_ids": step.event_ids}
                # Input logged after the log it stepped on came too late for it.
                seen = int(events[-1]["_seq"]) if events else 0
                # The turn is not over while its calls wait (spec §3.4): what
                # was queued meanwhile stays queued for the run that ends it.
                await self._end([], stop, RunStatus.DONE, drain=False, requeue_after=seen)
            else:
                assert isinstance(step, EndTurn)
                await self._end([], {"type": "end_turn"}, RunStatus.DONE)

    async def _give_up(self, events: list[Json]) -> None:
        """Ends a run past its attempt limit with ``retries_exhausted``. What its
        attempts left open is closed in the same commit: a model request's span
        ends as an error, and every tool use without a result gets one saying it
        may have run (an attempt may have started it; the ledger's keys are the
        run's own, so a later turn would run it again as a new call)."""
        attempts = self.deps.settings.max_run_attempts
        dangling = dangling_span(events)
        closing = [ev.span_end(dangling, {}, is_error=True)] if dangling is not None else []
        closing += await self._answers_to_open_uses(events, GIVEN_UP.format(attempts=attempts))
        error = ev.session_error(
            "unknown_error", f"the turn failed {attempts} times; giving up", "exhausted"
        )
        await self._end(
            [*closing, error],
            {"type": "retries_exhausted"},
            RunStatus.FAILED,
            answer_drained=False,
            closing=True,
        )

    async def _answers_to_open_uses(self, events: list[Json], reason: str) -> list[NewEvent]:
        """An error result, saying ``reason``, for each tool use of the last
        answer that has none: the turn that made them is over."""
        on_workers = await self._self_hosted()
        return [
            # A worker takes only a user.tool_result as an answer: it must not
            # run the call later.
            in_doubt_result(use["id"], reason)
            if on_workers and use["type"] == EventType.AGENT_TOOL_USE
            else ev.tool_result(use, ev.text(reason), True)
            for use in unresolved_tool_uses(events)
        ]

    async def _end(
        self,
        events: Sequence[NewEvent],
        stop_reason: Json | None,
        status: RunStatus,
        *,
        answer_drained: bool = True,
        drain: bool = True,
        stop_details: Json | None = None,
        **change: Any,
    ) -> None:
        """``stop_reason`` None: the session is terminated instead of idle."""
        self.deps.failpoints.hit("turn.before_idle")
        refused, seconds = await self.deps.tools.end_of_turn(
            self.session_id,
            self.start.session.workspace_id,
            claimed_without_lease=self.start.lease is None,
        )
        if refused is not None:
            # The turn is over, so the model is not told; the session's reader is.
            events = [*events, ev.session_error("unknown_error", refused, "retrying")]
        # Booked in this write, up to the host's count: a replay books nothing twice.
        self._booked(seconds)
        final = [*events, ev.session_usage(self._usage, self.start.session.budget)]
        if stop_reason is not None:
            final.append(ev.status_idle(stop_reason, stop_details))
        await self._write(
            final,
            status=status,
            drain_pending=drain,
            answer_drained=answer_drained,
            sandbox_seconds=seconds,
            terminate=stop_reason is None,
            **change,
        )
        # The readers woken by the write's publish frame the turn's last events
        # before this task winds the run and its actor down.
        await anyio.lowlevel.checkpoint()
        outcome = "terminated" if stop_reason is None else str(stop_reason["type"])
        self.deps.telemetry.turn_ended(self.session_id, self.claim.run_id, outcome)
        raise TurnOver

    # interrupts

    async def finish_interrupted(self) -> None:
        """After an interrupt: close what is open, answer open tool uses, go idle."""
        # Read, not the log as of the last commit: the client may have answered
        # a tool use since (a custom tool result), which must not be answered twice.
        self._log = events = await self.deps.logs.read(self.session_id)
        await self._close_dangling_span(events)
        closing = await self._answers_to_open_uses(
            events, "interrupted by the user before it finished"
        )
        with contextlib.suppress(TurnOver):
            # closing: a client's answer accepted since the read keeps its place.
            # What was queued before the interrupt is flushed (logged, not
            # answered); a message sent after it starts the next turn.
            await self._end(
                closing,
                {"type": "end_turn"},
                RunStatus.DONE,
                answer_drained=False,
                answer_after_interrupt=True,
                closing=True,
            )
