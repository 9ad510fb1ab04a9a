"""Which sandbox host each session's sandbox lives on, when there are several
(one per machine): the lease records it (``SandboxLease.host_id``, its address,
and the placement count), and this process sends the sandbox's calls there.

A sandbox whose lease names no host yet is placed on this process's own host
by the acquire that renews the lease. One whose host stopped answering moves
here (``move_here``): the lease moves only from the placement this process
saw failing, so of several processes that find the host gone one moves it and
the others follow it; the new host takes the workspace from the sandbox's
latest snapshot (``stead.sandbox_host.placements``). Work done on the lost
host after that snapshot is lost with it.
"""

from __future__ import annotations

import logging
from typing import Protocol

from stead.sandbox import HostIdentity, Placement, SandboxError, SandboxProvider
from stead.store import LeaseHost, SandboxLease

log = logging.getLogger("stead.runtime.placements")


class PlacementStore(Protocol):
    async def move_sandbox_lease(
        self, sandbox_id: str, *, placement: int, host: LeaseHost
    ) -> SandboxLease | None: ...


class SandboxPlacements:
    def __init__(self, store: PlacementStore, provider: SandboxProvider) -> None:
        self._store = store
        self._provider = provider
        self._seen: dict[str, Placement] = {}
        """Sandbox id -> the placement its calls from here go to."""

    async def home(self) -> LeaseHost | None:
        """This process's own host as a lease records it; None when the provider
        has no hosts, or its host cannot be asked now (the lease then records
        none, and a later acquire does)."""
        try:
            identity = await self._provider.home()
        except SandboxError as exc:
            log.info("this process's sandbox host cannot be asked now: %s", exc)
            return None
        return None if identity is None else LeaseHost(identity.host_id, identity.address)

    def follow(self, lease: SandboxLease) -> bool:
        """Sends the sandbox's calls where ``lease`` places it; True when that
        changed where they go."""
        placement = None
        if lease.host_id is not None:
            host = HostIdentity(lease.host_id, lease.host_address)
            placement = Placement(host, lease.placement)
            self._seen[lease.sandbox_id] = placement
        else:
            self._seen.pop(lease.sandbox_id, None)
        return self._provider.place(lease.sandbox_id, placement)

    async def move_here(self, sandbox_id: str) -> bool:
        """The host the sandbox's calls went to cannot be reached: its lease
        moves to this process's host, unless it moved elsewhere since (then
        calls follow it there). True when calls now go to another host; False
        when there is nowhere to go (the lost host is this process's own, or
        this process has none)."""
        seen = self._seen.get(sandbox_id)
        home = await self.home()
        if seen is None or home is None or seen.host.host_id == home.host_id:
            return False
        current = await self._store.move_sandbox_lease(sandbox_id, placement=seen.number, host=home)
        if current is None:
            return False  # the lease ended meanwhile: the next call says so
        self.follow(current)
        if current.placement == seen.number + 1 and current.host_id == home.host_id:
            log.warning(
                "sandbox %s: host %s did not answer; moved to this process's host %s "
                "(placement %d), restored from its latest snapshot",
                sandbox_id,
                seen.host.host_id,
                home.host_id,
                current.placement,
            )
        return current.placement != seen.number

    def current(self, sandbox_id: str) -> Placement | None:
        """Where the sandbox's calls go now; each ``follow`` of a placed lease
        records a new object, so a caller can tell whether one came between."""
        return self._seen.get(sandbox_id)

    def forget(self, sandbox_id: str) -> None:
        """The sandbox was destroyed: its next lease places it anew."""
        self._seen.pop(sandbox_id, None)
        self._provider.place(sandbox_id, None)
