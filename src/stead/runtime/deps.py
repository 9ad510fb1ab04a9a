"""What the agent loop needs from the rest of stead, passed in, never global."""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol

from stead.config import Settings
from stead.failpoints import FailPoints
from stead.harness import MediaTokens
from stead.ids import new_id
from stead.jsonvalues import Json
from stead.prices import PriceTable, price_table
from stead.runtime.bus import Bus
from stead.runtime.clock import Clock, SystemClock
from stead.runtime.credentials import UnreachableCredential
from stead.runtime.logcache import LogCache
from stead.runtime.mcp import McpGateway
from stead.runtime.models import ModelRouter
from stead.runtime.planned import PlannedRequests
from stead.runtime.renderings import Renderings
from stead.runtime.repositories import CloneFailure
from stead.runtime.work import WorkQueue
from stead.store import LeaseTerms, SandboxLease, SessionRecord, Store
from stead.telemetry import Telemetry
from stead.tools import ToolOutcome


class ToolsUnavailable(Exception):
    """The session's sandbox cannot be reached right now (its host is
    restarting, the blob store is down on a wake); a later try may succeed."""

    def __init__(self, message: str, *, reached: bool, host_lost: bool = False) -> None:
        super().__init__(message)
        self.reached = reached
        """False when the call surely never reached the sandbox (it could not
        even be opened); True when it may have."""
        self.host_lost = host_lost
        """The sandbox's host did not answer at all (no connection, or none
        that lasted): when that outlasts the retries, the sandbox moves."""


class Toolbox(Protocol):
    """Runs built-in tools: in a session's sandbox, or (``sandbox_free``) in the brain."""

    @property
    def definitions(self) -> Mapping[str, Json]:
        """Tool name -> definition (name, description, input_schema) for the model."""
        ...

    @property
    def idempotent(self) -> frozenset[str]:
        """Tools that may safely run again after a crash (read, glob, grep)."""
        ...

    async def lease_terms(self, session: SessionRecord) -> LeaseTerms | None:
        """The sandbox lease every call for ``session`` renews (rule 9), for a
        caller that renews it in a write of its own and then calls ``run`` with
        the lease it wrote; None when sandboxes are not leased."""
        ...

    async def run(
        self,
        session_id: str,
        name: str,
        tool_input: Json,
        op_key: str,
        *,
        lease: SandboxLease | None = None,
    ) -> ToolOutcome:
        """Never raises for a tool failure (that is an error outcome); raises
        ``ToolsUnavailable`` when the sandbox is down for now; cancellation stops
        the tool and propagates. ``lease``: the session's lease as the caller
        has just renewed it on ``lease_terms`` (so the call does not), which
        also says which host holds the sandbox."""
        ...

    async def move_sandbox(self, session_id: str) -> bool:
        """The session's sandbox's host stopped answering (``ToolsUnavailable``
        with ``host_lost``, past the retries): its lease moves to this process's
        host, fenced against other movers. True when calls now go to another
        host (which restores the sandbox from its latest snapshot); False when
        there is none to go to."""
        ...

    @property
    def resumable(self) -> frozenset[str]:
        """Tools the sandbox runs at most once per op key (bash): after a crash a
        call is made again with the same op key and the sandbox sorts it out."""
        ...

    @property
    def sandbox_free(self) -> frozenset[str]:
        """Tools that run without the session's sandbox (web_fetch, web_search):
        a call neither makes nor wakes one, nor renews its lease."""
        ...

    async def unreachable_credentials(self, session: SessionRecord) -> list[UnreachableCredential]:
        """The session's vault credentials its sandbox can never use, because
        its environment forbids their hosts."""
        ...

    async def credentials_changed(self, source: str | None) -> None:
        """A credential of vault ``source`` changed, or session ``source``'s
        repository tokens (None: any may have): the sandboxes served here that
        use them get the new set now (or at their next call, if unreachable now)."""
        ...

    def resources_changed(self, session_id: str) -> None:
        """The session's resources changed: its sandbox, if served here, is
        staged again before its next use."""
        ...

    async def clone_repositories(self, session_id: str, run_id: str) -> list[CloneFailure]:
        """Clones the session's repository resources that are not cloned yet into
        its sandbox, each once; the ones that failed (never raises for those)."""
        ...

    async def active_seconds(self, session_id: str) -> float | None:
        """The host's cumulative count of the session's sandbox's active time,
        when this process gave the session a sandbox (None otherwise, or when
        the host cannot say). Wakes nothing."""
        ...

    async def end_of_turn(
        self, session_id: str, workspace_id: str, *, claimed_without_lease: bool = False
    ) -> tuple[str | None, float | None]:
        """(refusal, active seconds). Files what the session's sandbox wrote to
        ``/mnt/session/outputs`` into the Files API, each content once
        (``mounts.py``), never raising for a sandbox or blob store that fails;
        the refusal names the outputs the workspace's file storage quota left
        out, if any. Active seconds: the host's cumulative count of the
        sandbox's active time, when this process used it (None otherwise).
        Never wakes or renews anything. ``claimed_without_lease``: the session
        had no sandbox lease when its run was claimed (``RunStart.lease``)."""
        ...

    async def destroy(self, listed: SandboxLease) -> SandboxLease | None:
        """Destroys an expired lease's sandbox and books its active time (the
        lease sweeper's work); the lease it ended, as read then (None: in use)."""
        ...

    async def forget(self, sandbox_id: str, incarnation: str) -> None:
        """Another process destroyed the sandbox of the lease that started at
        ``incarnation``: what this one held of it goes, unless the lease is
        active again or a newer one."""
        ...

    async def aclose(self) -> None: ...


@dataclass(frozen=True)
class LoopDeps:
    settings: Settings
    store: Store
    bus: Bus
    models: ModelRouter
    tools: Toolbox
    mcp: McpGateway
    clock: Clock
    owner: str
    failpoints: FailPoints
    logs: LogCache
    work: WorkQueue
    """Self-hosted environments' work queue (``work.py``)."""
    telemetry: Telemetry
    prices: PriceTable
    """List prices each model request is costed at (``STEAD_MODEL_PRICES``)."""
    planned: PlannedRequests = field(default_factory=PlannedRequests)
    """First requests the claims planned, until their runners send them."""
    renderings: Renderings = field(default_factory=Renderings)
    """Each busy session's log as last rendered for the model (``renderings.py``)."""
    media: MediaTokens = field(default_factory=MediaTokens)
    """What each PDF in a request counts, worked out once (``harness.windows``)."""


def build_loop(
    settings: Settings,
    store: Store,
    bus: Bus,
    tools: Toolbox,
    mcp: McpGateway,
    failpoints: FailPoints | None = None,
    telemetry: Telemetry | None = None,
) -> LoopDeps:
    """The agent loop's dependencies from settings, for a process that owns runs."""
    logs = LogCache(store)
    return LoopDeps(
        settings=settings,
        store=store,
        bus=bus,
        models=ModelRouter(settings),
        tools=tools,
        mcp=mcp,
        clock=SystemClock(),
        owner=f"{socket.gethostname()}:{os.getpid()}:{new_id('run')}",
        failpoints=failpoints or FailPoints(None),
        logs=logs,
        work=WorkQueue(settings, store, bus, logs, failpoints),
        telemetry=telemetry or Telemetry(),
        prices=price_table(settings.model_prices, settings.openai_models),
    )
