"""One sandbox in the host: cold -> warming -> active -> stopping -> cold (rule 6).

Waking mounts the sandbox's disk (``disk.py``: its workspace, ``/tmp`` and
mount tree, of a bounded size), restores the workspace onto it
(``workspace.py``; unless the warm marker says the directory there is
current), installs nothing twice (``packages.py``), creates the cgroup, starts
the egress proxy and the bwrap body under a keeper task that owns them; the
body holds the disk until it stops. Sleeping stops the body, snapshots the
workspace, verifies the snapshot, and only then drops the older snapshots, the
warm marker, the directory and ``/tmp``, and unmounts the disk; the mount tree
(``mounts.py``) stays on it. A snapshot that cannot be taken leaves the
directory and marker; one that cannot be restored (or does not fit the disk)
is ``WorkspaceUnavailable``, never an empty workspace.

Activity (what keeps a sandbox awake): a call in progress, a process the
agent left running in the sandbox, a background process, an attached
terminal. ``idle_seconds`` is None while any of them is present.

Commands (``exec``, at most once per op key) are in ``commands.py``.
"""

from __future__ import annotations

import contextlib
import enum
import logging
import os
import shutil
import signal
import urllib.parse
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
from anyio import to_thread
from anyio.abc import TaskGroup, TaskStatus

from stead.blobs import BlobStore
from stead.failpoints import FailPoints
from stead.sandbox import (
    WORKSPACE,
    InvalidArgument,
    SandboxConfig,
    SandboxNotFound,
    SandboxUnavailable,
    WorkspaceUnavailable,
)
from stead.sandbox.local.paths import WorkspacePaths
from stead.sandbox.local.shell import Shell
from stead.sandbox_host.bwrap import (
    BodySpec,
    BwrapBody,
    run_body,
)
from stead.sandbox_host.catalogue import Catalogue, SandboxRow, SnapshotRow
from stead.sandbox_host.cgroups import CgroupLimits, Cgroups, SandboxCgroup
from stead.sandbox_host.clock import HostClock
from stead.sandbox_host.commands import SandboxCommands
from stead.sandbox_host.config import HostOptions
from stead.sandbox_host.disk import SandboxDisk, SpareDisks
from stead.sandbox_host.egress import AuditLog, EgressProxy, EgressTls, Secrets
from stead.sandbox_host.environment import sandbox_environment
from stead.sandbox_host.host_metrics import HostMetrics
from stead.sandbox_host.installers import mirror_env
from stead.sandbox_host.mounts import MOUNT_ROOT, MountTree
from stead.sandbox_host.packages import PackageCache
from stead.sandbox_host.processes import (
    BackgroundProcess,
    Kind,
    check_size,
    check_terminal_id,
)
from stead.sandbox_host.sandbox_egress import allows_package_managers, egress_policy, egress_terms
from stead.sandbox_host.sandbox_files import SandboxFiles
from stead.sandbox_host.workspace import SandboxErased, SavedWorkspace

log = logging.getLogger("stead.sandbox.host")

KEPT_EXITED = 16
"""Exited processes and terminals a sandbox keeps for reading back (newest first)."""


class State(enum.StrEnum):
    COLD = "cold"
    WARMING = "warming"
    ACTIVE = "active"
    STOPPING = "stopping"


class HostedSandbox(SandboxCommands, SandboxFiles):
    def __init__(
        self,
        row: SandboxRow,
        config: SandboxConfig,
        *,
        options: HostOptions,
        catalogue: Catalogue,
        blobs: BlobStore,
        cgroups: Cgroups,
        packages: PackageCache,
        egress_tls: EgressTls,
        tasks: TaskGroup,
        clock: HostClock,
        metrics: HostMetrics,
        spares: SpareDisks | None = None,
        failpoints: FailPoints | None = None,
    ) -> None:
        self._clock = clock
        self._metrics = metrics
        self.id = row.id
        self.uid = row.uid
        self.config = config
        self._options = options
        self.secrets_generation: int | None = None  # memory only: resent after a restart
        self._secrets = Secrets()
        self._variables: dict[str, str] = {}  # each secret variable's name -> its placeholder
        self._egress_tls = egress_tls
        self.audit = AuditLog()
        """Every request through the egress proxy, in memory across wakes."""
        self._proxy: EgressProxy | None = None
        self._catalogue = catalogue
        self._blobs = blobs
        self._cgroups = cgroups
        self._packages = packages
        self._tasks = tasks
        self.root = options.work_dir / "sandboxes" / urllib.parse.quote(row.id, safe="")
        self.disk = SandboxDisk(self.root, options.sandbox_disk_bytes, row.uid, spares=spares)
        self._disk_held = False
        """Whether the body (awake, or waking) holds the disk."""
        self.workspace = self.disk.workspace  # SavedWorkspace.directory
        self.saved = SavedWorkspace(
            row.id,
            row.uid,
            self.root,
            self.workspace,
            catalogue=catalogue,
            blobs=blobs,
            snapshot_ttl_seconds=options.snapshot_ttl_seconds,
            clock=clock,
            failpoints=failpoints,
        )
        self.saved.placement = row.placement
        self._destroyed = False
        """Set by ``destroy``: a call that got this object before then (the
        manager has dropped it since) must not start a body for it."""
        self._egress_dir = self.root / "egress"
        self.mounts = MountTree(self.disk.mnt, row.uid)
        self.paths = WorkspacePaths(self.workspace, WORKSPACE, uid=self.uid)
        shown = f"{WORKSPACE}/skills"
        self._skills = WorkspacePaths(self.mounts.skills_directory, shown, alias=shown, uid=row.uid)
        self._mount_paths = WorkspacePaths(
            self.mounts.directory, MOUNT_ROOT, alias=MOUNT_ROOT, uid=row.uid
        )
        self.state = State.COLD
        self._transition = anyio.Lock()
        self._exec_lock = anyio.Lock()
        self._terminal_lock = anyio.Lock()
        self._running: dict[str, anyio.Event] = {}
        self._body: BwrapBody | None = None
        self._cgroup: SandboxCgroup | None = None
        self._keeper: anyio.CancelScope | None = None
        self._installing: anyio.CancelScope | None = None
        """Around a wake's wait for its packages, which ``destroy`` cancels."""
        self._destroying = False
        self._keeper_done: anyio.Event | None = None
        self._shell: Shell | None = None
        self._shell_env: dict[str, str] = {}
        self._shell_lost = False
        self._baseline_pids = 0
        self.processes: dict[str, BackgroundProcess] = {}
        self.terminals = 0
        self._busy = 0
        self._last_activity = self._clock.monotonic()
        self._active_since: float | None = None
        self._active_recorded = row.active_seconds
        self.last_error: str | None = None

    # -- activity -----------------------------------------------------------------

    @contextlib.asynccontextmanager
    async def activity(self, *, wake: bool = True) -> AsyncIterator[None]:
        """Marks a call in progress; with ``wake``, the sandbox is awake inside
        the block."""
        self._busy += 1
        try:
            if wake:
                await self.ensure_active()
            yield
        finally:
            self._busy -= 1
            self._last_activity = self._clock.monotonic()

    def touch(self) -> None:
        """Counts as activity now (a terminal client just left)."""
        self._last_activity = self._clock.monotonic()

    def idle_seconds(self) -> float | None:
        """Seconds since the last activity; None while anything is going on."""
        if self._busy or self.terminals:
            return None
        # Seen running, a process was active now: one that just exited keeps
        # its sandbox awake ``sleep_after``, its exit code and output readable.
        if any(p.running for p in self.processes.values()) or (
            self.state is State.ACTIVE and self._agent_processes() > 0
        ):
            self._last_activity = self._clock.monotonic()
            return None
        return self._clock.monotonic() - self._last_activity

    def _agent_processes(self) -> int:
        if self._cgroup is None:
            return 0
        try:
            current = self._cgroup.pids_current()
        except OSError:
            return 0
        shell = 1 if self._shell is not None and self._shell.alive else 0
        return current - self._baseline_pids - shell

    @property
    def needs_snapshot(self) -> bool:
        """Cold with a workspace that no snapshot holds yet (a failed sleep)."""
        return self.state is State.COLD and self.saved.is_warm

    # -- lifecycle ----------------------------------------------------------------

    async def ensure_active(self) -> None:
        if self.state is State.ACTIVE and self._body is not None and self._body.alive:
            return
        async with self._transition:
            if self.state is State.ACTIVE and self._body is not None and self._body.alive:
                return
            if self._destroyed:
                raise SandboxNotFound(f"sandbox {self.id} was destroyed")
            await self._stop_body()
            self.state = State.WARMING
            try:
                with self._metrics.timed("wake"):
                    await self._wake()
            except BaseException:
                self.state = State.COLD
                with anyio.CancelScope(shield=True):
                    await self._stop_body()
                raise
            self.state = State.ACTIVE
            self._active_since = self._clock.monotonic()
            self._last_activity = self._clock.monotonic()

    async def _wake(self) -> None:
        try:
            await self.disk.acquire()
            self._disk_held = True  # until _stop_body
            await self.saved.prepare()
        except (WorkspaceUnavailable, SandboxUnavailable) as exc:
            self.last_error = str(exc)
            raise
        await to_thread.run_sync(self.disk.fresh_tmp)
        await to_thread.run_sync(self.mounts.ensure)
        # ``destroy`` cuts this short, not to wait for an install's end (one
        # stalled on a registry takes its whole timeout); nothing of the
        # sandbox is changed by it, so cutting it loses nothing.
        if self._destroying:  # a destroy that came while the wake was preparing
            raise SandboxUnavailable(f"sandbox {self.id} is being destroyed")
        self._installing = installing = anyio.CancelScope()
        try:
            with installing:
                packages_dir = await self._packages.ensure(self.config)
        finally:
            self._installing = None
        if installing.cancelled_caught:
            # Unavailable, not gone: the destroy may yet fail and keep it.
            raise SandboxUnavailable(f"sandbox {self.id} is being destroyed")
        limits = CgroupLimits(self.config.memory_bytes, self.config.pids, self.config.cpus)
        cgroup = await to_thread.run_sync(self._cgroups.create, self._cgroup_name, limits)
        self._cgroup = cgroup
        spec = BodySpec(
            uid=self.uid,
            workspace=self.workspace,
            tmp_dir=self.disk.tmp,
            egress_dir=self._egress_dir,
            mounts_dir=self.mounts.directory,
            skills=self.config.skills,
            packages_dir=packages_dir,
            lib_dir=self._options.work_dir / "lib",
            ca_dir=self._options.work_dir / "ca",
            bwrap=self._options.bwrap,
            open_files=self._options.sandbox_open_files,
        )
        self._keeper_done = anyio.Event()
        self._body = await self._tasks.start(self._keep, spec, cgroup, self._keeper_done)
        self._baseline_pids = await to_thread.run_sync(cgroup.pids_current)

    @property
    def _cgroup_name(self) -> str:
        return f"sbx-{self.uid}"

    async def _keep(
        self,
        spec: BodySpec,
        cgroup: SandboxCgroup,
        done: anyio.Event,
        *,
        task_status: TaskStatus[BwrapBody],
    ) -> None:
        """Owns the body and its egress proxy until stopped or the body dies."""
        started_with = self.config
        policy = egress_policy(started_with, self._options)
        try:
            with anyio.CancelScope() as scope:
                self._keeper = scope
                await to_thread.run_sync(_fresh_dir, self._egress_dir)
                async with (
                    EgressProxy(
                        self._egress_dir / "proxy.sock",
                        policy,
                        connect_timeout=self._options.proxy_connect_timeout,
                        idle_timeout=self._options.proxy_idle_timeout,
                        secrets=self._secrets,
                        tls=self._egress_tls,
                        pinned=dict(self._options.egress_hosts),
                        audit=self.audit,
                        counted=self._metrics.egress,
                    ) as proxy,
                    run_body(spec, cgroup) as body,
                ):
                    self._proxy = proxy
                    if self.config != started_with:  # reconfigured while starting
                        proxy.policy = egress_policy(self.config, self._options)
                    task_status.started(body)
                    await body.channel.closed.wait()
                    log.warning("sandbox %s stopped on its own", self.id)
        finally:
            self._keeper = None
            self._proxy = None
            if self._body is not None and self.state is State.ACTIVE:
                self.state = State.COLD  # died under us; the warm marker keeps the files
            self._body = None
            self._shell_lost = self._shell_lost or self._shell is not None
            self._shell = None
            done.set()

    async def _stop_body(self) -> None:
        if self._keeper is not None:
            self._keeper.cancel()
        if self._keeper_done is not None:
            with anyio.CancelScope(shield=True):
                await self._keeper_done.wait()
        self._keeper_done = None
        processes, self.processes = self.processes, {}
        for process in processes.values():
            process.forget()
        if self._cgroup is not None:
            cgroup, self._cgroup = self._cgroup, None
            with anyio.CancelScope(shield=True), contextlib.suppress(OSError):
                await to_thread.run_sync(cgroup.destroy)
        if self._disk_held:  # after the cgroup: no process of the body is left inside
            self._disk_held = False
            await self.disk.release()
        await self.book_active(stopped=True)

    async def book_active(self, *, stopped: bool = False) -> None:
        """Adds the awake time not yet in the catalogue to it: at each stop, and
        now and then while awake, so a host killed loses only the time since."""
        if self._active_since is None:
            return
        now = self._clock.monotonic()
        seconds = now - self._active_since
        self._active_since = None if stopped else now
        self._active_recorded += seconds
        with anyio.CancelScope(shield=True):
            await self._catalogue.add_active_seconds(self.id, seconds)

    async def sleep(self, *, force: bool = False) -> bool:
        """Stops the sandbox and snapshots its workspace. False if it was busy
        (and not forced) or is already asleep with its workspace saved."""
        async with self._transition:
            if not force and self.idle_seconds() is None:
                return False
            if not await to_thread.run_sync(lambda: self.saved.is_warm):
                await self._halt()
                return False
            # Held across the stop, so the disk the body let go of stays
            # mounted for the snapshot (an unmount and a mount fewer).
            async with self.disk.held():
                # Always: a body that stopped on its own (``_keep``) still holds
                # its disk and cgroup, and its awake time is not booked yet.
                await self._halt()
                with self._metrics.timed("snapshot"):
                    await self.saved.save()
                await to_thread.run_sync(self.disk.drop_tmp)
            return True

    async def snapshot(self) -> SnapshotRow | None:
        """Saves the workspace now, without stopping or waking the sandbox, and
        returns the snapshot that holds it: a new one when the directory on
        disk is current, else the latest (a sleeping sandbox's). None if the
        sandbox never had a workspace; ``WorkspaceUnavailable`` if its saved
        workspace expired."""
        async with self.activity(wake=False), self._transition:
            if await to_thread.run_sync(lambda: self.saved.is_warm):
                async with self.disk.held():
                    with self._metrics.timed("snapshot"):
                        return await self.saved.checkpoint()
            return await self.saved.latest()

    async def stop(self) -> None:
        """Stops the body without a snapshot; the warm marker keeps the files."""
        async with self._transition:
            await self._halt()

    async def _halt(self) -> None:
        """Stops the body (the caller holds the transition lock)."""
        self.state = State.STOPPING
        try:
            await self._stop_body()
        finally:
            self.state = State.COLD

    @property
    def placement(self) -> int | None:
        """The placement this copy belongs to (``placements.py``)."""
        return self.saved.placement

    async def abandon(self, placement: int) -> None:
        """This copy is not the current one: the body stops and the workspace on
        disk goes unsaved (the latest snapshot holds the current one); the copy
        belongs to ``placement`` from now on."""
        async with self._transition:
            await self._halt()
            if await to_thread.run_sync(lambda: self.saved.is_warm):
                async with self.disk.held():
                    await self.saved.discard()
            self.saved.placement = placement

    def placed(self, placement: int) -> None:
        """This copy, as it is, belongs to ``placement`` from now on."""
        self.saved.placement = placement

    async def destroy(self, *, erase: bool = False) -> None:
        """Final snapshot, then every trace of the sandbox on this machine; with
        ``erase``, no snapshot, and every one saved before is deleted too."""
        self._destroying = True
        try:
            await self._destroy(erase)
        finally:
            self._destroying = False

    async def _destroy(self, erase: bool) -> None:
        if self._installing is not None:
            self._installing.cancel()
        if not erase:
            try:
                await self.sleep(force=True)
            except SandboxErased:
                erase = True  # erased through another host: nothing of it is kept
        async with self._transition:
            # First: a call holding this object may not wake it meanwhile.
            self._destroyed = True
            try:
                await self._halt()  # a call woke it since the final snapshot, say
                await self.disk.remove()
                if erase:
                    await self.saved.erase()
                else:
                    await to_thread.run_sync(self.saved.remove)
            except BaseException:
                self._destroyed = False  # still the manager's: usable, destroyed again later
                self.disk.restore()
                raise
            await self._catalogue.mark_destroyed(self.id, now=self._clock.time())

    # -- background processes -------------------------------------------------------

    async def start_process(self, command: str, *, name: str | None) -> BackgroundProcess:
        if "\x00" in command:
            raise InvalidArgument("the command contains a NUL byte")
        async with self.activity():
            body = self._require_body()
            process = await body.spawn(["/bin/bash", "-c", command], self.environment())
            background = BackgroundProcess.start(process, command, name, self._tasks)
            self._hold(background)
            return background

    def _hold(self, process: BackgroundProcess) -> None:
        """Adds ``process``, and lets the oldest exited ones go (none a client is
        attached to) past ``KEPT_EXITED``: each holds up to a mebibyte of
        output, and a sandbox kept awake by a terminal never sleeps them away."""
        exited = sorted(
            (p for p in self.processes.values() if not p.running and not p.attached),
            key=lambda p: p.started_at,
        )
        for old in exited[: max(0, len(exited) + 1 - KEPT_EXITED)]:
            del self.processes[old.id]
        self.processes[process.id] = process

    async def terminal(
        self, terminal_id: str, *, kind: Kind, command: str | None, rows: int, cols: int
    ) -> BackgroundProcess:
        """The terminal with this id, started if new: an exec of ``command``
        (stdout and stderr apart) or a PTY running ``command`` or a login bash."""
        check_terminal_id(terminal_id)
        async with self._terminal_lock:
            found = self.processes.get(terminal_id)
            if found is not None:
                return found
            if kind is Kind.EXEC and not command:
                raise InvalidArgument("command: an exec terminal needs a command")
            if command is not None and "\x00" in command:
                raise InvalidArgument("command: contains a NUL byte")
            check_size(rows, cols)
            async with self.activity():
                body = self._require_body()
                env = self.environment()
                argv = ["/bin/bash", "-c", command] if command else ["/bin/bash", "-l"]
                if kind is Kind.PTY:
                    env["TERM"] = "xterm-256color"
                    process = await body.spawn(argv, env, pty=(rows, cols))
                else:
                    process = await body.spawn(argv, env, stderr="pipe")
                started = BackgroundProcess.start(
                    process, command or "bash -l", None, self._tasks, kind=kind, id=terminal_id
                )
                self._hold(started)
                return started

    def process(self, process_id: str) -> BackgroundProcess:
        found = self.processes.get(process_id)
        if found is None:
            raise InvalidArgument(f"process_id: no process {process_id!r} in this sandbox")
        return found

    async def kill_process(self, process_id: str, signum: int = signal.SIGKILL) -> None:
        async with self.activity():
            await self.process(process_id).signal(signum)

    # -- status ---------------------------------------------------------------------

    @property
    def active_seconds(self) -> float:
        """Seconds this sandbox has been awake, all wakes together (usage, rule 9)."""
        current = (
            self._clock.monotonic() - self._active_since if self._active_since is not None else 0
        )
        return self._active_recorded + current

    def reconfigure(self, config: SandboxConfig) -> None:
        """The config of the latest acquire. Its ``networking`` applies to the
        running egress proxy at once (the next request, in open tunnels too):
        an environment's update must not wait for a wake that a busy sandbox
        may never reach; so do the agent's MCP server hosts (a session's update
        may change them). The rest (limits, packages) applies at the next wake."""
        if self._proxy is not None and egress_terms(config) != egress_terms(self.config):
            self._proxy.policy = egress_policy(config, self._options)
        self.config = config

    def set_credentials(self, generation: int, secrets: Secrets, variables: dict[str, str]) -> None:
        """What the egress proxy may inject from now on, running or next wake, and
        the placeholders every process started from now on sees (a shell started
        with other placeholders is started again on its next use)."""
        self._secrets = secrets
        self._variables = variables
        self.secrets_generation = generation
        if self._proxy is not None:
            self._proxy.secrets = secrets

    def environment(self) -> dict[str, str]:
        """The environment of a process started in the sandbox now: with the
        package mirrors' settings when its networking allows package managers."""
        mirrors = mirror_env(self._options) if allows_package_managers(self.config) else {}
        env = sandbox_environment(mirrors | self.config.env, network=True, trust=True)
        return env | self._variables

    def status(self) -> dict[str, Any]:
        return {
            "sandbox_id": self.id,
            "state": self.state.value,
            "uid": self.uid,
            "active_seconds": self.active_seconds,
            "idle_seconds": self.idle_seconds(),
            "processes": [p.describe() for p in self.processes.values()],
            "terminals": self.terminals,
            "last_error": self.last_error,
        }


def _fresh_dir(path: Path) -> None:
    shutil.rmtree(path, ignore_errors=True)
    path.mkdir(parents=True, mode=0o755)
    os.chmod(path, 0o755)
