"""The built-in toolset running in per-session sandboxes (``stead.tools`` over
a ``SandboxProvider``, chosen once at start by ``stead.sandbox.open_provider``),
but for the web tools and the memory search, which run here in the brain
(``webtools.py``, ``memory_tool.py``).

A session with memory store resources has them staged with its other mounts
and, after each call that can change files, what the agent changed in them
written back (``memory_mounts.py``); what the agent must hear of that (a
conflict, a file that cannot be saved) ends the call's result.

A session's sandbox id is the session id. A provider whose sandboxes outlive
the process (``leased``) binds each to a lease (rule 9): every call renews it,
and a call after it ended stops the tools there.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping
from functools import partial
from types import MappingProxyType
from typing import Protocol

from stead import tools
from stead.blobs import BlobError
from stead.config import Settings
from stead.failpoints import FailPoints
from stead.harness import MEMORY_SEARCH
from stead.jsonvalues import Json
from stead.runtime import repositories
from stead.runtime.credentials import SessionCredentials, UnreachableCredential
from stead.runtime.files import FileKeeper
from stead.runtime.keyed_locks import KeyedLocks
from stead.runtime.memories import MemoryKeeper
from stead.runtime.memory_mounts import MemoryMounts, MemorySession
from stead.runtime.memory_tool import DEFINITION as MEMORY_SEARCH_DEFINITION
from stead.runtime.memory_tool import MemorySearchTool
from stead.runtime.mounts import MountsStore, SessionMounts, SkillFiles
from stead.runtime.placements import SandboxPlacements
from stead.runtime.repositories import CloneFailure
from stead.runtime.sandbox_failures import sandbox_broken, sandbox_unavailable
from stead.runtime.sandboxconfig import sandbox_config, session_networking
from stead.runtime.served import HeldSandboxes, SandboxView, Served
from stead.runtime.session_leases import RENEWALS_PER_TTL, SessionLeases, renewing
from stead.runtime.together import together
from stead.runtime.webtools import WebTools
from stead.sandbox import (
    HostUnreachable,
    NoSandbox,
    Sandbox,
    SandboxConfig,
    SandboxError,
    SandboxMoved,
    SandboxProvider,
    SandboxUnavailable,
    Terminal,
    TerminalRequest,
    WorkspaceUnavailable,
)
from stead.store import (
    DatabaseBusy,
    EnvironmentStore,
    LeaseExpiry,
    LeaseStore,
    LeaseTerms,
    MemoryStoreStore,
    SandboxLease,
    SandboxLeaseStatus,
    SessionRecord,
    UsageStore,
    single_brain,
)
from stead.telemetry import Telemetry
from stead.tools import ToolOutcome

log = logging.getLogger("stead.runtime.toolbox")

DEFINITIONS: Mapping[str, Json] = MappingProxyType(
    {**tools.DEFINITIONS, MEMORY_SEARCH: MEMORY_SEARCH_DEFINITION}
)
"""The built-in tools and the memory search, which the harness offers to a
session with memory stores."""


class ToolboxStore(
    MountsStore, EnvironmentStore, LeaseStore, UsageStore, MemoryStoreStore, Protocol
):
    """What the sandbox toolbox uses: sessions and their environments, sandbox
    leases (and where they place sandboxes) and time, and what its mounts use."""


class SandboxToolbox:
    def __init__(
        self,
        settings: Settings,
        store: ToolboxStore,
        provider: SandboxProvider,
        credentials: SessionCredentials,
        telemetry: Telemetry | None = None,
        *,
        files: FileKeeper | None = None,
        skills: SkillFiles | None = None,
        memories: MemoryKeeper | None = None,
        failpoints: FailPoints | None = None,
    ) -> None:
        self._settings = settings
        self._telemetry = telemetry or Telemetry()
        self._store = store
        self._provider = provider
        self._placements = SandboxPlacements(store, provider)
        self._leases = SessionLeases(store, self._placements, settings.sandbox_lease_seconds)
        self._credentials = credentials
        self._held = HeldSandboxes(provider, credentials)
        self._sandbox_locks = KeyedLocks()
        """By sandbox id: held while its sandbox is acquired and staged, or
        destroyed: a destroy never comes between a call's staging and its use.
        The only lock of an acquire: one sandbox slow to come (a wake from a
        far blob store) holds up no other session."""
        self._web = WebTools(settings, store, credentials)
        one_brain = single_brain(settings.resolved_database_url)
        self._resumable = tools.RESUMABLE_TOOLS if provider.leased or one_brain else frozenset()
        mounts = provider.mounts()
        self._failpoints = failpoints or FailPoints(None)
        self._mounts = None
        if mounts is not None and files is not None:
            self._mounts = SessionMounts(
                store,
                mounts,
                files,
                self._failpoints,
                skills=skills,
                max_file_bytes=settings.max_mounted_file_bytes,
            )
        self._memory = None
        if mounts is not None and memories is not None:
            self._memory = MemoryMounts(store, mounts, memories, self._failpoints)
        self._search = MemorySearchTool(store, memories) if memories is not None else None

    @property
    def served(self) -> int:
        """Sessions whose sandbox this process serves: a handle, the credentials
        it gave it, its staging; kept until the sandbox is destroyed, here or
        (``forget``) by another process."""
        return len(self._held.served)

    @property
    def leased(self) -> bool:
        """Sandboxes outlive this process under leases the sweeper ends."""
        return self._provider.leased

    @property
    def definitions(self) -> Mapping[str, Json]:
        return DEFINITIONS

    @property
    def idempotent(self) -> frozenset[str]:
        return tools.IDEMPOTENT_TOOLS | {MEMORY_SEARCH}

    @property
    def resumable(self) -> frozenset[str]:
        """The tools whose in-doubt call is made again with its op key, for the
        sandbox's own op records to sort out. Those records are in the host
        (``leased``: every process reaches it) or, for a process-local provider
        (``unsafe_local``), in this process's data directory: on a shared store
        another process may have started the call, in a directory this one
        never sees, so there every in-doubt call "may have run"."""
        return self._resumable

    @property
    def sandbox_free(self) -> frozenset[str]:
        return frozenset(tools.WEB_TOOL_NAMES) | {MEMORY_SEARCH}

    def _follow(self, lease: SandboxLease | None) -> None:
        """Calls for the lease's sandbox go where it places it; a sandbox that
        went elsewhere is acquired and staged again there."""
        if lease is not None and self._placements.follow(lease):
            self._held.moved(lease.sandbox_id)

    async def move_sandbox(self, session_id: str) -> bool:
        """The session's sandbox's host does not answer: its lease moves to this
        process's host (``placements.py``); True when its calls now go to
        another host, which restores the workspace from its latest snapshot."""
        try:
            moved = await self._placements.move_here(session_id)
        except DatabaseBusy as exc:
            log.warning("session %s: sandbox not moved now: %s", session_id, exc)
            return False
        if moved:
            self._held.moved(session_id)
        return moved

    async def terminal(self, session_id: str, request: TerminalRequest) -> Terminal:
        """Attaches to a terminal in the session's sandbox; ``NoSandbox`` when
        this server's provider has none. The lease is renewed until attached,
        as while a tool call runs: staging and a wake may outlast its TTL."""
        attach = partial(self._attach, session_id, request)
        return await renewing(attach, partial(self.renew, session_id), self.lease_renewal_seconds)

    async def _attach(self, session_id: str, request: TerminalRequest) -> Terminal:
        await self.renew(session_id)
        async with self._sandbox_locks.hold(session_id):
            config = await self._serve(session_id)
            await self._stage(session_id, config)
        return await self._provider.terminal(session_id, config, request)

    async def _sandbox(self, session_id: str, *, renewed: bool = False) -> Sandbox:
        if not renewed:
            await self.renew(session_id)
        async with self._sandbox_locks.hold(session_id):
            before = self._held.served.get(session_id)
            # Read on every call, not only the first: an environments.update
            # (or a sessions.update of the agent's MCP servers) reaches a
            # sandbox given out before it with its next call (its egress rules
            # at once), as it reaches a session created after it.
            config = await self._serve(session_id)
            found = self._held.handles.get(session_id)
            if found is None or before is None or before.config != config:
                # The old handle is not closed: a call in flight may hold it.
                with self._telemetry.sandbox_acquire(session_id):
                    found = await self._provider.acquire(session_id, config)
                self._held.handles[session_id] = found
            if self._held.secrets.stale(session_id):  # a change that could not be pushed at once
                await self._held.secrets.give(self._held.served[session_id])
            await self._stage(session_id, self._held.served[session_id].config)
        return found

    @property
    def mounts_supported(self) -> bool:
        """Whether sessions' file resources and outputs reach their sandboxes."""
        return self._mounts is not None

    def resources_changed(self, session_id: str) -> None:
        """The session's resources changed: its sandbox is staged before its next use."""
        self._held.restage(session_id)

    async def _stage(self, session_id: str, config: SandboxConfig) -> None:
        if self._mounts is None or session_id not in self._held.stale_mounts:
            return
        await self._mounts.stage(session_id, config)
        memory = self._held.served[session_id].memory
        if self._memory is not None and memory.mounts:
            self._held.tell(session_id, await self._memory.stage(memory, config))
        self._held.stale_mounts.discard(session_id)

    async def _write_back(self, memory: MemorySession, config: SandboxConfig) -> list[str]:
        """What the agent changed in its memory mounts, written back; a sandbox,
        blob store or database that fails now leaves it to the next write-back."""
        if self._memory is None or not memory.writable:
            return []
        try:
            return await self._memory.write_back(memory, config)
        except (SandboxError, BlobError, DatabaseBusy) as exc:
            log.warning("memories of session %s not written back yet: %s", memory.id, exc)
            return []

    async def end_of_turn(
        self, session_id: str, workspace_id: str, *, claimed_without_lease: bool = False
    ) -> tuple[str | None, float | None]:
        """``capture_outputs`` and ``active_seconds``: when this process gave the
        session a sandbox, two round trips to its host, made at once."""
        capture = partial(
            self.capture_outputs,
            session_id,
            workspace_id,
            claimed_without_lease=claimed_without_lease,
        )
        if session_id not in self._held.handles:
            return await capture(), None
        return await together(capture, partial(self.active_seconds, session_id))

    async def capture_outputs(
        self, session_id: str, workspace_id: str, *, claimed_without_lease: bool = False
    ) -> str | None:
        """Files what the session's sandbox wrote to its outputs (never wakes it).
        A sandbox or blob store that fails is logged: the next capture (after
        the next turn, or at release) files what this one missed. Returns the
        message naming outputs left over the workspace's quota, if any."""
        if self._mounts is None:
            return None
        if claimed_without_lease and session_id not in self._held.served:
            # No sandbox when the run was claimed, none from this process since:
            # nothing to read. One a terminal on another server made meanwhile
            # is captured after the next turn, or at release.
            return None
        lease = await self._store.sandbox_lease(session_id)
        if lease is None or lease.expiry_reason == LeaseExpiry.SESSION_DELETED:
            return None  # no sandbox, or no session: nothing to capture, no host to start
        self._follow(lease)
        # Resources may have changed in another brain meanwhile: staged again
        # before the next turn's first call.
        self._held.restage(session_id)
        refusal = None
        try:
            refusal = (await self._mounts.capture(session_id, workspace_id)).refusal()
        except (SandboxError, BlobError) as exc:
            log.warning("outputs of session %s not captured yet: %s", session_id, exc)
        served = self._held.served.get(session_id)
        if served is not None:
            memory, config = served.memory, served.config
        else:  # served by another process before (a recovered turn, a sweep)
            session = await self._store.session_snapshot(session_id)
            memory = MemorySession.of(session)
            if not memory.writable:
                return refusal
            config = await self._config(session)
        self._held.tell(session_id, await self._write_back(memory, config))
        return refusal

    async def _config(self, session: SessionRecord) -> SandboxConfig:
        environment = await self._store.get_environment(
            session.workspace_id, session.environment_id
        )
        config = sandbox_config(
            self._settings, environment.config, session.agent.get("mcp_servers") or ()
        )
        if session.agent.get("skills") and self._mounts is not None:
            config = dataclasses.replace(config, skills=True)
        return config

    async def _serve(self, session_id: str) -> SandboxConfig:
        """The session's sandbox config as it is now; its credentials given to
        the sandbox if they are stale."""
        session = await self._store.session_snapshot(session_id)
        config = await self._config(session)
        served = self._held.served.get(session_id)
        if served is None:
            served = Served(
                session_id,
                session.workspace_id,
                tuple(session.vault_ids),
                config,
                MemorySession.of(session),
            )
            self._held.served[session_id] = served
            self._held.secrets.mark_stale(session_id)
            self._held.stale_mounts.add(session_id)
        elif served.config != config:  # the environment or the session's agent changed since
            served = dataclasses.replace(served, config=config)
            self._held.served[session_id] = served
        await self._held.secrets.give(served)
        return config

    async def credentials_changed(self, source: str | None) -> None:
        """A credential of vault ``source`` was added, changed, archived or deleted
        (or the vault itself), or session ``source``'s repository tokens changed
        (None: any may have, as when notices from other processes were lost):
        every sandbox this process gave credentials and whose session uses them
        gets the new set now, so a revoked credential stops being injected at
        once. One that cannot be reached now gets it before its next use."""
        for session_id, served in list(self._held.served.items()):
            if source is not None and source not in served.vault_ids and source != session_id:
                continue
            async with self._sandbox_locks.hold(session_id):
                if self._held.served.get(session_id) is not served:
                    continue  # let go of meanwhile: destroyed
                self._held.secrets.mark_stale(session_id)
                try:
                    # Not to an ended lease's sandbox: a push would make it again,
                    # with nothing to end it. The call that takes the lease pushes.
                    if await self._in_use(session_id):
                        await self._held.secrets.give(served)
                except (SandboxError, DatabaseBusy) as exc:
                    log.warning(
                        "session %s gets its changed credentials at its next tool call: %s",
                        session_id,
                        exc,
                    )

    async def clone_repositories(self, session_id: str, run_id: str) -> list[CloneFailure]:
        """Clones the session's repository resources not cloned yet into its
        sandbox (``repositories.py``); the ones that failed. A sandbox that
        cannot be had or fails meanwhile clones nothing more: the run's tool
        calls say why, and the next run tries again."""
        pending = [s for s in await self._store.repository_states(session_id) if not s.cloned_at]
        if not pending:
            return []
        try:
            sandbox = await self._sandbox(session_id)
        except SandboxError as exc:
            log.info("session %s: repositories not cloned yet: %s", session_id, exc)
            return []
        session = await self._store.session_snapshot(session_id)
        return await repositories.clone_pending(
            sandbox,
            session,
            pending,
            run_id,
            self._settings.repository_clone_timeout_seconds,
            self._store.mark_repository_cloned,
        )

    async def lease_terms(self, session: SessionRecord) -> LeaseTerms | None:
        return await self._leases.terms(session) if self._provider.leased else None

    @property
    def lease_renewal_seconds(self) -> float | None:
        """How often something that keeps using a session's sandbox (a call in
        progress, an attached terminal) renews its lease; None: no leases."""
        if not self._provider.leased:
            return None
        return self._settings.sandbox_lease_seconds / RENEWALS_PER_TTL

    async def renew(self, session_id: str) -> None:
        """Renews the session's sandbox lease (every call does; ``NoSandbox`` if
        it ended for good, which stops the tools here)."""
        if self._provider.leased:
            self._follow(await self._leases.take(session_id))

    async def run(
        self,
        session_id: str,
        name: str,
        tool_input: Json,
        op_key: str,
        *,
        lease: SandboxLease | None = None,
    ) -> ToolOutcome:
        if name in tools.WEB_TOOL_NAMES:
            return await self._web.run(session_id, name, tool_input)
        if name == MEMORY_SEARCH and self._search is not None:
            return await self._search.run(session_id, tool_input)
        self._follow(lease)
        try:
            sandbox = await self._sandbox(session_id, renewed=lease is not None)
        except NoSandbox as exc:
            return ToolOutcome([{"type": "text", "text": str(exc)}], True)
        except SandboxError as exc:
            if not exc.retryable:
                return sandbox_broken(name, exc)
            raise sandbox_unavailable(exc, reached=False) from exc
        run = partial(tools.run_tool, name, tool_input, sandbox, op_key=op_key)
        renew = partial(self.renew, session_id)
        try:  # the lease renewed while it runs: a call in progress is activity
            outcome = await renewing(run, renew, self.lease_renewal_seconds)
        except (SandboxUnavailable, WorkspaceUnavailable) as exc:
            if exc.retryable:
                reached = not isinstance(exc, (HostUnreachable, SandboxMoved))
                raise sandbox_unavailable(exc, reached=reached) from exc
            return sandbox_broken(name, exc)
        served = self._held.served.get(session_id)
        if served is not None and name not in tools.IDEMPOTENT_TOOLS:
            self._failpoints.hit("memories.before_writeback")
            self._held.tell(session_id, await self._write_back(served.memory, served.config))
        notes = self._held.notes.pop(session_id, [])
        if not notes:
            return outcome
        said: Json = {"type": "text", "text": "\n".join(notes)}
        return dataclasses.replace(outcome, content=[*outcome.content, said])

    async def describe(self, session_id: str) -> SandboxView:
        """The session's lease and its sandbox's state, without renewing,
        acquiring or waking anything."""
        lease = await self._store.sandbox_lease(session_id)
        booked = await self._store.sandbox_active_seconds(session_id)
        if lease is None or lease.status is SandboxLeaseStatus.DESTROYED:
            return SandboxView(lease, None, booked)
        self._follow(lease)
        try:
            host = await self._provider.status(session_id)
        except SandboxError as exc:
            return SandboxView(lease, None, booked, f"the sandbox host cannot be asked: {exc}")
        active = max(booked, float(host["active_seconds"])) if host else booked
        return SandboxView(lease, host, active)

    async def active_seconds(self, session_id: str) -> float | None:
        """The host's count of the session's sandbox's active time, all wakes
        together, when this process gave the session a sandbox; None otherwise or
        when the host cannot say. Wakes nothing."""
        if session_id not in self._held.handles:
            return None
        try:
            host = await self._provider.status(session_id)
        except SandboxError as exc:
            log.info("session %s: sandbox time not read: %s", session_id, exc)
            return None
        return float(host["active_seconds"]) if host else None

    async def unreachable_credentials(self, session: SessionRecord) -> list[UnreachableCredential]:
        if not session.vault_ids:
            return []
        networking = await session_networking(self._store, session)
        if networking is None:
            return []
        return await self._credentials.unreachable(
            session.workspace_id, session.vault_ids, networking
        )

    async def egress_audit(self, session_id: str, after: int, limit: int) -> Json | None:
        """The session's sandbox's egress log (``SandboxProvider.egress_audit``);
        None when there is none. Never wakes the sandbox; ``SandboxError`` when
        the host cannot be asked."""
        self._follow(await self._store.sandbox_lease(session_id))
        return await self._provider.egress_audit(session_id, after, limit)

    async def release(self, session_id: str) -> bool:
        """Ends the session's sandbox lease now (explicitly): the lease sweeper
        then destroys the sandbox after a final snapshot. The session's next
        tool call or terminal takes a new lease and gets its workspace back from
        that snapshot. False if no lease was active."""
        return await self._store.expire_sandbox_lease(session_id, reason=LeaseExpiry.EXPLICIT)

    async def destroy(self, listed: SandboxLease) -> SandboxLease | None:
        """Destroys an expired lease's sandbox in the host and books its active
        time as usage (the lease sweeper calls this). Returns the lease as read
        under the sandbox's lock, whose sandbox it destroyed (a newer one than
        ``listed`` if it was taken again and ended since); None if in use. A
        deleted session's sandbox is erased: nothing of it is saved or kept."""
        if listed.session_id is not None:
            await self.capture_outputs(listed.session_id, listed.workspace_id)
        async with self._sandbox_locks.hold(listed.sandbox_id):
            lease = await self._store.sandbox_lease(listed.sandbox_id) or listed
            if lease.status == SandboxLeaseStatus.ACTIVE:
                # Taken again since the sweeper listed it (an explicit release,
                # then a call): the sandbox is in use, and no longer to destroy.
                return None
            await self._let_go(lease.sandbox_id)
            self._follow(lease)
            total = await self._provider.release(
                lease.sandbox_id, erase=lease.expiry_reason == LeaseExpiry.SESSION_DELETED
            )
            self._placements.forget(lease.sandbox_id)
        if total is not None:
            # The host counts all wakes of the sandbox (also before an earlier
            # destroy and revival); the store books what it has not seen yet.
            await self._store.book_sandbox_active_seconds(
                lease.sandbox_id,
                session_id=lease.session_id,
                workspace_id=lease.workspace_id,
                total=total,
            )
        return lease

    async def session_deleted(self, session_id: str) -> None:
        """Its sandbox goes now, files and all, when no lease binds it
        (``unsafe_local``); a leased one, whose lease ended with the session,
        is the sweeper's to erase."""
        if self._provider.leased:
            return
        async with self._sandbox_locks.hold(session_id):
            await self._let_go(session_id)
            try:
                await self._provider.release(session_id, erase=True)
            except (SandboxError, OSError) as exc:  # the deletion stands all the same
                log.warning("session %s deleted; its sandbox was not: %s", session_id, exc)

    async def session_ended(self, session_id: str) -> None:
        """The session was terminated or archived: its sandbox goes now when no
        lease binds it (``unsafe_local``), as such a session never runs again
        and its outputs were filed at the end of its last turn. A leased one's
        lease ended with the session; the sweeper destroys it."""
        if self._provider.leased:
            return
        async with self._sandbox_locks.hold(session_id):
            await self._let_go(session_id)
            try:
                await self._provider.release(session_id)
            except (SandboxError, OSError) as exc:  # the termination stands all the same
                log.warning("session %s ended; its sandbox was not released: %s", session_id, exc)

    async def forget(self, sandbox_id: str, incarnation: str) -> None:
        """Another process destroyed the sandbox of the lease that started at
        ``incarnation`` (ISO): what this one held of it goes, as at its own
        destroy. Not if the lease is active again or newer, or a call here
        renewed it meanwhile: that sandbox may hold credentials given from here."""
        async with self._sandbox_locks.hold(sandbox_id):
            placed = self._placements.current(sandbox_id)
            current = await self._store.sandbox_lease(sandbox_id)
            if current is not None and (
                current.status == SandboxLeaseStatus.ACTIVE
                or current.created_at.isoformat() != incarnation
            ):
                return
            if self._placements.current(sandbox_id) is not placed:
                return  # renewed by a call while read; none from here on comes between
            self._placements.forget(sandbox_id)
            self._provider.forget(sandbox_id)
            await self._let_go(sandbox_id)

    async def _in_use(self, sandbox_id: str) -> bool:
        if not self._provider.leased:
            return True  # its sandboxes live as long as this process
        current = await self._store.sandbox_lease(sandbox_id)
        return current is not None and current.status == SandboxLeaseStatus.ACTIVE

    async def _let_go(self, sandbox_id: str) -> None:
        """Under the sandbox's lock, as every acquire of it is."""
        sandbox = self._held.drop(sandbox_id)
        if sandbox is not None:
            await sandbox.close()

    async def aclose(self) -> None:
        sandboxes = list(self._held.handles.values())
        self._held.handles.clear()
        for sandbox in sandboxes:
            await sandbox.close()
        await self._provider.aclose()
