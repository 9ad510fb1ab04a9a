"""The sandbox host as a provider: isolated sandboxes in a process of their
own that outlives the brain (rule 6), reached over the host protocol; each
sandbox in the host its lease places it on (``place``), this process's own or
another machine's.

With a ``HostLauncher``, a local host that does not answer is started
detached: its own session, no stdin, output appended to ``host.log``, and the
brain's environment, so it reads the same ``STEAD_*`` settings itself
(``stead.sandbox_host.settings``). A later brain finds it by its socket.

The host protocol and its client are imported when a host is first reached,
not when the provider is made at start-up (the package's ``__getattr__``).
"""

from __future__ import annotations

import logging
import os
import secrets
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import anyio
from anyio import to_thread

from stead.jsonvalues import Json
from stead.sandbox.address import ClientTimeouts, HostAddress, parse_address
from stead.sandbox.base import Sandbox
from stead.sandbox.config import SandboxConfig
from stead.sandbox.errors import HostUnreachable, InvalidArgument, SandboxUnavailable
from stead.sandbox.host_mounts import HostMounts
from stead.sandbox.mounts import SandboxMounts
from stead.sandbox.provider import (
    PLACEHOLDER_PREFIX,
    EgressCredential,
    EgressSecret,
    EnvironmentCredential,
    HostIdentity,
    Placement,
)
from stead.sandbox.terminals import Terminal, TerminalRequest

if TYPE_CHECKING:
    from stead.sandbox import ops
    from stead.sandbox.client import HostClient, HostSandbox

log = logging.getLogger("stead.sandbox.host")

START_SECONDS = 60.0
"""How long a freshly started host may take to pass its self-check and listen."""
PROBE_INTERVAL = 0.1
STOP_SECONDS = 10.0
"""How long a host that did not start may take to stop when asked, before it is killed."""
EXIT_ALREADY_RUNNING = 1
"""``stead sandbox-host``'s exit status when another host holds its state directory
or socket; any other status of a host that exited at once means none will answer."""


@dataclass(frozen=True, slots=True)
class HostLauncher:
    """How to start a local host when none answers."""

    state_dir: Path
    env: Mapping[str, str] = field(default_factory=dict)
    """Set over this process's environment: what the brain resolved itself
    (its data and state directories), so the host serves the same ones."""

    def launch(self) -> subprocess.Popen[bytes]:
        self.state_dir.mkdir(parents=True, exist_ok=True)
        os.chmod(self.state_dir, 0o700)
        with open(self.state_dir / "host.log", "ab") as output:
            started = subprocess.Popen(
                [sys.executable, "-m", "stead", "sandbox-host"],
                stdin=subprocess.DEVNULL,
                stdout=output,
                stderr=subprocess.STDOUT,
                env={**os.environ, **self.env},
                start_new_session=True,
                close_fds=True,
            )
        log.info("started a sandbox host in %s", self.state_dir)
        return started


async def _end(process: subprocess.Popen[bytes]) -> None:
    """Stops a host this process started: SIGTERM, then SIGKILL if it is
    still there after ``STOP_SECONDS``; reaped either way."""
    with anyio.CancelScope(shield=True):
        process.terminate()
        try:
            await to_thread.run_sync(process.wait, STOP_SECONDS)
        except subprocess.TimeoutExpired:
            process.kill()
            await to_thread.run_sync(process.wait)
        log.warning("stopped the sandbox host that did not start (pid %d)", process.pid)


class HostProvider:
    """Sandboxes in sandbox hosts: this process's own (``address``, started by
    ``launcher`` when it does not answer), and for a sandbox whose lease places
    it on another host, that host at the address the lease records (TCP with
    ``token``, the one every host shares), through a client kept per address."""

    leased = True

    def __init__(
        self,
        address: HostAddress,
        launcher: HostLauncher | None = None,
        *,
        token: str | None = None,
        timeouts: ClientTimeouts | None = None,
    ) -> None:
        self._address = address
        self._launcher = launcher
        self._token = token
        self._timeouts = timeouts
        self._client: HostClient | None = None
        self._lock = anyio.Lock()
        self._secrets = _Secrets()
        self._home: HostIdentity | None = None
        self._placements: dict[str, Placement] = {}
        self._remote: dict[str, HostClient] = {}
        """Address -> the client of another host holding sandboxes this process used."""

    async def client(self) -> HostClient:
        async with self._lock:
            if self._client is None:
                self._client = await self._connect()
            return self._client

    async def _connect(self) -> HostClient:
        from stead.sandbox.client import HostClient

        client = HostClient(self._address, self._timeouts)
        try:
            await client.ping()
            return client
        except SandboxUnavailable:
            if self._launcher is None or client.address.unix_path is None:
                await client.aclose()
                raise
        started = self._launcher.launch()
        with anyio.move_on_after(START_SECONDS):
            while True:
                try:
                    await client.ping()
                    return client
                except SandboxUnavailable:
                    code = started.poll()
                    # One that found another host starting waits for that one.
                    if code is not None and code != EXIT_ALREADY_RUNNING:
                        break
                    await anyio.sleep(PROBE_INTERVAL)
        await client.aclose()
        log_path = self._launcher.state_dir / "host.log"
        code = started.poll()
        if code is not None:
            raise SandboxUnavailable(
                f"the sandbox host did not start (it exited with {code}); see {log_path}"
            )
        # Not left running for the next start to trip over (its lock, its uids).
        await _end(started)
        raise SandboxUnavailable(f"the sandbox host did not start; see {log_path}")

    async def home(self) -> HostIdentity:
        if self._home is None:
            reply = await (await self.client()).ping()
            address = reply.get("address")
            self._home = HostIdentity(str(reply["host_id"]), str(address) if address else None)
        return self._home

    def place(self, sandbox_id: str, placement: Placement | None) -> bool:
        before = self._placements.get(sandbox_id)
        if placement is None:
            self._placements.pop(sandbox_id, None)
        else:
            self._placements[sandbox_id] = placement
        return before != placement

    async def _route(self, sandbox_id: str) -> tuple[HostClient, int | None]:
        """The client of the host holding the sandbox, and its placement."""
        placement = self._placements.get(sandbox_id)
        if placement is None:
            return await self.client(), None
        if await self._is_home(placement.host):
            return await self.client(), placement.number
        return self._remote_client(placement.host), placement.number

    async def _is_home(self, host: HostIdentity) -> bool:
        try:
            return (await self.home()).host_id == host.host_id
        except SandboxUnavailable:
            # Our own host is down: another one may still answer at its address.
            return host.address is None

    def _remote_client(self, host: HostIdentity) -> HostClient:
        from stead.sandbox.client import HostClient

        if host.address is None:
            raise HostUnreachable(
                f"the sandbox is on host {host.host_id}, which has no address other "
                "processes can reach (STEAD_SANDBOX_HOST_ADVERTISE)"
            )
        found = self._remote.get(host.address)
        if found is None:
            if not self._token:
                raise HostUnreachable(
                    f"the sandbox is on host {host.host_id} at {host.address}: reaching it "
                    "needs STEAD_SANDBOX_HOST_TOKEN, the token every host shares"
                )
            try:
                address = parse_address(host.address, self._token)
            except InvalidArgument as exc:
                raise HostUnreachable(f"host {host.host_id}'s address: {exc}") from None
            found = self._remote[host.address] = HostClient(address, self._timeouts)
        return found

    async def _sandbox(self, sandbox_id: str, config: SandboxConfig) -> HostSandbox:
        from stead.sandbox.client import HostSandbox

        client, placement = await self._route(sandbox_id)
        return HostSandbox(client, sandbox_id, config, self._secrets, placement=placement)

    async def acquire(self, sandbox_id: str, config: SandboxConfig) -> Sandbox:
        return await self._sandbox(sandbox_id, config)

    async def status(self, sandbox_id: str) -> Json | None:
        client, _ = await self._route(sandbox_id)
        return await client.sandbox_status(sandbox_id)

    async def egress_audit(self, sandbox_id: str, after: int, limit: int) -> Json | None:
        client, _ = await self._route(sandbox_id)
        return await client.sandbox_egress_audit(sandbox_id, after, limit)

    async def terminal(
        self, sandbox_id: str, config: SandboxConfig, request: TerminalRequest
    ) -> Terminal:
        sandbox = await self._sandbox(sandbox_id, config)
        return await sandbox.terminal(
            request.terminal_id,
            kind=request.kind,
            command=request.command,
            rows=request.rows,
            cols=request.cols,
            offset=request.offset,
        )

    async def set_secrets(
        self, sandbox_id: str, config: SandboxConfig, secrets: Sequence[EgressSecret]
    ) -> None:
        await self._secrets.replace(await self._sandbox(sandbox_id, config), secrets)

    def mounts(self) -> SandboxMounts | None:
        return HostMounts(self._route)

    async def release(self, sandbox_id: str, *, erase: bool = False) -> float | None:
        self._secrets.forget(sandbox_id)
        client, _ = await self._route(sandbox_id)
        return await client.destroy(sandbox_id, erase=erase)

    def forget(self, sandbox_id: str) -> None:
        self._secrets.forget(sandbox_id)
        self._placements.pop(sandbox_id, None)

    async def aclose(self) -> None:
        clients, self._remote = list(self._remote.values()), {}
        if self._client is not None:
            clients.append(self._client)
            self._client = None
        for client in clients:
            await client.aclose()


class _Secrets:
    """Each sandbox's credentials in this brain's memory, under a generation the
    host must hold too: a host that restarted holds none and gets them again
    on the next call (``SecretsOutdated``). A variable credential keeps its
    placeholder for as long as it stays in its sandbox's set."""

    def __init__(self) -> None:
        self._held: dict[str, tuple[int, list[ops.Credential], list[ops.SecretVariable]]] = {}
        self._next = 1

    def generation(self, sandbox_id: str) -> int | None:
        found = self._held.get(sandbox_id)
        return found[0] if found is not None else None

    async def replace(self, sandbox: HostSandbox, secrets: Sequence[EgressSecret]) -> None:
        from stead.sandbox import ops

        held = self._held.get(sandbox.sandbox_id)
        known = {(v.credential_id, v.name): v.placeholder for v in held[2]} if held else {}
        headers = [
            ops.Credential(
                host=s.host.lower(),
                port=s.port,
                header=s.header,
                value=s.value,
                credential_id=s.credential_id,
                paths=list(s.paths),
            )
            for s in secrets
            if isinstance(s, EgressCredential)
        ]
        variables = [
            _variable(s, s.placeholder or known.get((s.credential_id, s.secret_name)))
            for s in secrets
            if isinstance(s, EnvironmentCredential)
        ]
        generation, self._next = self._next, self._next + 1
        await sandbox.set_secrets(generation, headers, variables)
        self._held[sandbox.sandbox_id] = (generation, headers, variables)

    async def resend(self, sandbox: HostSandbox) -> None:
        found = self._held.get(sandbox.sandbox_id)
        if found is not None:
            await sandbox.set_secrets(*found)

    def forget(self, sandbox_id: str) -> None:
        self._held.pop(sandbox_id, None)


def _variable(credential: EnvironmentCredential, placeholder: str | None) -> ops.SecretVariable:
    from stead.sandbox import ops

    hosts = credential.allowed_hosts
    return ops.SecretVariable(
        credential_id=credential.credential_id,
        name=credential.secret_name,
        # Random, so it says nothing of the value; the proxy finds it by exact match.
        placeholder=placeholder or f"{PLACEHOLDER_PREFIX}{secrets.token_hex(20)}",
        value=credential.value,
        allowed_hosts=list(hosts) if hosts is not None else None,
        header=credential.header,
        body=credential.body,
    )
