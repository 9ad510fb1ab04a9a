"""``off``: no sandbox at all, so the sandbox's tools and terminals are refused
with a message that says how to turn them on (web_fetch and web_search, which
run in the brain, still work)."""

from __future__ import annotations

from collections.abc import Sequence

from stead.jsonvalues import Json
from stead.sandbox.base import Sandbox
from stead.sandbox.config import SandboxConfig
from stead.sandbox.errors import NoSandbox
from stead.sandbox.mounts import SandboxMounts
from stead.sandbox.provider import EgressSecret, HostIdentity, Placement
from stead.sandbox.terminals import Terminal, TerminalRequest

NO_SANDBOX = (
    "No sandbox is configured on this stead server, so bash, read, write, edit, glob "
    "and grep cannot run. "
    "The operator can set STEAD_SANDBOX=bwrap (isolated) to enable them."
)


class OffProvider:
    leased = False

    async def home(self) -> HostIdentity | None:
        return None  # no host: sandboxes here are never placed

    def place(self, sandbox_id: str, placement: Placement | None) -> bool:
        return False

    async def acquire(self, sandbox_id: str, config: SandboxConfig) -> Sandbox:
        raise NoSandbox(NO_SANDBOX)

    async def status(self, sandbox_id: str) -> Json | None:
        return None

    async def egress_audit(self, sandbox_id: str, after: int, limit: int) -> Json | None:
        return None

    async def terminal(
        self, sandbox_id: str, config: SandboxConfig, request: TerminalRequest
    ) -> Terminal:
        raise NoSandbox(NO_SANDBOX)

    async def set_secrets(
        self, sandbox_id: str, config: SandboxConfig, secrets: Sequence[EgressSecret]
    ) -> None:
        raise NoSandbox(NO_SANDBOX)

    def mounts(self) -> SandboxMounts | None:
        return None

    def forget(self, sandbox_id: str) -> None:
        pass  # no sandboxes at all

    async def release(self, sandbox_id: str, *, erase: bool = False) -> float | None:
        return None

    async def aclose(self) -> None:
        pass
