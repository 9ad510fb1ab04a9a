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
from dataclasses import dataclass

import anyio

from stead.jsonvalues import Json
from stead.sandbox.address import ClientTimeouts, HostAddress
from stead.sandbox.client import HostClient
from stead.sandbox.errors import SandboxError

STATUS_TIMEOUTS = ClientTimeouts(connect=5.0, call=10.0)
STOP_POLL_SECONDS = 0.2


@dataclass(frozen=True, slots=True)
class HostStatus:
    address: HostAddress
    answer: Json | None
    """The host's ping answer (``pid``, ``version``, ``sandboxes`` by state
    ...); None when nothing answers at ``address``."""
    problem: str | None = None


async def host_status(address: HostAddress) -> HostStatus:
    client = HostClient(address, STATUS_TIMEOUTS)
    try:
        return HostStatus(address, await client.ping())
    except (SandboxError, OSError) as exc:
        return HostStatus(address, None, str(exc))
    finally:
        await client.aclose()


async def stop_host(address: HostAddress, *, wait_seconds: float) -> HostStatus:
    """Asks the host at ``address`` (a local one: it is signalled by pid) to stop,
    and waits until nothing answers there; the status it had. ``TimeoutError``
    if it still answers after ``wait_seconds``; ``ValueError`` for a remote host."""
    if address.unix_path is None:
        raise ValueError(f"{address} is a remote host: stop it on its own machine")
    found = await host_status(address)
    if found.answer is None:
        return found
    os.kill(int(found.answer["pid"]), signal.SIGTERM)
    # A process of its own that owes this one no notice: ask until it is gone.
    with anyio.fail_after(wait_seconds):
        while True:
            if (await host_status(address)).answer is None:
                return found
            await anyio.sleep(STOP_POLL_SECONDS)
