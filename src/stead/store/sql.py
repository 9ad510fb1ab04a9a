"""``SqlStore``: the Store on SQLAlchemy Core, one implementation for every dialect.

Each method runs one whole transaction on a connection worker (``workers.py``):
one hop per call, not per statement. On SQLite all writes run on the single
write worker; on PostgreSQL on several, kept apart by row locks (``_locks.py``).
Either way a session's ``seq`` order is its commit order. Reads run on their
own workers, each on a snapshot of its own.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import UTC, date, datetime, timedelta
from typing import Any, ParamSpec, TypeVar

from anyio import to_thread
from sqlalchemy import Connection, Engine, func, select

from stead.jsonvalues import Json
from stead.store import (
    _agents,
    _claims,
    _environments,
    _events,
    _idempotency,
    _inbox,
    _integrity,
    _runs,
    _sessions,
    _usage,
    _vaults,
    _webhooks,
    _workspaces,
)
from stead.store._brain_methods import BrainMethods
from stead.store._file_methods import FileMethods
from stead.store._idempotency_methods import IdempotencyMethods
from stead.store._lease_methods import LeaseMethods
from stead.store._limit_methods import LimitMethods
from stead.store._memory_methods import MemoryMethods
from stead.store._resource_methods import ResourceMethods
from stead.store._skill_methods import SkillMethods
from stead.store._webhook_methods import WebhookMethods
from stead.store._work_methods import WorkMethods
from stead.store.base import (
    AgentChange,
    AgentRecord,
    ApiKey,
    ClaimTerms,
    EnvironmentChange,
    EnvironmentRecord,
    EventFilter,
    EventRecord,
    EventsAccepted,
    IntegrityFinding,
    NewEvent,
    Page,
    PageRequest,
    RunClaim,
    RunStart,
    RunStatus,
    RunWrite,
    SessionChange,
    SessionFilter,
    SessionRecord,
    Workspace,
    WriteResult,
)
from stead.store.idempotency import wanted_key
from stead.store.usage import LedgerRow
from stead.store.vaults import (
    CredentialChange,
    CredentialRecord,
    Reseal,
    VaultChange,
    VaultRecord,
)
from stead.store.workers import ConnectionWorkers

P = ParamSpec("P")
R = TypeVar("R")


def utc_now() -> datetime:
    return datetime.now(UTC)


def database_skew(conn: Connection, clock: Callable[[], datetime]) -> timedelta:
    """How far the database's clock is ahead of ``clock`` (the middle of the read)."""
    before = clock()
    found: datetime = conn.execute(select(func.clock_timestamp())).scalar_one()
    after = clock()
    return found - (before + (after - before) / 2)


class SqlStore(
    WorkMethods,
    BrainMethods,
    FileMethods,
    IdempotencyMethods,
    LeaseMethods,
    LimitMethods,
    MemoryMethods,
    ResourceMethods,
    SkillMethods,
    WebhookMethods,
):
    def __init__(
        self,
        writer: Engine,
        reader: Engine,
        *,
        readers: int = 4,
        writers: int = 1,
        clock: Callable[[], datetime] = utc_now,
        before_commit: Callable[[], None] | None = None,
        wait_seconds: float | None = None,
    ) -> None:
        self._writer_engine = writer
        self._reader_engine = reader
        self._now = clock
        self._skew = timedelta(0)
        """The database's clock less ``clock`` (PostgreSQL, ``_sync_clock``): every
        time the store writes is on the database's clock, so processes on
        machines whose clocks differ agree on heartbeats and leases."""
        self._writer = ConnectionWorkers(
            writer, writers, "store-writer", before_commit, wait_seconds=wait_seconds
        )
        self._readers = ConnectionWorkers(
            reader, readers, "store-reader", wait_seconds=wait_seconds
        )

    async def close(self) -> None:
        await to_thread.run_sync(self._dispose)

    def _dispose(self) -> None:
        self._writer.close()
        self._readers.close()
        self._writer_engine.dispose()
        self._reader_engine.dispose()

    def _time(self) -> datetime:
        """Now, as the database's clock has it (``_skew``)."""
        return self._now() + self._skew

    async def _sync_clock(self) -> None:
        """Measures ``_skew`` again (PostgreSQL, where processes on several
        machines share the store; SQLite has one process)."""
        if self._writer_engine.dialect.name != "sqlite":
            self._skew = await self._read_one(database_skew, self._now)

    async def _write(self, fn: Callable[..., R], *args: Any) -> R:
        return await self._write_at(None, fn, *args)

    async def _write_unflushed(self, fn: Callable[..., R], *args: Any) -> R:
        """``_write`` whose commit is not flushed on its own (``ConnectionWorkers.run``)."""
        return await self._writer.run(lambda conn: fn(conn, self._time(), *args), flush=False)

    async def _write_at(self, now: datetime | None, fn: Callable[..., R], *args: Any) -> R:
        """``_write`` at a time the caller chose (None: the store's clock, read on
        the writer thread: with one writer, processed_at follows seq order; with
        several, ``_events.append_log`` keeps it so)."""
        pending = wanted_key()
        if pending is None:
            if now is None:
                return await self._writer.run(lambda conn: fn(conn, self._time(), *args))
            return await self._writer.run(lambda conn: fn(conn, now, *args))

        def claiming(conn: Connection) -> R:
            at = self._time() if now is None else now
            _idempotency.take(conn, at, pending)
            return fn(conn, at, *args)

        result = await self._writer.run(claiming)
        pending.taken = True
        return result

    async def _read(self, fn: Callable[..., R], *args: Any) -> R:
        return await self._readers.run(lambda conn: fn(conn, *args))

    async def _read_one(self, fn: Callable[..., R], *args: Any) -> R:
        """``_read`` of a ``fn`` that runs one statement (``ConnectionWorkers.run``'s
        ``single``): one round trip on PostgreSQL, where ``_read`` takes three."""
        return await self._readers.run(lambda conn: fn(conn, *args), single=True)

    # vaults and credentials
    async def create_vault(
        self, workspace_id: str, display_name: str, metadata: dict[str, str]
    ) -> VaultRecord:
        return await self._write(
            _webhooks.raising("vault.created", _vaults.create_vault),
            workspace_id,
            display_name,
            metadata,
        )

    async def get_vault(self, workspace_id: str, vault_id: str) -> VaultRecord:
        return await self._read(_vaults.get_vault, workspace_id, vault_id)

    async def update_vault(
        self, workspace_id: str, vault_id: str, change: VaultChange
    ) -> VaultRecord:
        return await self._write(_vaults.update_vault, workspace_id, vault_id, change)

    async def archive_vault(self, workspace_id: str, vault_id: str) -> VaultRecord:
        return await self._write(
            _webhooks.raising("vault.archived", _vaults.archive_vault, "archived_at"),
            workspace_id,
            vault_id,
        )

    async def delete_vault(self, workspace_id: str, vault_id: str) -> None:
        await self._write(
            _webhooks.removing("vault.deleted", _vaults.delete_vault), workspace_id, vault_id
        )

    async def list_vaults(
        self, workspace_id: str, page: PageRequest, include_archived: bool
    ) -> Page[VaultRecord]:
        return await self._read(_vaults.list_vaults, workspace_id, page, include_archived)

    async def create_credential(
        self,
        workspace_id: str,
        vault_id: str,
        credential_id: str,
        display_name: str | None,
        metadata: dict[str, str],
        auth: Json,
        sealed: bytes,
    ) -> CredentialRecord:
        return await self._write(
            _vaults.create_credential,
            workspace_id,
            vault_id,
            credential_id,
            display_name,
            metadata,
            auth,
            sealed,
        )

    async def get_credential(
        self, workspace_id: str, vault_id: str, credential_id: str
    ) -> CredentialRecord:
        return await self._read(_vaults.get_credential, workspace_id, vault_id, credential_id)

    async def update_credential(
        self, workspace_id: str, vault_id: str, credential_id: str, change: CredentialChange
    ) -> CredentialRecord:
        return await self._write(
            _vaults.update_credential, workspace_id, vault_id, credential_id, change
        )

    async def archive_credential(
        self, workspace_id: str, vault_id: str, credential_id: str
    ) -> CredentialRecord:
        return await self._write(_vaults.archive_credential, workspace_id, vault_id, credential_id)

    async def delete_credential(self, workspace_id: str, vault_id: str, credential_id: str) -> None:
        await self._write(
            lambda conn, _now: _vaults.delete_credential(
                conn, workspace_id, vault_id, credential_id
            )
        )

    async def list_credentials(
        self, workspace_id: str, vault_id: str, page: PageRequest, include_archived: bool
    ) -> Page[CredentialRecord]:
        return await self._read(
            _vaults.list_credentials, workspace_id, vault_id, page, include_archived
        )

    async def active_credentials(
        self, workspace_id: str, vault_ids: Sequence[str]
    ) -> list[CredentialRecord]:
        return await self._read(_vaults.active_credentials, workspace_id, vault_ids)

    async def reseal_credentials(self, reseal: Reseal) -> int:
        return await self._write(_vaults.reseal_credentials, reseal)

    # workspaces and keys
    async def create_workspace(self, name: str) -> Workspace:
        return await self._write(_workspaces.create_workspace, name)

    async def list_workspaces(self) -> list[Workspace]:
        return await self._read(_workspaces.list_workspaces)

    async def create_api_key(
        self, workspace_id: str, name: str, *, admin: bool = False
    ) -> tuple[ApiKey, str]:
        return await self._write(_workspaces.create_api_key, workspace_id, name, admin)

    async def new_workspace_key(
        self, workspace_name: str, key_name: str, *, admin: bool = False
    ) -> tuple[ApiKey, str]:
        return await self._write(_workspaces.new_workspace_key, workspace_name, key_name, admin)

    async def authenticate(self, secret: str) -> ApiKey | None:
        return await self._read(_workspaces.authenticate, secret)

    async def count_api_keys(self) -> int:
        return await self._read(_workspaces.count_api_keys)

    async def first_api_key(self, workspace_name: str, key_name: str) -> tuple[ApiKey, str] | None:
        return await self._write(_workspaces.first_api_key, workspace_name, key_name)

    async def end_console_login(self, token_hash: str, expires_at: datetime) -> None:
        await self._write(_workspaces.end_console_login, token_hash, expires_at)

    async def console_login_ended(self, token_hash: str) -> bool:
        return await self._read(_workspaces.console_login_ended, token_hash)

    async def list_api_keys(self) -> list[ApiKey]:
        return await self._read(_workspaces.list_api_keys)

    async def revoke_api_key(self, key_id: str) -> ApiKey:
        return await self._write(_workspaces.revoke_api_key, key_id)

    async def installation_secret(self, name: str) -> bytes:
        # Read first: the ones stead uses are made by migrations, and a start that
        # writes would shift the commit count the crash tests kill at.
        found: bytes | None = await self._read(_workspaces.find_installation_secret, name)
        if found is not None:
            return found
        made: bytes = await self._write(_workspaces.installation_secret, name)
        return made

    async def installation_value(self, name: str, value: bytes) -> bytes:
        kept: bytes = await self._write(_workspaces.installation_value, name, value)
        return kept

    async def replace_installation_value(self, name: str, value: bytes) -> None:
        await self._write(_workspaces.replace_installation_value, name, value)

    async def check_integrity(self, repair: bool) -> list[IntegrityFinding]:
        # The scans take seconds per gigabyte: in a write transaction they held
        # off a running server's writes past its busy timeout (503s). They read a
        # snapshot; only a repair, when there is one to make, takes the write lock.
        engine = await self._read(_integrity.engine_findings)
        values = await self._read(lambda conn: _integrity.json_findings(conn, repair=False))
        if repair and values:
            values = await self._write(
                lambda conn, _now: _integrity.json_findings(conn, repair=True)
            )
        return engine + values

    # agents
    async def create_agent(self, workspace_id: str, definition: Json) -> AgentRecord:
        return await self._write(
            _webhooks.raising("agent.created", _agents.create), workspace_id, definition
        )

    async def get_agent(
        self, workspace_id: str, agent_id: str, version: int | None = None
    ) -> AgentRecord:
        return await self._read(_agents.get, workspace_id, agent_id, version)

    async def update_agent(
        self, workspace_id: str, agent_id: str, expected_version: int | None, change: AgentChange
    ) -> AgentRecord:
        return await self._write(
            _webhooks.raising("agent.updated", _agents.update_, "updated_at"),
            workspace_id,
            agent_id,
            expected_version,
            change,
        )

    async def archive_agent(self, workspace_id: str, agent_id: str) -> AgentRecord:
        return await self._write(
            _webhooks.raising("agent.archived", _agents.archive, "archived_at"),
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
            _agents.list_, workspace_id, page, include_archived, created_gte, created_lte
        )

    async def list_agent_versions(
        self, workspace_id: str, agent_id: str, page: PageRequest
    ) -> Page[AgentRecord]:
        return await self._read(_agents.list_versions, workspace_id, agent_id, page)

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
            _webhooks.raising("environment.created", _environments.create),
            workspace_id,
            name,
            description,
            config,
            metadata,
            scope,
        )

    async def get_environment(self, workspace_id: str, env_id: str) -> EnvironmentRecord:
        return await self._read(_environments.get, workspace_id, env_id)

    async def update_environment(
        self, workspace_id: str, env_id: str, change: EnvironmentChange
    ) -> EnvironmentRecord:
        return await self._write(
            _webhooks.raising("environment.updated", _environments.update_, "updated_at"),
            workspace_id,
            env_id,
            change,
        )

    async def archive_environment(self, workspace_id: str, env_id: str) -> EnvironmentRecord:
        return await self._write(
            _webhooks.raising("environment.archived", _environments.archive, "archived_at"),
            workspace_id,
            env_id,
        )

    async def delete_environment(self, workspace_id: str, env_id: str) -> None:
        await self._write(
            _webhooks.removing("environment.deleted", _environments.delete_), workspace_id, env_id
        )

    async def list_environments(
        self, workspace_id: str, page: PageRequest, include_archived: bool
    ) -> Page[EnvironmentRecord]:
        return await self._read(_environments.list_, workspace_id, page, include_archived)

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
            _webhooks.raising("session.created", _sessions.create),
            workspace_id,
            agent_ref,
            build_agent,
            environment_id,
            fields,
            initial_events,
        )

    async def get_session(self, workspace_id: str, session_id: str) -> SessionRecord:
        return await self._read_one(_sessions.get, workspace_id, session_id)

    async def update_session(
        self, workspace_id: str, session_id: str, change: SessionChange, event: NewEvent
    ) -> tuple[SessionRecord, EventRecord | None]:
        return await self._write(_sessions.update_, workspace_id, session_id, change, event)

    async def archive_session(
        self, workspace_id: str, session_id: str
    ) -> tuple[SessionRecord, list[EventRecord]]:
        return await self._write(
            _webhooks.raising("session.archived", _sessions.archive, "archived_at"),
            workspace_id,
            session_id,
        )

    async def delete_session(self, workspace_id: str, session_id: str) -> None:
        await self._write(
            _webhooks.removing("session.deleted", _sessions.delete_), workspace_id, session_id
        )

    async def list_sessions(
        self, workspace_id: str, page: PageRequest, where: SessionFilter
    ) -> Page[SessionRecord]:
        return await self._read(_sessions.list_, workspace_id, page, where)

    # events
    async def accept_user_events(
        self,
        workspace_id: str,
        session_id: str,
        events: Sequence[NewEvent],
        validate: _inbox.Validator,
        claim: ClaimTerms | None = None,
    ) -> EventsAccepted:
        return await self._write(_inbox.accept, workspace_id, session_id, events, validate, claim)

    async def append_events(self, session_id: str, events: Sequence[NewEvent]) -> list[EventRecord]:
        return await self._write(_events.append, session_id, events)

    async def drain_pending(self, session_id: str) -> list[EventRecord]:
        return await self._write(_events.drain, session_id)

    async def list_events(
        self, workspace_id: str, session_id: str, page: PageRequest, where: EventFilter
    ) -> Page[EventRecord]:
        def run(conn: Connection) -> Page[EventRecord]:
            _sessions.get(conn, workspace_id, session_id)
            return _events.list_(conn, session_id, page, where)

        return await self._read(run)

    async def events_after(self, session_id: str, seq: int, limit: int) -> list[EventRecord]:
        return await self._read_one(_events.after, session_id, seq, limit)

    async def last_seq(self, session_id: str) -> int:
        return await self._read_one(_events.last_seq, session_id)

    async def find_event_seq(self, session_id: str, event_id: str) -> int | None:
        def run(conn: Connection) -> int | None:
            found = _events.find(conn, session_id, event_id)
            return None if found is None else found.seq

        return await self._read_one(run)

    # runs and the side-effect ledger
    async def start_run(self, session_id: str) -> str:
        return await self._write(_runs.start, session_id)

    async def finish_run(self, run_id: str, status: RunStatus) -> None:
        await self._write(_runs.finish, run_id, status)

    async def claim_run(self, run_id: str, terms: ClaimTerms) -> RunStart | None:
        return await self._write(_claims.claim, run_id, terms)

    async def claim_next(self, session_id: str, terms: ClaimTerms) -> RunStart | None:
        return await self._write(_claims.claim_next, session_id, terms)

    async def renew_lease(self, run_id: str, epoch: int, lease_seconds: float) -> bool:
        return await self._write(_runs.renew, run_id, epoch, lease_seconds)

    async def requeue_runs(self, *, not_owned_by: str | None = None) -> list[tuple[str, str]]:
        return await self._write(
            lambda conn, now: _runs.requeue(conn, now, not_owned_by=not_owned_by)
        )

    async def queued_runs(self, session_id: str | None = None) -> list[tuple[str, str]]:
        return await self._read(_runs.queued, session_id)

    async def run_write(self, claim: RunClaim, write: RunWrite) -> WriteResult:
        return await self._write(_claims.write, claim, write)

    async def session_snapshot(self, session_id: str) -> SessionRecord:
        return await self._read(_sessions.snapshot, session_id)

    # usage and termination
    async def usage_ledger(
        self, workspace_id: str, first: date | None = None, last: date | None = None
    ) -> list[LedgerRow]:
        return await self._read(_usage.ledger, workspace_id, first, last)

    async def terminate_session(
        self, workspace_id: str, session_id: str, events: Sequence[NewEvent]
    ) -> list[EventRecord]:
        return await self._write(_sessions.terminate, workspace_id, session_id, events)
