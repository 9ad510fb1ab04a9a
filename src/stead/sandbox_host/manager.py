"""Every sandbox on this machine, and the host's own background work.

``acquire`` is idempotent per sandbox id: concurrent acquires of one id share
one ``HostedSandbox`` (a per-id lock around the catalogue row and the object).
Two loops run for the host's lifetime: the idle sleeper, which puts sandboxes
to sleep after their ``sleep_after`` without activity (and retries a snapshot
that failed), and the garbage collector, which deletes expired snapshots and
exec records older than ``exec_record_seconds``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import anyio
from anyio.abc import TaskGroup

from stead.blobs import BlobError, BlobNotFound, BlobStore, UnfinishedUpload
from stead.egress_policy import HostSet, InvalidPolicy, host_entry, normalize_host
from stead.failpoints import FailPoints
from stead.sandbox import (
    InvalidArgument,
    IsolationUnavailable,
    SandboxConfig,
    SandboxMoved,
    SandboxNotFound,
    SandboxUnavailable,
    ops,
)
from stead.sandbox_host.catalogue import Catalogue
from stead.sandbox_host.cgroups import Cgroups
from stead.sandbox_host.clock import HostClock, SystemClock
from stead.sandbox_host.config import HostOptions
from stead.sandbox_host.disk import SpareDisks
from stead.sandbox_host.egress import EgressTls, HeaderSecret, PlaceholderSecret, Secrets
from stead.sandbox_host.host_metrics import HostMetrics
from stead.sandbox_host.lifecycle import HostedSandbox, State
from stead.sandbox_host.packages import PackageCache
from stead.sandbox_host.placements import (
    SANDBOXES,
    claim_placement,
    latest_manifest,
    newest_placement,
    sandbox_prefix,
    write_manifest,
)
from stead.sandbox_host.uids import UidRange
from stead.sandbox_host.workspace import SandboxErased, erase_snapshots

log = logging.getLogger("stead.sandbox.host")

SANDBOX_ID_MAX = 200


@dataclass(frozen=True, slots=True)
class Isolation:
    """What a host that can isolate sandboxes starts them with."""

    cgroups: Cgroups
    uids: UidRange
    tls: EgressTls
    """The egress CA and the origins' trust: every sandbox's TLS is terminated."""


class SandboxManager:
    def __init__(
        self,
        options: HostOptions,
        *,
        catalogue: Catalogue,
        blobs: BlobStore,
        isolation: Isolation | None,
        isolation_problem: str | None,
        tasks: TaskGroup,
        clock: HostClock | None = None,
        failpoints: FailPoints | None = None,
    ) -> None:
        self._clock: HostClock = clock or SystemClock()
        self._failpoints = failpoints or FailPoints(None)
        self._options = options
        self._catalogue = catalogue
        self._blobs = blobs
        self._isolation = isolation
        self._cgroups = isolation.cgroups if isolation is not None else None
        self._isolation_problem = isolation_problem
        self._tasks = tasks
        self._packages = (
            PackageCache(options, isolation.cgroups, installer_uid=isolation.uids.installer_uid)
            if isolation is not None
            else None
        )
        self.spares = SpareDisks(options.work_dir / "disks", options.sandbox_disk_bytes)
        """New sandboxes' disks, made ahead (``keep_made`` runs while isolation is available)."""
        self._sandboxes: dict[str, HostedSandbox] = {}
        self._locks: dict[str, anyio.Lock] = {}
        self._metrics = HostMetrics()

    @property
    def options(self) -> HostOptions:
        return self._options

    def secrets_generation(self, sandbox_id: str) -> int | None:
        found = self._sandboxes.get(sandbox_id)
        return found.secrets_generation if found is not None else None

    def set_secrets(
        self,
        sandbox_id: str,
        generation: int,
        credentials: Sequence[ops.Credential],
        variables: Sequence[ops.SecretVariable] = (),
    ) -> None:
        """Hands the sandbox's egress proxy its credentials, in memory only, and
        the sandbox's processes the variables' placeholders. Raises
        ``InvalidArgument`` for a host pattern the proxy cannot enforce."""
        headers = [
            HeaderSecret(
                host=normalize_host(c.host),
                port=c.port,
                header=c.header.lower().encode(),
                value=c.value.encode(),
                credential_id=c.credential_id,
                paths=tuple(p.encode() for p in c.paths),
            )
            for c in credentials
        ]
        placeholders = [_placeholder_secret(v, i) for i, v in enumerate(variables)]
        found = self._sandboxes[sandbox_id]
        found.set_credentials(
            generation,
            Secrets(headers, placeholders),
            {v.name: v.placeholder for v in variables},
        )

    @property
    def isolation_problem(self) -> str | None:
        """Why this host refuses to start sandboxes; None when it can."""
        return self._isolation_problem

    async def acquire(
        self, sandbox_id: str, config: SandboxConfig, placement: int | None = None
    ) -> HostedSandbox:
        """The sandbox, created if new (or destroyed before); its config follows
        the latest acquire (``HostedSandbox.reconfigure``: networking at once,
        the rest at its next wake). With ``placement`` (its
        lease's), a copy of an earlier one takes the latest snapshot's workspace
        (``_place``); a later one raises ``SandboxMoved``."""
        _check_id(sandbox_id)
        if self._isolation_problem is not None or self._isolation is None:
            raise IsolationUnavailable(self._isolation_problem or "no cgroups")
        async with self._lock(sandbox_id):
            found = self._sandboxes.get(sandbox_id)
            if found is None:
                found = await self._make(sandbox_id, config)
            elif found.config != config:
                found.reconfigure(config)
                await self._catalogue.set_config(sandbox_id, config.to_json())
            if placement is not None and found.placement != placement:
                await self._place(found, placement)
            return found

    async def _make(self, sandbox_id: str, config: SandboxConfig) -> HostedSandbox:
        """Its row (created, or revived after a destroy) and its object."""
        assert self._isolation is not None
        assert self._packages is not None and self._cgroups is not None
        row = await self._catalogue.create_sandbox(
            sandbox_id,
            config.to_json(),
            uids=self._isolation.uids,
            now=self._clock.time(),
        )
        sandbox = HostedSandbox(
            row,
            config,
            options=self._options,
            catalogue=self._catalogue,
            blobs=self._blobs,
            cgroups=self._cgroups,
            packages=self._packages,
            egress_tls=self._isolation.tls,
            tasks=self._tasks,
            clock=self._clock,
            metrics=self._metrics,
            spares=self.spares,
            failpoints=self._failpoints,
        )
        self._sandboxes[sandbox_id] = sandbox
        return sandbox

    async def _place(self, sandbox: HostedSandbox, placement: int) -> None:
        """Makes this copy the sandbox's at ``placement``: as it is when it was
        never placed and no host snapshotted it elsewhere since; else with the
        workspace of the latest snapshot any host took (none: empty)."""
        if sandbox.placement is not None and sandbox.placement > placement:
            raise _moved(sandbox.id, sandbox.placement, placement)
        try:
            # Claimed before the read: a stale copy that saves after it keeps the
            # snapshot read here (``SavedWorkspace.checkpoint``), and one that
            # saved before it is what the read finds.
            await claim_placement(self._blobs, sandbox.id, placement)
            manifest = await latest_manifest(self._blobs, sandbox.id)
        except BlobError as exc:
            raise SandboxUnavailable(f"the blob store is unavailable: {exc}") from None
        if manifest is not None and manifest.placement > placement:
            raise _moved(sandbox.id, manifest.placement, placement)
        latest = manifest.snapshot if manifest is not None else None
        now = self._clock.time()
        if latest is not None and latest.expires_at <= now:
            # Its host deleted it, or will: the workspace expired (never empty).
            latest = dataclasses.replace(latest, deleted_at=now)
        keep = sandbox.placement is None and (
            manifest is None or await self._holds(sandbox.id, manifest.snapshot.id)
        )
        if not keep:
            log.info("sandbox %s: placement %d, from its latest snapshot", sandbox.id, placement)
            await sandbox.abandon(placement)
        dropped = await self._catalogue.take_placement(
            sandbox.id, placement, latest=latest, keep_local=keep
        )
        sandbox.placed(placement)
        for old in dropped:  # this host's own, superseded by the placement's latest
            with contextlib.suppress(Exception):
                await self._blobs.delete(old.blob_key)

    async def _holds(self, sandbox_id: str, snapshot_id: str) -> bool:
        """Whether this host's latest snapshot of the sandbox is ``snapshot_id``."""
        mine = await self._catalogue.latest_snapshot(sandbox_id)
        return mine is not None and mine.id == snapshot_id

    async def get(self, sandbox_id: str, placement: int | None = None) -> HostedSandbox:
        """A sandbox acquired before, from memory or (after a host restart) the
        catalogue; ``SandboxNotFound`` if never acquired or destroyed, or when
        this host's copy is of an earlier ``placement`` than the caller's;
        ``SandboxMoved`` when of a later one."""
        _check_id(sandbox_id)
        found = self._sandboxes.get(sandbox_id)
        if found is None:
            row = await self._catalogue.sandbox(sandbox_id)
            if row is None or row.destroyed_at is not None:
                raise SandboxNotFound(f"no sandbox {sandbox_id!r} on this host")
            found = await self.acquire(sandbox_id, SandboxConfig.from_json(row.config))
        held = found.placement
        if placement is not None and held is not None and held != placement:
            if held > placement:
                raise _moved(sandbox_id, held, placement)
            raise SandboxNotFound(f"no sandbox {sandbox_id!r} of placement {placement} here")
        return found

    async def destroy(self, sandbox_id: str, *, erase: bool = False) -> float | None:
        """Final snapshot, then gone; with ``erase``, no snapshot, and every one
        any host saved is deleted (``ops.Destroy``). Returns the sandbox's
        active seconds, None if there was no such sandbox here."""
        while True:
            try:
                sandbox = await self.get(sandbox_id)
            except SandboxNotFound:
                if erase:  # what the hosts it lived on before saved of it
                    await erase_snapshots(self._blobs, self._catalogue, sandbox_id)
                return None
            lock = self._lock(sandbox_id)
            async with lock:
                # A destroy that ran while this one waited has gone with the
                # object ``get`` gave, and an acquire since may have made the
                # next: only the current one is destroyed (two objects of one
                # sandbox own one directory and disk).
                if self._sandboxes.get(sandbox_id) is not sandbox:
                    continue
                await sandbox.destroy(erase=erase)
                self._sandboxes.pop(sandbox_id, None)
            if not lock.locked() and self._locks.get(sandbox_id) is lock:  # none queued on it
                self._locks.pop(sandbox_id, None)
            return sandbox.active_seconds

    @contextlib.asynccontextmanager
    async def saving(self, sandbox: HostedSandbox) -> AsyncIterator[None]:
        """Around a call that may save ``sandbox``: a copy found erased meanwhile
        (``SandboxErased``, re-raised) is destroyed here too."""
        try:
            yield
        except SandboxErased:
            log.info("sandbox %s was erased through another host; this copy goes too", sandbox.id)
            await self.destroy(sandbox.id, erase=True)
            raise

    def _lock(self, sandbox_id: str) -> anyio.Lock:
        return self._locks.setdefault(sandbox_id, anyio.Lock())

    def status(self) -> dict[str, Any]:
        counts: dict[str, int] = {}
        for sandbox in self._sandboxes.values():
            counts[sandbox.state.value] = counts.get(sandbox.state.value, 0) + 1
        return {
            "sandboxes": counts,
            "isolation_problem": self._isolation_problem,
            "cgroups": self._cgroups.describe() if self._cgroups is not None else None,
            "uids": self._isolation.uids.describe() if self._isolation is not None else None,
            "metrics": self._metrics.as_json(),
        }

    async def load(self) -> None:
        """Known sandboxes after a host start: all cold (their bodies died with
        the previous host); one whose workspace no snapshot holds yet is saved
        by the idle sleeper like any idle sandbox."""
        if self._isolation_problem is not None:
            return
        rows = await self._catalogue.live_sandboxes()
        # Before anything can snapshot: a newer manifest is never overwritten,
        # and no upload of this host's is under way.
        await self._name_earlier_snapshots([row.id for row in rows if row.placement is None])
        await self._reclaim_unfinished({row.id: row.placement or 0 for row in rows})
        for row in rows:
            with contextlib.suppress(ValueError):
                await self.acquire(row.id, SandboxConfig.from_json(row.config))

    async def _name_earlier_snapshots(self, unplaced: Sequence[str]) -> None:
        """Names in a manifest, at placement 0 (a copy never placed), the latest
        snapshot of each of ``unplaced`` that no manifest names: a host of a
        stead from before placements took it, and another host taking the
        sandbox would not find it and start it empty. A blob store that does not
        answer leaves the rest to the next start."""
        for sandbox_id in unplaced:
            # Named even if expired: another host then refuses it as expired,
            # as this one would, rather than start the sandbox empty.
            latest = await self._catalogue.latest_snapshot(sandbox_id)
            if latest is None:
                continue
            try:
                if await latest_manifest(self._blobs, sandbox_id) is None:
                    await write_manifest(self._blobs, 0, latest)
            except BlobError as exc:
                log.warning("snapshots of an earlier stead not named in manifests now: %s", exc)
                return

    async def _reclaim_unfinished(self, placements: Mapping[str, int]) -> None:
        """Frees what snapshot uploads of ``placements``' sandboxes left
        unfinished (a previous host killed mid-upload: the local store's part),
        which nothing names and no listing shows. Only where this host's copy
        is the current one: a host that took a sandbox since may be uploading a
        snapshot of it now. A blob store that does not answer leaves them to
        the next start. On S3 none are found: the bucket's lifecycle rule frees
        such uploads there."""
        by_prefix = {sandbox_prefix(sandbox_id): sandbox_id for sandbox_id in placements}
        try:
            found = await self._blobs.unfinished_uploads(SANDBOXES)
            for prefix, uploads in _grouped(found).items():
                sandbox_id = by_prefix.get(prefix)
                if sandbox_id is None:
                    continue  # another host's sandbox
                newest = await newest_placement(self._blobs, sandbox_id)
                if newest is not None and newest > placements[sandbox_id]:
                    continue
                for upload in uploads:
                    await self._blobs.abort_upload(upload)
                log.info("sandbox %s: %d unfinished uploads freed", sandbox_id, len(uploads))
        except BlobError as exc:
            log.warning("unfinished snapshot uploads not freed now: %s", exc)

    # -- background loops -----------------------------------------------------------

    async def sleep_idle(self) -> None:
        """Runs forever: sleeps sandboxes idle past their ``sleep_after``."""
        while True:
            await self._clock.sleep(self._options.idle_check_seconds)
            await self.sleep_idle_once()

    async def sleep_idle_once(self) -> None:
        """One round of the idle sleeper."""
        for sandbox in list(self._sandboxes.values()):
            idle = sandbox.idle_seconds()
            awake = sandbox.state is State.ACTIVE or sandbox.needs_snapshot
            if not awake or idle is None or idle < sandbox.config.sleep_after:
                continue
            try:
                async with self.saving(sandbox):
                    await sandbox.sleep()
            except SandboxErased:
                pass
            except Exception as exc:
                sandbox.last_error = f"sleep failed: {exc}"
                log.exception("sandbox %s could not sleep", sandbox.id)

    async def collect_garbage(self) -> None:
        """Runs forever: deletes snapshots past their expiry and old exec records,
        and books awake sandboxes' active time so far (a host killed with
        sandboxes awake once lost all of it since their wake: usage unbooked)."""
        while True:
            now = self._clock.time()
            await self.collect_once(now=now)
            await self.prune_exec_records(now=now)
            for sandbox in list(self._sandboxes.values()):
                try:
                    await sandbox.book_active()
                except Exception:  # the catalogue: the next round books it
                    log.exception("sandbox %s: awake time not booked now", sandbox.id)
            await self._clock.sleep(self._options.gc_interval_seconds)

    async def prune_exec_records(self, *, now: float) -> int:
        running = {
            (sandbox.id, op_key)
            for sandbox in self._sandboxes.values()
            for op_key in sandbox.running_op_keys()
        }
        before = now - self._options.exec_record_seconds
        return await self._catalogue.prune_execs(before=before, keep=running)

    async def collect_once(self, *, now: float) -> int:
        deleted = 0
        for snapshot in await self._catalogue.expired_snapshots(now=now):
            try:
                await self._blobs.delete(snapshot.blob_key)
            except BlobNotFound:
                pass
            except Exception:
                log.exception("cannot delete expired snapshot %s", snapshot.id)
                continue
            await self._catalogue.mark_snapshot_deleted(snapshot.id, now=now)
            deleted += 1
        return deleted

    async def aclose(self) -> None:
        """Stops every body (their workspaces stay on disk behind the warm
        marker, saved by the next host's idle sleeper)."""
        with anyio.CancelScope(shield=True):
            for sandbox in list(self._sandboxes.values()):
                with contextlib.suppress(Exception):
                    await sandbox.stop()


def _grouped(uploads: Sequence[UnfinishedUpload]) -> dict[str, list[UnfinishedUpload]]:
    """``uploads`` by the sandbox prefix (``sandboxes/<id>``) their keys are under."""
    grouped: dict[str, list[UnfinishedUpload]] = {}
    for upload in uploads:
        grouped.setdefault("/".join(upload.key.split("/")[:2]), []).append(upload)
    return grouped


def _moved(sandbox_id: str, held: int, asked: int) -> SandboxMoved:
    return SandboxMoved(
        f"sandbox {sandbox_id} was placed again (placement {held}) since its lease "
        f"was read (placement {asked})"
    )


def _check_id(sandbox_id: object) -> None:
    if (
        not isinstance(sandbox_id, str)
        or not sandbox_id
        or len(sandbox_id) > SANDBOX_ID_MAX
        or not sandbox_id.isascii()
        or sandbox_id.startswith(".")
        or not all(c.isalnum() or c in "_-.:" for c in sandbox_id)
    ):
        raise InvalidArgument(
            f"sandbox_id: {sandbox_id!r} is not 1-{SANDBOX_ID_MAX} letters, digits, "
            "'_', '-', '.' or ':' (not starting with '.')"
        )


def _placeholder_secret(variable: ops.SecretVariable, index: int) -> PlaceholderSecret:
    hosts = None
    if variable.allowed_hosts is not None:
        try:
            entries = [
                host_entry(h, f"variables.{index}.allowed_hosts.{j}")
                for j, h in enumerate(variable.allowed_hosts)
            ]
        except InvalidPolicy as exc:
            raise InvalidArgument(str(exc)) from None
        hosts = HostSet(entries)
    return PlaceholderSecret(
        credential_id=variable.credential_id,
        placeholder=variable.placeholder.encode(),
        value=variable.value.encode(),
        hosts=hosts,
        header=variable.header,
        body=variable.body,
    )
