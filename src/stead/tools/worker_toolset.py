"""The built-in toolset of ``stead worker --sandbox``: the tools the SDK's
``EnvironmentWorker`` offers a claimed session, run by stead's own toolset in a
stead sandbox (bubblewrap, a uid of its own, cgroup limits, the egress proxy)
instead of as the worker's user in its working directory.

Kept out of ``stead.tools``' surface: it imports the anthropic SDK's tool
classes, which the brain does not load at start.
"""

from __future__ import annotations

import copy
import uuid
from collections.abc import Callable
from typing import Any

import anyio
from anthropic.lib.tools import BetaAsyncBuiltinFunctionTool, ToolError

from stead.sandbox import Sandbox, SandboxConfig, SandboxProvider
from stead.tools.definitions import DEFINITIONS, TOOL_NAMES, WEB_TOOL_NAMES
from stead.tools.toolset import run_tool

SANDBOX_TOOLS = tuple(name for name in TOOL_NAMES if name not in WEB_TOOL_NAMES)
"""What a worker runs: web tools and MCP stay in the brain (spec §5.3)."""


class SessionSandboxes:
    """One stead sandbox per session (its id is the session id), acquired at the
    session's first call and kept: the sandbox host puts it to sleep when idle
    and wakes it with its files."""

    def __init__(self, provider: SandboxProvider, config: SandboxConfig) -> None:
        self._provider = provider
        self._config = config
        self._held: dict[str, Sandbox] = {}
        self._lock = anyio.Lock()

    async def of(self, session_id: str) -> Sandbox:
        async with self._lock:
            found = self._held.get(session_id)
            if found is None:
                found = await self._provider.acquire(session_id, self._config)
                self._held[session_id] = found
            return found

    async def aclose(self) -> None:
        held, self._held = list(self._held.values()), {}
        for sandbox in held:
            await sandbox.close()
        await self._provider.aclose()


class SandboxedTool(BetaAsyncBuiltinFunctionTool):
    """One built-in tool for one session, run in the session's sandbox."""

    def __init__(self, name: str, sandboxes: SessionSandboxes, session_id: str) -> None:
        self._name = name
        self._sandboxes = sandboxes
        self._session_id = session_id

    def to_dict(self) -> Any:
        return copy.deepcopy(DEFINITIONS[self._name])

    async def call(self, input: object) -> Any:
        sandbox = await self._sandboxes.of(self._session_id)
        # The work queue, not the worker, keeps the ledger of what ran (a lost
        # worker's calls are answered "may have run"); each call is its own op.
        key = f"worker-{uuid.uuid4().hex}"
        outcome = await run_tool(self._name, input, sandbox, op_key=key)
        if outcome.is_error:
            raise ToolError(outcome.content)  # type: ignore[arg-type]
        return outcome.content


def sandboxed_toolset(sandboxes: SessionSandboxes) -> Callable[[Any], list[SandboxedTool]]:
    """The ``tools`` of an ``EnvironmentWorker``: for each claimed session (the
    SDK's ``AgentToolContext``), the built-in tools bound to its sandbox."""

    def tools_for(context: Any) -> list[SandboxedTool]:
        session_id = str(context.session.id)
        return [SandboxedTool(name, sandboxes, session_id) for name in SANDBOX_TOOLS]

    return tools_for
