"""The tool steps of a turn (``turn.py``): built-in calls in the sandbox, MCP
calls, and calls a self-hosted environment's workers run, each bracketed by the
op ledger as ``turn.py``'s notes say."""

from __future__ import annotations

import functools
import logging
from collections.abc import Sequence
from typing import Any

import anyio

from stead import usage as accounting
from stead.events import EventType
from stead.harness import MEMORY_SEARCH, McpTool, RunTools, withdrawn
from stead.jsonvalues import Json
from stead.runtime import events as ev
from stead.runtime.deps import LoopDeps, ToolsUnavailable
from stead.runtime.mcp import McpCall, McpProblem
from stead.runtime.opkeys import op_key
from stead.runtime.plan import Planner, next_model_step, tool_op
from stead.runtime.work import WORKER_TOOLS, in_doubt_result
from stead.schemas import repositories
from stead.store import (
    LimitReached,
    NewEvent,
    OpRecord,
    RequestUsage,
    RunClaim,
    RunStart,
    RunStatus,
    SandboxLeaseEnded,
    WriteResult,
)
from stead.tools import ToolOutcome

log = logging.getLogger("stead.runtime.turn")
SANDBOX_SECONDS_WAIT = 10.0
"""How long a call's result waits for the host's count of the sandbox's time."""
MAY_HAVE_RUN = (
    "This call may have run: stead lost track of it when it restarted, and running it "
    "again could repeat its effect. Verify its effect before retrying."
)


class ToolSteps:
    """Mixed into ``TurnRunner`` (under ``ModelSteps``), which provides the state
    and the writes below."""

    deps: LoopDeps
    start: RunStart
    claim: RunClaim
    _credentials_checked: bool
    _usage: Json
    _on_workers: bool | None
    _ahead: WriteResult | None

    @property
    def session_id(self) -> str:
        return self.claim.session_id

    async def _write(
        self, events: Sequence[NewEvent] = (), *, then: Planner | None = None, **change: Any
    ) -> WriteResult:
        raise NotImplementedError

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
        raise NotImplementedError

    async def _pause_for_retry(
        self, attempt: int, error_type: str, message: str, retry_after: float | None = None
    ) -> None:
        raise NotImplementedError

    async def _offered_mcp_tools(self) -> tuple[McpTool, ...]:
        raise NotImplementedError

    async def _tools_step(self, step: RunTools) -> None:
        # A call confirmed after sessions.update disabled its tool (or removed
        # its server) is answered as refused, not run.
        agent = self.start.session.agent
        refuse = list(step.refuse)
        run: list[Json] = []
        for use in step.run:
            reason = withdrawn(agent, use)
            if reason is None:
                run.append(use)
            else:
                refuse.append((use, reason))
        for use, reason in refuse:
            await self._write([ev.tool_result(use, ev.text(reason), True)])
        on_workers = await self._self_hosted()
        if not on_workers and any(self._in_sandbox(use) for use in run):
            await self._check_credentials()
        for index, use in enumerate(run):
            if use["type"] == EventType.AGENT_MCP_TOOL_USE:
                await self._run_mcp_tool(use)
            elif on_workers and use["name"] in WORKER_TOOLS:
                await self._run_on_worker(use)
            else:
                await self._run_tool_until_reached(use, not_run=run[index + 1 :])

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
        sandbox's requests to those hosts are refused), then the session's
        repositories cloned, a ``session.error`` for each that could not be
        (the run goes on without it; the next run tries again)."""
        if self._credentials_checked:
            return
        self._credentials_checked = True
        found = await self.deps.tools.unreachable_credentials(self.start.session)
        # Most sessions have no repository: no read of their clone states then. One
        # added since this run was claimed is cloned by the next run.
        failed = []
        if self._has_repositories():
            failed = await self.deps.tools.clone_repositories(self.session_id, self.claim.run_id)
        cloning = [
            ev.session_error(f.error_type, f.message, "retrying", repository_url=f.url)
            for f in failed
        ]
        errors = cloning + [
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

    def _has_repositories(self) -> bool:
        """The session has a repository resource (as the run's claim read it)."""
        return any(r.get("type") == repositories.TYPE for r in self.start.session.resources)

    async def _run_mcp_tool(self, use: Json) -> None:
        server, name, tool_input = use["mcp_server_name"], use["name"], use.get("input", {})
        key = op_key(f"mcp:{server}:{name}", tool_input, self.claim.run_id, use["id"])
        written = await self._write(ops_started=[(key, "mcp")])
        if written.started[key] is None or await self._read_only(server, name):
            self.deps.failpoints.hit("mcp.before_call")
            with self.deps.telemetry.tool_call(self.session_id, "mcp", name) as counted:
                call = await self.deps.mcp.call(self.start.session, server, name, tool_input, key)
                counted.finished(is_error=call.outcome.is_error, reached=not call.unreachable)
            self.deps.failpoints.hit("mcp.after_call")
        else:
            call = McpCall(ToolOutcome(ev.text(MAY_HAVE_RUN), True))
        events = [ev.tool_result(use, call.outcome.content, call.outcome.is_error)]
        if call.problem is not None:
            events.append(mcp_error(call.problem))
        await self._write(events, ops_completed=[(key, {"is_error": call.outcome.is_error})])

    async def _read_only(self, server: str, name: str) -> bool:
        """The server lists the tool as one that changes nothing."""
        offered = await self._offered_mcp_tools()
        return any(t.server == server and t.name == name and t.read_only for t in offered)

    async def _run_tool_until_reached(self, use: Json, *, not_run: Sequence[Json]) -> None:
        """Runs the call, waiting with backoff while the sandbox is down for a
        moment. A new try follows the ledger's rules for a call in doubt, unless
        no try so far can have reached the sandbox. When the sandbox's host has
        not answered by the last try, the sandbox moves to this process's host
        once and the call is tried there afresh. After the last try the run
        fails and is retried once its lease expires."""
        attempt = 0
        reached = moved = False
        while True:
            try:
                return await self._run_tool(
                    use, not_run=not_run, unsent=(attempt > 0 or moved) and not reached
                )
            except ToolsUnavailable as exc:
                reached = reached or exc.reached
                if attempt >= self.deps.settings.upstream_retries:
                    if moved or not exc.host_lost:
                        raise
                    if not await self.deps.tools.move_sandbox(self.session_id):
                        raise
                    moved, attempt = True, 0
                    continue
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
        key, op_kind = tool_op(use, self.claim.run_id)
        tools = self.deps.tools
        written = await self._started(key, op_kind, name)
        previous: OpRecord | None = written.started[key]
        outcome: ToolOutcome
        seconds = None
        if (
            previous is None
            or unsent
            or name in tools.idempotent
            or (name in tools.resumable and _same_placement(previous, written))
        ):
            self.deps.failpoints.hit("tool.before_run")
            kind = _kind(name, tools.sandbox_free)
            with self.deps.telemetry.tool_call(self.session_id, kind, name) as counted:
                outcome = await tools.run(
                    self.session_id, name, tool_input, key, lease=written.lease
                )
                counted.finished(is_error=outcome.is_error)
            self.deps.failpoints.hit("tool.after_run")
            if name not in tools.sandbox_free:
                # Booked with the result: the next call's lease checks the
                # session's and the month's sandbox time with this call's in it.
                seconds = self._booked(await self._sandbox_seconds())
        else:
            outcome = ToolOutcome(ev.text(MAY_HAVE_RUN), True)
        result = ev.tool_result(use, outcome.content, outcome.is_error)
        completed = [(key, {"is_error": outcome.is_error})]
        if outcome.session_error is not None:
            await self._end_for_broken_sandbox(result, completed, not_run, outcome)
        # The step's last result: the request that answers it starts in this commit.
        then = None if not_run else functools.partial(next_model_step, self.deps)
        await self._write(
            [result],
            ops_completed=completed,
            then=then,
            sandbox_seconds=seconds,
            **self._used(outcome),
        )

    async def _sandbox_seconds(self) -> float | None:
        """The host's count of the sandbox's awake time; None when it cannot be
        read now (the turn's end books it): the call's result is written anyway."""
        try:
            with anyio.fail_after(SANDBOX_SECONDS_WAIT):
                return await self.deps.tools.active_seconds(self.session_id)
        except Exception as exc:  # TimeoutError among them
            log.warning("session %s: sandbox time not booked now: %r", self.session_id, exc)
            return None

    def _booked(self, seconds: float | None) -> float | None:
        """``seconds``, the host's count of the sandbox's awake time, now in the
        session's usage as the write that books it leaves it (never lower)."""
        if seconds is not None:
            booked = float(self._usage.get("active_seconds") or 0.0)
            self._usage["active_seconds"] = max(booked, seconds)
        return seconds

    def _used(self, outcome: ToolOutcome) -> dict[str, RequestUsage]:
        """What the call adds to the session's usage, written with its result
        (counted once, as a model request is with its answer)."""
        if not outcome.used:
            return {}
        self._usage = accounting.added(self._usage, outcome.used)
        model = self.start.session.agent["model"]["id"]
        return {"usage": RequestUsage(model, dict(outcome.used))}

    async def _started(self, key: str, kind: str, name: str) -> WriteResult:
        """The write that recorded the call as started: the answer's, when it did
        (``ModelSteps._tool_start_ahead``), else one commit of its own, which also
        renews the sandbox's lease as the call would (unless the ledger has it: it
        says what it had)."""
        ahead, self._ahead = self._ahead, None
        if ahead is not None and key in ahead.started:
            return ahead
        tools = self.deps.tools
        started = [(key, kind)]
        terms = None if name in tools.sandbox_free else await tools.lease_terms(self.start.session)
        try:
            return await self._write(ops_started=started, lease=terms)
        except (SandboxLeaseEnded, LimitReached):
            # The lease ended, or a limit stops the sandbox: record the start
            # alone; the call finds out for itself (and its result says which).
            return await self._write(ops_started=started)

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


def _same_placement(previous: OpRecord, written: WriteResult) -> bool:
    """Whether the sandbox is still on the placement the op started on. A
    resumable call is made again with its op key only then: the host that
    holds its record sorts it out. A sandbox placed on a host since (its host
    was lost) never saw it and would run it again: the call is in doubt."""
    now = written.lease.placement if written.lease is not None else None
    return previous.placement is None or now is None or now == previous.placement


def _kind(name: str, sandbox_free: frozenset[str]) -> str:
    """The telemetry kind of a built-in tool call."""
    if name == MEMORY_SEARCH:
        return "memory"
    return "web" if name in sandbox_free else "builtin"


def mcp_error(problem: McpProblem) -> NewEvent:
    """A server that could not be used: the turn goes on without it, and the
    next turn tries it again (``retrying``)."""
    return ev.session_error(
        problem.error_type, problem.message, "retrying", mcp_server_name=problem.server
    )
