"""``InMemoryStore``: the whole ``Store`` held in memory, for tests and tools
that need the store's promises without a database.

It implements every aggregate protocol (``base.Store``) with the SQL store's
semantics: each call is one transaction, all or nothing, visible to the next
call once it returns (``Transactions``). This class holds the methods of the
aggregates a session's life runs through (workspaces to files and limits); the
others are mixed in, one class per aggregate (``vault_methods.py``,
``webhook_methods.py``, ...), as ``SqlStore``'s are.
State lives in the instance; nothing is kept between stores.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from datetime import date, datetime
from typing import TYPE_CHECKING, Any

from stead.jsonvalues import Json
from stead.store.agents import AgentChange, AgentRecord
from stead.store.environments import EnvironmentChange, EnvironmentRecord
from stead.store.events import EventFilter, EventRecord, EventsAccepted, NewEvent
from stead.store.files import FileRecord, NewFile
from stead.store.idempotency import IdempotencyClaim, KeyClaim, claiming_key
from stead.store.inmemory import (
    agents,
    events,
    files,
    idempotency,
    inbox,
    leases,
    limits,
    repositories,
    runs,
    sessions,
    webhooks,
    workspaces,
)
from stead.store.inmemory.brain_methods import BrainMethods
from stead.store.inmemory.memory_methods import MemoryMethods
from stead.store.inmemory.skill_methods import SkillMethods
from stead.store.inmemory.tables import Tables
from stead.store.inmemory.transactions import Transactions
from stead.store.inmemory.vault_methods import VaultMethods
from stead.store.inmemory.webhook_methods import WebhookMethods
from stead.store.inmemory.work_methods import WorkMethods
from stead.store.leases import LeaseExpiry, LeaseHost, SandboxLease
from stead.store.limits import WORKSPACE, MonthUse
from stead.store.paging import Page, PageRequest
from stead.store.resources import RepositoryState
from stead.store.runs import ClaimTerms, RunClaim, RunStart, RunStatus, RunWrite, WriteResult
from stead.store.sessions import SessionChange, SessionFilter, SessionRecord
from stead.store.usage import LedgerRow
from stead.store.workspaces import ApiKey, IntegrityFinding, Workspace


class InMemoryStore(
    VaultMethods,
    WebhookMethods,
    BrainMethods,
    SkillMethods,
    MemoryMethods,
    WorkMethods,
    Transactions,
):
    # workspaces and keys
    async def create_workspace(self, name: str) -> Workspace:
        return await self._write(workspaces.create_workspace, name)

    async def list_workspaces(self) -> list[Workspace]:
        return await self._read(workspaces.list_workspaces)

    async def create_api_key(
        self, workspace_id: str, name: str, *, admin: bool = False
    ) -> tuple[ApiKey, str]:
        return await self._write(workspaces.create_api_key, workspace_id, name, admin)

    async def new_workspace_key(
        self, workspace_name: str, key_name: str, *, admin: bool = False
    ) -> tuple[ApiKey, str]:
        return await self._write(workspaces.new_workspace_key, workspace_name, key_name, admin)

    async def authenticate(self, secret: str) -> ApiKey | None:
        return await self._read(workspaces.authenticate, secret)

    async def count_api_keys(self) -> int:
        return await self._read(lambda t: len(t.api_keys))

    async def first_api_key(self, workspace_name: str, key_name: str) -> tuple[ApiKey, str] | None:
        return await self._write(workspaces.first_api_key, workspace_name, key_name)

    async def end_console_login(self, token_hash: str, expires_at: datetime) -> None:
        await self._write(workspaces.end_console_login, token_hash, expires_at)

    async def console_login_ended(self, token_hash: str) -> bool:
        return await self._read(lambda t: token_hash in t.console_logouts)

    async def list_api_keys(self) -> list[ApiKey]:
        return await self._read(workspaces.list_api_keys)

    async def revoke_api_key(self, key_id: str) -> ApiKey:
        return await self._write(workspaces.revoke_api_key, key_id)

    async def installation_secret(self, name: str) -> bytes:
        return await self._write(workspaces.installation_secret, name)

    async def installation_value(self, name: str, value: bytes) -> bytes:
        return await self._write(workspaces.installation_value, name, value)

    async def replace_installation_value(self, name: str, value: bytes) -> None:
        await self._write(workspaces.replace_installation_value, name, value)

    async def check_integrity(self, repair: bool) -> list[IntegrityFinding]:
        # Every JSON value was checked on its way in (``tables.stored``): none to find.
        await self._ready()
        return []

    # agents
    async def create_agent(self, workspace_id: str, definition: Json) -> AgentRecord:
        return await self._write(
            webhooks.raising("agent.created", agents.create_agent), workspace_id, definition
        )

    async def get_agent(
        self, workspace_id: str, agent_id: str, version: int | None = None
    ) -> AgentRecord:
        return await self._read(agents.get_agent, workspace_id, agent_id, version)

    async def update_agent(
        self, workspace_id: str, agent_id: str, expected_version: int | None, change: AgentChange
    ) -> AgentRecord:
        return await self._write(
            webhooks.raising("agent.updated", agents.update_agent, "updated_at"),
            workspace_id,
            agent_id,
            expected_version,
            change,
        )

    async def archive_agent(self, workspace_id: str, agent_id: str) -> AgentRecord:
        return await self._write(
            webhooks.raising("agent.archived", agents.archive_agent, "archived_at"),
            workspace_id,
            agent_id,
        )

    async def list_agents(
        self,
        workspace_id: str,
        page: PageRequest,
        include_archived: bool,
        created_gte: datetime | None,
        created_lte: datetime | None,
    ) -> Page[AgentRecord]:
        return await self._read(
            agents.list_agents, workspace_id, page, include_archived, created_gte, created_lte
        )

    async def list_agent_versions(
        self, workspace_id: str, agent_id: str, page: PageRequest
    ) -> Page[AgentRecord]:
        return await self._read(agents.list_agent_versions, workspace_id, agent_id, page)

    # environments
    async def create_environment(
        self,
        workspace_id: str,
        name: str,
        description: str | None,
        config: Json,
        metadata: dict[str, str],
        scope: str | None,
    ) -> EnvironmentRecord:
        return await self._write(
            webhooks.raising("environment.created", agents.create_environment),
            workspace_id,
            name,
            description,
            config,
            metadata,
            scope,
        )

    async def get_environment(self, workspace_id: str, env_id: str) -> EnvironmentRecord:
        return await self._read(agents.get_environment, workspace_id, env_id)

    async def update_environment(
        self, workspace_id: str, env_id: str, change: EnvironmentChange
    ) -> EnvironmentRecord:
        return await self._write(
            webhooks.raising("environment.updated", agents.update_environment, "updated_at"),
            workspace_id,
            env_id,
            change,
        )

    async def archive_environment(self, workspace_id: str, env_id: str) -> EnvironmentRecord:
        return await self._write(
            webhooks.raising("environment.archived", agents.archive_environment, "archived_at"),
            workspace_id,
            env_id,
        )

    async def delete_environment(self, workspace_id: str, env_id: str) -> None:
        await self._write(
            webhooks.removing("environment.deleted", agents.delete_environment),
            workspace_id,
            env_id,
        )

    async def list_environments(
        self, workspace_id: str, page: PageRequest, include_archived: bool
    ) -> Page[EnvironmentRecord]:
        return await self._read(agents.list_environments, workspace_id, page, include_archived)

    # sessions
    async def create_session(
        self,
        workspace_id: str,
        agent_ref: tuple[str, int | None],
        build_agent: Callable[[AgentRecord], Json],
        environment_id: str,
        fields: dict[str, Any],
        initial_events: Sequence[NewEvent],
    ) -> tuple[SessionRecord, list[EventRecord]]:
        return await self._write(
            webhooks.raising("session.created", sessions.create),
            workspace_id,
            agent_ref,
            build_agent,
            environment_id,
            fields,
            initial_events,
        )

    async def get_session(self, workspace_id: str, session_id: str) -> SessionRecord:
        return await self._read(sessions.get, workspace_id, session_id)

    async def update_session(
        self, workspace_id: str, session_id: str, change: SessionChange, event: NewEvent
    ) -> tuple[SessionRecord, EventRecord | None]:
        return await self._write(sessions.update, workspace_id, session_id, change, event)

    async def archive_session(
        self, workspace_id: str, session_id: str
    ) -> tuple[SessionRecord, list[EventRecord]]:
        return await self._write(
            webhooks.raising("session.archived", sessions.archive, "archived_at"),
            workspace_id,
            session_id,
        )

    async def delete_session(self, workspace_id: str, session_id: str) -> None:
        await self._write(
            webhooks.removing("session.deleted", sessions.delete), workspace_id, session_id
        )

    async def list_sessions(
        self, workspace_id: str, page: PageRequest, where: SessionFilter
    ) -> Page[SessionRecord]:
        return await self._read(sessions.list_, workspace_id, page, where)

    async def session_snapshot(self, session_id: str) -> SessionRecord:
        return await self._read(sessions.snapshot, session_id)

    async def terminate_session(
        self, workspace_id: str, session_id: str, events: Sequence[NewEvent]
    ) -> list[EventRecord]:
        return await self._write(sessions.terminate, workspace_id, session_id, events)

    # the event log
    async def accept_user_events(
        self,
        workspace_id: str,
        session_id: str,
        events: Sequence[NewEvent],
        validate: Callable[[SessionRecord, Callable[[str], EventRecord | None]], None],
        claim: ClaimTerms | None = None,
    ) -> EventsAccepted:
        return await self._write(inbox.accept, workspace_id, session_id, events, validate, claim)

    async def append_events(self, session_id: str, new: Sequence[NewEvent]) -> list[EventRecord]:
        return await self._write(events.append_log, session_id, new)

    async def drain_pending(self, session_id: str) -> list[EventRecord]:
        return await self._write(events.drain, session_id)

    async def list_events(
        self, workspace_id: str, session_id: str, page: PageRequest, where: EventFilter
    ) -> Page[EventRecord]:
        def run(t: Tables) -> Page[EventRecord]:
            sessions.get(t, workspace_id, session_id)
            return events.list_(t, session_id, page, where)

        return await self._read(run)

    async def events_after(self, session_id: str, seq: int, limit: int) -> list[EventRecord]:
        return await self._read(events.after, session_id, seq, limit)

    async def last_seq(self, session_id: str) -> int:
        return await self._read(events.last_seq, session_id)

    async def find_event_seq(self, session_id: str, event_id: str) -> int | None:
        return await self._read(events.find_seq, session_id, event_id)

    # runs and the side-effect ledger
    async def start_run(self, session_id: str) -> str:
        return await self._write(runs.start, session_id)

    async def finish_run(self, run_id: str, status: RunStatus) -> None:
        await self._write(runs.finish, run_id, status)

    async def claim_run(self, run_id: str, terms: ClaimTerms) -> RunStart | None:
        return await self._write(runs.claim, run_id, terms)

    async def claim_next(self, session_id: str, terms: ClaimTerms) -> RunStart | None:
        return await self._write(runs.claim_next, session_id, terms)

    async def renew_lease(self, run_id: str, epoch: int, lease_seconds: float) -> bool:
        return await self._write(runs.renew, run_id, epoch, lease_seconds)

    async def requeue_runs(self, *, not_owned_by: str | None = None) -> list[tuple[str, str]]:
        return await self._write(runs.requeue, not_owned_by)

    async def queued_runs(self, session_id: str | None = None) -> list[tuple[str, str]]:
        return await self._read(runs.queued, session_id)

    async def run_write(self, claim: RunClaim, write: RunWrite) -> WriteResult:
        return await self._write(runs.write, claim, write)

    # sandbox leases and sandbox time
    async def acquire_sandbox_lease(
        self,
        sandbox_id: str,
        *,
        workspace_id: str,
        session_id: str | None,
        environment_id: str,
        agent_id: str | None,
        ttl_seconds: float,
        enforce_limits: bool = False,
        host: LeaseHost | None = None,
        now: datetime | None = None,
    ) -> SandboxLease:
        return await self._write_at(
            now,
            _acquire_within_limits if enforce_limits else leases.acquire,
            sandbox_id,
            workspace_id,
            session_id,
            environment_id,
            agent_id,
            ttl_seconds,
            host,
        )

    async def move_sandbox_lease(
        self, sandbox_id: str, *, placement: int, host: LeaseHost
    ) -> SandboxLease | None:
        return await self._write(leases.move, sandbox_id, placement, host)

    async def renew_sandbox_lease(self, sandbox_id: str, *, now: datetime | None = None) -> bool:
        return await self._write_at(now, leases.renew, sandbox_id)

    async def expire_sandbox_leases(self, *, now: datetime | None = None) -> list[SandboxLease]:
        return await self._write_at(now, leases.expire_all)

    async def expire_sandbox_lease(
        self,
        sandbox_id: str,
        *,
        reason: LeaseExpiry = LeaseExpiry.EXPLICIT,
        now: datetime | None = None,
    ) -> bool:
        return await self._write_at(now, leases.expire_one, sandbox_id, reason)

    async def sandbox_lease(self, sandbox_id: str) -> SandboxLease | None:
        return await self._read(lambda t: t.leases.get(sandbox_id))

    async def leases_to_destroy(self) -> list[SandboxLease]:
        return await self._read(leases.to_destroy)

    async def mark_sandbox_destroyed(
        self,
        sandbox_id: str,
        *,
        now: datetime | None = None,
        reason: LeaseExpiry | None = None,
    ) -> bool:
        return await self._write_at(now, leases.mark_destroyed, sandbox_id, reason)

    async def add_sandbox_active_seconds(
        self,
        sandbox_id: str,
        *,
        session_id: str | None,
        workspace_id: str,
        seconds: float,
        now: datetime | None = None,
    ) -> None:
        await self._write_at(
            now, leases.add_active_seconds, sandbox_id, session_id, workspace_id, seconds
        )

    async def sandbox_active_seconds(self, sandbox_id: str) -> float:
        return await self._read(leases.active_seconds, sandbox_id)

    # limits
    async def limits(self, workspace_id: str, scope: str = WORKSPACE) -> dict[str, int]:
        return await self._read(limits.read, workspace_id, scope)

    async def set_limits(
        self, workspace_id: str, scope: str, changes: dict[str, int | None]
    ) -> dict[str, int]:
        return await self._write(limits.set_limits, workspace_id, scope, changes)

    async def month_use(self, workspace_id: str, *, now: datetime | None = None) -> MonthUse:
        return await self._read(limits.month_use, now or self._now(), workspace_id)

    # usage
    async def book_sandbox_active_seconds(
        self, sandbox_id: str, *, session_id: str | None, workspace_id: str, total: float
    ) -> float:
        return await self._write(
            leases.book_active_seconds, sandbox_id, session_id, workspace_id, total
        )

    async def usage_ledger(
        self, workspace_id: str, first: date | None = None, last: date | None = None
    ) -> list[LedgerRow]:
        return await self._read(leases.ledger, workspace_id, first, last)

    # idempotency keys
    def claiming_key(self, claim: KeyClaim) -> AbstractContextManager[None]:
        return claiming_key(claim)

    async def claim_idempotency_key(
        self,
        workspace_id: str,
        key: str,
        fingerprint: str,
        *,
        ttl_seconds: float,
        abandoned_seconds: float,
    ) -> IdempotencyClaim:
        return await self._write_unclaimed(
            idempotency.claim, workspace_id, key, fingerprint, ttl_seconds, abandoned_seconds
        )

    async def keep_idempotent_answer(
        self,
        workspace_id: str,
        key: str,
        token: str,
        *,
        status: int,
        content_type: str | None,
        body: bytes | None,
        ttl_seconds: float,
    ) -> None:
        await self._write_unclaimed(
            idempotency.keep, workspace_id, key, token, status, content_type, body, ttl_seconds
        )

    async def release_idempotency_key(self, workspace_id: str, key: str, token: str) -> None:
        await self._write_unclaimed(idempotency.release, workspace_id, key, token)

    # files, session resources and captured outputs
    async def begin_file(self, new: NewFile, *, quota: int = 0) -> FileRecord:
        return await self._write(files.begin_file, new, quota)

    async def file_ready(self, workspace_id: str, file_id: str) -> FileRecord:
        return await self._write(files.file_ready, workspace_id, file_id)

    async def get_file(self, workspace_id: str, file_id: str) -> FileRecord:
        return await self._read(files.get_file, workspace_id, file_id)

    async def list_files(
        self, workspace_id: str, page: PageRequest, scope_id: str | None
    ) -> Page[FileRecord]:
        return await self._read(files.list_files, workspace_id, page, scope_id)

    async def files_by_ids(self, workspace_id: str, file_ids: Sequence[str]) -> list[FileRecord]:
        return await self._read(files.files_by_ids, workspace_id, file_ids)

    async def delete_file(self, workspace_id: str, file_id: str) -> FileRecord:
        return await self._write(files.delete_file, workspace_id, file_id)

    async def files_to_purge(self, pending_before: datetime, limit: int) -> list[FileRecord]:
        return await self._write(files.files_to_purge, pending_before, limit)

    async def expired_files(self, now: datetime, limit: int) -> list[FileRecord]:
        return await self._read(files.expired_files, now, limit)

    async def bytes_removed(self, file_id: str) -> None:
        await self._write(files.bytes_removed, file_id)

    async def abandon_file(self, file_id: str) -> FileRecord | None:
        return await self._write(files.abandon_file, file_id)

    async def forget_file(self, file_id: str) -> None:
        await self._write(files.forget_file, file_id)

    async def add_session_resource(
        self,
        workspace_id: str,
        session_id: str,
        resource: Json,
        *,
        limit: int,
        sealed_token: bytes | None = None,
    ) -> Json:
        return await self._write(
            files.add_resource, workspace_id, session_id, resource, limit, sealed_token
        )

    async def delete_session_resource(
        self, workspace_id: str, session_id: str, resource_id: str
    ) -> Json:
        return await self._write(files.delete_resource, workspace_id, session_id, resource_id)

    async def set_repository_token(
        self, workspace_id: str, session_id: str, resource_id: str, sealed: bytes, stamp: str
    ) -> Json:
        return await self._write(
            repositories.set_token, workspace_id, session_id, resource_id, sealed, stamp
        )

    async def repository_states(self, session_id: str) -> list[RepositoryState]:
        return await self._read(repositories.states, session_id)

    async def mark_repository_cloned(self, resource_id: str) -> None:
        await self._write(repositories.mark_cloned, resource_id)

    async def reseal_repository_tokens(self, reseal: Callable[[str, bytes], bytes | None]) -> int:
        return await self._write(repositories.reseal, reseal)

    async def begin_output(
        self, new: NewFile, session_id: str, path: str, sha256: str, *, quota: int = 0
    ) -> FileRecord | None:
        return await self._write(files.begin_output, new, session_id, path, sha256, quota)


def _acquire_within_limits(
    t: Tables,
    now: datetime,
    sandbox_id: str,
    workspace_id: str,
    session_id: str | None,
    *lease: Any,
) -> SandboxLease:
    limits.check_sandbox(t, now, workspace_id, sandbox_id, session_id)
    return leases.acquire(t, now, sandbox_id, workspace_id, session_id, *lease)


if TYPE_CHECKING:
    from stead.store.base import Store

    _implements: Store = InMemoryStore()
