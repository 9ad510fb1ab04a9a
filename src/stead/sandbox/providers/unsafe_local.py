"""``unsafe_local``: sandboxes that ISOLATE NOTHING, in this process
(``stead.sandbox.local.sandbox``). Only when named (rule 7); it has no
terminals and no egress proxy, so it refuses secrets rather than hand a
credential to code running as the server's own user."""

from __future__ import annotations

import shutil
import time
from collections.abc import Sequence
from pathlib import Path

import anyio
from anyio import to_thread

from stead.jsonvalues import Json
from stead.sandbox.base import Sandbox
from stead.sandbox.config import SandboxConfig
from stead.sandbox.errors import NoSandbox
from stead.sandbox.local.sandbox import UnsafeLocalSandbox
from stead.sandbox.mounts import SandboxMounts
from stead.sandbox.provider import EgressSecret, HostIdentity, Placement
from stead.sandbox.terminals import Terminal, TerminalRequest

NO_TERMINALS = "terminals need the sandbox host: this server runs STEAD_SANDBOX=unsafe_local"
NO_SECRETS = (
    "unsafe_local sandboxes have no egress proxy, so credentials cannot be kept "
    "out of them: use STEAD_SANDBOX=bwrap"
)


class UnsafeLocalProvider:
    leased = False

    def __init__(self, root: Path) -> None:
        self._root = root
        self._sandboxes: dict[str, tuple[UnsafeLocalSandbox, float]] = {}
        self._lock = anyio.Lock()

    def _directory(self, sandbox_id: str) -> Path:
        directory = self._root / sandbox_id
        if directory.parent != self._root or sandbox_id in ("", ".", ".."):
            raise ValueError(f"not a sandbox id: {sandbox_id!r}")
        return directory

    async def home(self) -> HostIdentity | None:
        return None  # no host: sandboxes here are never placed

    def place(self, sandbox_id: str, placement: Placement | None) -> bool:
        return False

    async def acquire(self, sandbox_id: str, config: SandboxConfig) -> Sandbox:
        async with self._lock:
            found = self._sandboxes.get(sandbox_id)
            if found is None:
                root = self._directory(sandbox_id)
                sandbox = UnsafeLocalSandbox(
                    workspace=root / "workspace", state_dir=root / "state", env=config.env
                )
                found = self._sandboxes[sandbox_id] = (sandbox, time.monotonic())
            return found[0]

    async def status(self, sandbox_id: str) -> Json | None:
        found = self._sandboxes.get(sandbox_id)
        if found is None:
            return None
        return {
            "state": "active",
            "idle_seconds": 0.0,
            "active_seconds": time.monotonic() - found[1],
            "processes": [],
            "terminals": [],
            "last_error": None,
        }

    async def egress_audit(self, sandbox_id: str, after: int, limit: int) -> Json | None:
        return None  # no egress proxy: the process reaches the network directly

    async def terminal(
        self, sandbox_id: str, config: SandboxConfig, request: TerminalRequest
    ) -> Terminal:
        raise NoSandbox(NO_TERMINALS)

    async def set_secrets(
        self, sandbox_id: str, config: SandboxConfig, secrets: Sequence[EgressSecret]
    ) -> None:
        raise NoSandbox(NO_SECRETS)

    def mounts(self) -> SandboxMounts | None:
        return None

    def forget(self, sandbox_id: str) -> None:
        pass  # not leased: its sandboxes are this process's own, which no other destroys

    async def release(self, sandbox_id: str, *, erase: bool = False) -> float | None:
        # Nothing outlives a release here: erased or not, the files go; erased,
        # also those of a sandbox an earlier run of the server made.
        async with self._lock:
            found = self._sandboxes.pop(sandbox_id, None)
        if found is not None:
            await found[0].close()
        if found is not None or erase:
            await to_thread.run_sync(shutil.rmtree, self._directory(sandbox_id), True)
        return None if found is None else time.monotonic() - found[1]

    async def aclose(self) -> None:
        async with self._lock:
            sandboxes, self._sandboxes = list(self._sandboxes.values()), {}
        for sandbox, _ in sandboxes:
            await sandbox.close()
