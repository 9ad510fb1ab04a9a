"""An operator's view of the sandbox host ``stead serve`` uses: is it up, what
does it hold, and stopping it (``stead sandbox-host status|stop``).

The host outlives ``stead serve`` by design (rule 6: killing the brain kills
no sandbox), so stopping it is a deliberate act: its sandboxes' processes and
terminals end; their workspaces stay on disk behind the warm marker, and the
next host saves or restores them.
"""

from __future__ import annotations

import os
import signal
import socket
import struct
from dataclasses import dataclass
from pathlib import Path

import anyio
from anyio import to_thread

from stead.jsonvalues import Json
from stead.sandbox.address import ClientTimeouts, HostAddress
from stead.sandbox.client import HostClient
from stead.sandbox.errors import SandboxError, VersionMismatch

STATUS_TIMEOUTS = ClientTimeouts(connect=5.0, call=10.0)
STOP_POLL_SECONDS = 0.2
PEERCRED = struct.Struct("3i")
"""``struct ucred`` (pid, uid, gid), as ``SO_PEERCRED`` gives it on Linux."""


@dataclass(frozen=True, slots=True)
class HostStatus:
    address: HostAddress
    answer: Json | None
    """The host's ping answer (``pid``, ``version``, ``sandboxes`` by state
    ...); None when no host this stead can use answers at ``address``."""
    problem: str | None = None
    other_version: bool = False
    """A host of another stead version answers (``problem`` names both
    versions): one left running across an upgrade, which this stead cannot use."""
    pid: int | None = None
    """The process of the host that answers, of this version or (on a Unix
    socket) another."""

    @property
    def answers(self) -> bool:
        """Something answers as a sandbox host, of this version or another."""
        return self.answer is not None or self.other_version


async def host_status(address: HostAddress) -> HostStatus:
    client = HostClient(address, STATUS_TIMEOUTS)
    try:
        answer = await client.ping()
        return HostStatus(address, answer, pid=int(answer["pid"]))
    except VersionMismatch as exc:
        # It answers no call of ours, so it is asked nothing: the socket says who it is.
        pid = await to_thread.run_sync(_peer_pid, address.unix_path)
        return HostStatus(address, None, str(exc), other_version=True, pid=pid)
    except (SandboxError, OSError) as exc:
        return HostStatus(address, None, str(exc))
    finally:
        await client.aclose()


def _peer_pid(path: Path | None) -> int | None:
    """The pid of the process listening on the Unix socket ``path``; None for
    TCP, or when it went away."""
    if path is None:
        return None
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(STATUS_TIMEOUTS.connect)
            sock.connect(str(path))
            credentials = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, PEERCRED.size)
    except OSError:
        return None
    pid, _, _ = PEERCRED.unpack(credentials)
    return int(pid) or None


async def stop_host(address: HostAddress, *, wait_seconds: float) -> HostStatus:
    """Asks the host at ``address`` (a local one: it is signalled by pid) to stop,
    of this stead's version or another (one left running across an upgrade),
    and waits until none answers there; the status it had. ``TimeoutError``
    if it still answers after ``wait_seconds``; ``ValueError`` for a remote host."""
    if address.unix_path is None:
        raise ValueError(f"{address} is a remote host: stop it on its own machine")
    found = await host_status(address)
    if found.pid is None:
        return found
    os.kill(found.pid, signal.SIGTERM)
    # A process of its own that owes this one no notice: ask until it is gone.
    with anyio.fail_after(wait_seconds):
        while True:
            if not (await host_status(address)).answers:
                return found
            await anyio.sleep(STOP_POLL_SECONDS)
