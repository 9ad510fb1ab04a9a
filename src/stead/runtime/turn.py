"""One claimed run of a session: agent-loop steps until the turn ends, waits, or fails.

Every step starts from the log (``harness.next_step``), so a run claimed again
after a crash simply continues. Every write is one fenced transaction
(``Store.run_write``): a process that lost the run's lease cannot append.
Side effects are bracketed by the ops ledger (DESIGN rule 5):

* model request: ``started`` with ``span.model_request_start``, ``completed`` with
  the answer's events. Idempotent: a crash in between re-asks the model.
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
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import anyio

from stead import usage as accounting
from stead.events import EventType
from stead.harness import (
    TOOL_USE_TYPES,
    AwaitInput,
    CallModel,
    EndTurn,
    McpTool,
    ModelRequest,
    ModelResponse,
    RunTools,
    UpstreamError,
    next_step,
    response_events,
    unresolved_tool_uses,
)
from stead.jsonvalues import Json
from stead.runtime import events as ev
from stead.runtime.deps import LoopDeps, ToolsUnavailable
from stead.runtime.mcp import McpCall, McpProblem
from stead.runtime.opkeys import op_key
from stead.runtime.plan import dangling_span, model_request
from stead.runtime.work import WORKER_TOOLS, in_doubt_result
from stead.store import (
    BudgetReached,
    DatabaseBusy,
    LeaseLost,
    NewEvent,
    OpRecord,
    RequestUsage,
    RunClaim,
    RunStart,
    RunStatus,
    RunWrite,
    SandboxLeaseEnded,
    WriteResult,
)
from stead.tools import ToolOutcome

log = logging.getLogger("stead.runtime")
MAY_HAVE_RUN = (
    "This call may have run: stead lost track of it when it restarted, and running it "
    "again could repeat its effect. Verify its effect before retrying."
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
class TurnRunner:
    deps: LoopDeps
    start: RunStart

    def __post_init__(self) -> None:
        self.claim: RunClaim = self.start.claim
        self.next_run: str | None = None
        self._usage: Json = dict(self.start.session.usage)
        self._log: list[Json] | None = None
        self._mcp_tools: tuple[McpTool, ...] | None = None
        """What the agent's MCP servers offer, asked once per run."""
        self._credentials_checked = False
        self._on_workers: bool | None = None
        """The session's environment is self-hosted: workers run its tools."""

    @property
    def session_id(self) -> str:
        return self.claim.session_id

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

    async def _write(self, events: Sequence[NewEvent] = (), **change: Any) -> WriteResult:
        since = self.deps.logs.since(self.session_id)
        done = await self.deps.store.run_write(
            self.claim, RunWrite(events=events, since=since, **change)
        )
        # Committed: now, and only now, readers may see it (rule 1).
        self.deps.bus.publish(self.session_id, done.logged)
        if done.next_run is not None:
            self.next_run = done.next_run
        assert done.log is not None
        self._log = self.deps.logs.add(self.session_id, since, done.log)
        return done

    async def _refresh(self) -> list[Json]:
        """The log as of this run's last commit (read only if the cache lost it)."""
        if self._log is None:
            self._log = await self.deps.logs.read(self.session_id)
        return self._log

    async def _steps(self) -> None:
        settings = self.deps.settings
        if self.claim.attempts > settings.max_run_attempts:
            await self._end(
                [
                    ev.session_error(
                        "unknown_error",
                        f"the turn failed {settings.max_run_attempts} times; giving up",
                        "exhausted",
                    )
                ],
                {"type": "retries_exhausted"},
                RunStatus.FAILED,
                answer_drained=False,
            )
        agent = self.start.session.agent
        self._log = self.deps.logs.add(self.session_id, self.start.since, self.start.log)
        if await self._self_hosted():
            # Queued before the model answers, so a worker is ready for its calls.
            await self.deps.work.ensure(self.start.session)
        planned = next(
            (e.id for e in self.start.opened if e.type == EventType.SPAN_MODEL_REQUEST_START), None
        )
        while True:
            events = await self._refresh()
            planned_tools = self.deps.mcp.cached(self.session_id, agent) if planned else None
            if planned_tools is not None and events and events[-1]["id"] == planned:
                # The claim opened the first request's span (``plan.py``): step
                # on the log as it planned it, and send that request, with the
                # MCP tools it offered.
                self._mcp_tools = planned_tools
                step = next_step(events[:-1])
                assert isinstance(step, CallModel)
                await self._model_step(agent, events[:-1], step.position, opened=planned)
                continue
            planned = None
            step = next_step(events)
            if isinstance(step, CallModel):
                await self._model_step(agent, events, step.position)
            elif isinstance(step, RunTools):
                await self._tools_step(step)
            elif isinstance(step, AwaitInput):
                stop = {"type": "requires_action", "event_ids": step.event_ids}
                await self._end([], stop, RunStatus.DONE, answer_drained=False)
            else:
                assert isinstance(step, EndTurn)
                await self._end([], {"type": "end_turn"}, RunStatus.DONE)

    async def _end(
        self,
        events: Sequence[NewEvent],
        stop_reason: Json | None,
        status: RunStatus,
        *,
        answer_drained: bool = True,
        drain: bool = True,
        **change: Any,
    ) -> None:
        """``stop_reason`` None: the session is terminated instead of idle."""
        self.deps.failpoints.hit("turn.before_idle")
        seconds = await self.deps.tools.active_seconds(self.session_id)
        if seconds is not None:
            # Booked in this write, up to the host's count: a replay books nothing twice.
            booked = float(self._usage.get("active_seconds") or 0.0)
            self._usage["active_seconds"] = max(booked, seconds)
        final = [*events, ev.session_usage(self._usage, self.start.session.budget)]
        if stop_reason is not None:
            final.append(ev.status_idle(stop_reason))
        await self._write(
            final,
            status=status,
            drain_pending=drain,
            answer_drained=answer_drained,
            sandbox_seconds=seconds,
            terminate=stop_reason is None,
            **change,
        )
        outcome = "terminated" if stop_reason is None else str(stop_reason["type"])
        self.deps.telemetry.turn_ended(self.session_id, self.claim.run_id, outcome)
        raise TurnOver

    # model requests

    async def _close_dangling_span(self, events: Sequence[Json]) -> None:
        """A request started by an attempt that died gets its end, marked as an error."""
        dangling = dangling_span(events)
        if dangling is not None:
            await self._write([ev.span_end(dangling, {}, is_error=True)])

    async def _model_step(
        self, agent: Json, events: list[Json], position: int, *, opened: str | None = None
    ) -> None:
        """``opened``: the span the claim opened for this very request."""
        mcp_tools = await self._offered_mcp_tools()
        request, key = model_request(
            self.deps, agent, events, self.claim.run_id, position, mcp_tools
        )
        if opened is None:
            await self._close_dangling_span(events)
            start = ev.new(EventType.SPAN_MODEL_REQUEST_START)
            try:
                await self._write([start], ops_started=[(key, "model")], budget_gate=True)
            except BudgetReached:
                # Queued messages stay queued: raising the budget answers them.
                stop = {"type": "budget_reached"}
                await self._end([], stop, RunStatus.DONE, answer_drained=False, drain=False)
            opened = start.id
        self.deps.failpoints.hit("model.before_request")
        try:
            response = await self._ask(agent["model"]["id"], request, key)
        except UpstreamError as exc:
            failed = [
                ev.span_end(opened, {}, is_error=True),
                ev.session_error(exc.error_type, str(exc), "exhausted"),
            ]
            await self._end(
                failed, {"type": "retries_exhausted"}, RunStatus.FAILED, answer_drained=False
            )
        self.deps.failpoints.hit("model.after_answer")
        found = response_events(response.content, agent, events, mcp_tools)
        answer = [ev.new(kind, body) for kind, body in found]
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
                {"type": "end_turn"},
                RunStatus.DONE,
                ops_completed=completed,
                usage=delta,
            )
        await self._write(recorded, ops_completed=completed, usage=delta)

    async def _offered_mcp_tools(self) -> tuple[McpTool, ...]:
        """The MCP tools this run offers the model: listed on its first request;
        a server that fails is reported (``session.error``, the turn goes on
        without its tools) and asked again next turn."""
        if self._mcp_tools is None:
            found = await self.deps.mcp.discover(self.start.session)
            if found.problems:
                await self._write([_mcp_error(p) for p in found.problems])
            self._mcp_tools = found.tools
        return self._mcp_tools

    async def _ask(self, model: str, request: ModelRequest, key: str) -> ModelResponse:
        """The model's answer, retrying retryable upstream errors with backoff."""
        settings = self.deps.settings
        client = self.deps.models.client_for(model)
        attempt = 0
        while True:
            try:
                with self.deps.telemetry.model_call(self.session_id, model) as call:
                    response = await client.complete(request, op_key=key)
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

    # tools

    async def _tools_step(self, step: RunTools) -> None:
        for use, reason in step.refuse:
            await self._write([ev.tool_result(use, ev.text(reason), True)])
        on_workers = await self._self_hosted()
        if not on_workers and any(self._in_sandbox(use) for use in step.run):
            await self._check_credentials()
        for index, use in enumerate(step.run):
            if use["type"] == EventType.AGENT_MCP_TOOL_USE:
                await self._run_mcp_tool(use)
            elif on_workers and use["name"] in WORKER_TOOLS:
                await self._run_on_worker(use)
            else:
                await self._run_tool_until_reached(use, not_run=step.run[index + 1 :])

    async def _self_hosted(self) -> bool:
        if self._on_workers is None:
            self._on_workers = await self.deps.work.self_hosted(self.start.session)
        return self._on_workers

    async def _run_on_worker(self, use: Json) -> None:
        """A worker of the session's environment runs the call and answers it
        with ``user.tool_result``; this run waits for the answer, then records
        the call as done. A worker that never answers gets it answered as in doubt."""
        name, tool_input = use["name"], use.get("input", {})
        key = op_key(f"work:{name}", tool_input, self.claim.run_id, use["id"])
        await self._write(ops_started=[(key, f"work:{name}")])
        work = self.deps.work
        await work.ensure(self.start.session)
        timeout = self.deps.settings.work_answer_timeout_seconds
        with self.deps.telemetry.tool_call(self.session_id, "self_hosted", name) as counted:
            answer = await work.answer(self.session_id, use["id"], timeout)
            counted.finished(is_error=answer is None or bool(answer.get("is_error")))
        if answer is None:
            message = f"no worker of this self-hosted environment answered within {timeout:g}s"
            session = self.start.session
            await work.record(
                session.workspace_id, session.id, [in_doubt_result(use["id"], message)]
            )
            answer = await work.answer(self.session_id, use["id"], timeout)
        is_error = bool(answer.get("is_error")) if answer is not None else True
        await self._write(ops_completed=[(key, {"is_error": is_error})])

    def _in_sandbox(self, use: Json) -> bool:
        return use["type"] == EventType.AGENT_TOOL_USE and use["name"] not in (
            self.deps.tools.sandbox_free
        )

    async def _check_credentials(self) -> None:
        """Once per run that uses the sandbox: a ``session.error`` for each vault
        credential whose hosts the environment forbids (the run goes on; the
        sandbox's requests to those hosts are refused)."""
        if self._credentials_checked:
            return
        self._credentials_checked = True
        found = await self.deps.tools.unreachable_credentials(self.start.session)
        errors = [
            ev.session_error(
                "credential_host_unreachable_error",
                f"credential {c.credential_id} ({c.secret_name}) is for "
                f"{', '.join(c.hosts)}, which the session's environment does not let its "
                "sandbox reach",
                "retrying",
                vault_id=c.vault_id,
                credential_id=c.credential_id,
            )
            for c in found
        ]
        if errors:
            await self._write(errors)

    async def _run_mcp_tool(self, use: Json) -> None:
        server, name, tool_input = use["mcp_server_name"], use["name"], use.get("input", {})
        key = op_key(f"mcp:{server}:{name}", tool_input, self.claim.run_id, use["id"])
        written = await self._write(ops_started=[(key, "mcp")])
        if written.started[key] is None or await self._read_only(server, name):
            self.deps.failpoints.hit("mcp.before_call")
            with self.deps.telemetry.tool_call(self.session_id, "mcp", name) as counted:
                call = await self.deps.mcp.call(self.start.session, server, name, tool_input, key)
                counted.finished(is_error=call.outcome.is_error)
            self.deps.failpoints.hit("mcp.after_call")
        else:
            call = McpCall(ToolOutcome(ev.text(MAY_HAVE_RUN), True))
        events = [ev.tool_result(use, call.outcome.content, call.outcome.is_error)]
        if call.problem is not None:
            events.append(_mcp_error(call.problem))
        await self._write(events, ops_completed=[(key, {"is_error": call.outcome.is_error})])

    async def _read_only(self, server: str, name: str) -> bool:
        """The server lists the tool as one that changes nothing."""
        offered = await self._offered_mcp_tools()
        return any(t.server == server and t.name == name and t.read_only for t in offered)

    async def _run_tool_until_reached(self, use: Json, *, not_run: Sequence[Json]) -> None:
        """Runs the call, waiting with backoff while the sandbox is down for a
        moment. A new try follows the ledger's rules for a call in doubt, unless
        no try so far can have reached the sandbox. After the last try the run
        fails and is retried once its lease expires."""
        attempt = 0
        reached = False
        while True:
            try:
                return await self._run_tool(
                    use, not_run=not_run, unsent=attempt > 0 and not reached
                )
            except ToolsUnavailable as exc:
                reached = reached or exc.reached
                if attempt >= self.deps.settings.upstream_retries:
                    raise
                attempt += 1
                await self._pause_for_retry(
                    attempt, "unknown_error", f"the sandbox is unavailable: {exc}"
                )

    async def _run_tool(
        self, use: Json, *, not_run: Sequence[Json] = (), unsent: bool = False
    ) -> None:
        """``unsent``: the ledger says started, but no try so far can have
        reached the sandbox, so any tool may run."""
        name, tool_input = use["name"], use.get("input", {})
        key = op_key(f"tool:{name}", tool_input, self.claim.run_id, use["id"])
        tools = self.deps.tools
        started = [(key, f"tool:{name}")]
        # One commit records the call as started (unless the ledger has it: it
        # says what it had) and renews the sandbox's lease, as the call would.
        lease = tools.lease_terms(self.start.session) if name not in tools.sandbox_free else None
        try:
            written = await self._write(ops_started=started, lease=lease)
        except SandboxLeaseEnded:
            # The lease ended: record the start alone; the call finds out for itself.
            written, lease = await self._write(ops_started=started), None
        previous: OpRecord | None = written.started[key]
        outcome: ToolOutcome
        if previous is None or unsent or name in tools.idempotent or name in tools.resumable:
            self.deps.failpoints.hit("tool.before_run")
            kind = "web" if name in tools.sandbox_free else "builtin"
            with self.deps.telemetry.tool_call(self.session_id, kind, name) as counted:
                outcome = await tools.run(
                    self.session_id, name, tool_input, key, renewed=lease is not None
                )
                counted.finished(is_error=outcome.is_error)
            self.deps.failpoints.hit("tool.after_run")
        else:
            outcome = ToolOutcome(ev.text(MAY_HAVE_RUN), True)
        result = ev.tool_result(use, outcome.content, outcome.is_error)
        completed = [(key, {"is_error": outcome.is_error})]
        if outcome.session_error is not None:
            await self._end_for_broken_sandbox(result, completed, not_run, outcome)
        await self._write([result], ops_completed=completed)

    async def _end_for_broken_sandbox(
        self,
        result: NewEvent,
        completed: list[tuple[str, Json]],
        not_run: Sequence[Json],
        outcome: ToolOutcome,
    ) -> None:
        """Every later call would fail the same way: answer the step's other
        tool uses unrun and end the turn with a ``session.error`` (one commit);
        a terminal one ends the session too (its queued messages are logged,
        unanswered, before ``session.status_terminated``)."""
        message = str(outcome.session_error)
        skipped = ev.text(f"not run: {message}")
        events = [result, *(ev.tool_result(use, skipped, True) for use in not_run)]
        retry = "terminal" if outcome.terminal else "exhausted"
        events.append(ev.session_error("unknown_error", message, retry))
        await self._end(
            events,
            None if outcome.terminal else {"type": "retries_exhausted"},
            RunStatus.FAILED,
            answer_drained=False,
            ops_completed=completed,
        )

    # interrupts

    async def finish_interrupted(self) -> None:
        """After an interrupt: close what is open, answer open tool uses, go idle."""
        # Read, not the log as of the last commit: the client may have answered
        # a tool use since (a custom tool result), which must not be answered twice.
        self._log = events = await self.deps.logs.read(self.session_id)
        await self._close_dangling_span(events)
        reason = "interrupted by the user before it finished"
        on_workers = await self._self_hosted()
        closing = [
            # A worker takes only a user.tool_result as an answer: it must not
            # run an interrupted call later.
            in_doubt_result(use["id"], reason)
            if on_workers and use["type"] == EventType.AGENT_TOOL_USE
            else ev.tool_result(use, ev.text(reason), True)
            for use in unresolved_tool_uses(events)
        ]
        with contextlib.suppress(TurnOver):
            await self._end(closing, {"type": "end_turn"}, RunStatus.DONE, answer_drained=False)


def _mcp_error(problem: McpProblem) -> NewEvent:
    """A server that could not be used: the turn goes on without it, and the
    next turn tries it again (``retrying``)."""
    return ev.session_error(
        problem.error_type, problem.message, "retrying", mcp_server_name=problem.server
    )
