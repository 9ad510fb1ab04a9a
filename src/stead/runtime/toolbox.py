"""The built-in toolset running in per-session sandboxes (``stead.tools`` over
``stead.sandbox``). Owns the sandboxes it opens and closes them in ``aclose``.

Sandboxes exist only when a backend is named in settings (``STEAD_SANDBOX``):
``unsafe_local`` isolates nothing, so stead never picks it by itself (rule 7).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import anyio

from stead import tools
from stead.config import Settings
from stead.runtime.deps import ToolOutcome
from stead.sandbox import Sandbox, UnsafeLocalSandbox

Json = dict[str, Any]
NO_SANDBOX = (
    "No sandbox is configured on this stead server, so built-in tools cannot run. "
    "The operator can set STEAD_SANDBOX=unsafe_local (no isolation) to enable them."
)


class SandboxToolbox:
    def __init__(self, settings: Settings) -> None:
        self._settings = settings
        self._sandboxes: dict[str, Sandbox] = {}
        self._lock = anyio.Lock()

    @property
    def definitions(self) -> Mapping[str, Json]:
        return tools.DEFINITIONS

    @property
    def idempotent(self) -> frozenset[str]:
        return tools.IDEMPOTENT_TOOLS

    async def _sandbox(self, session_id: str) -> Sandbox | None:
        if self._settings.sandbox != "unsafe_local":
            return None
        async with self._lock:
            found = self._sandboxes.get(session_id)
            if found is None:
                root = self._settings.data_dir / "sandboxes" / session_id
                found = UnsafeLocalSandbox(workspace=root / "workspace", state_dir=root / "state")
                self._sandboxes[session_id] = found
            return found

    async def run(self, session_id: str, name: str, tool_input: Json, op_key: str) -> ToolOutcome:
        sandbox = await self._sandbox(session_id)
        if sandbox is None:
            return ToolOutcome([{"type": "text", "text": NO_SANDBOX}], True)
        outcome = await tools.run_tool(name, tool_input, sandbox, op_key=op_key)
        return ToolOutcome(outcome.content, outcome.is_error)

    async def reattach(self, session_id: str, name: str, op_key: str) -> ToolOutcome | None:
        if name != "bash":
            return None
        sandbox = await self._sandbox(session_id)
        if sandbox is None:
            return None
        result = await sandbox.exec_result(op_key)
        if result is None:
            return None
        outcome = tools.bash_outcome(result)
        return ToolOutcome(outcome.content, outcome.is_error)

    async def aclose(self) -> None:
        sandboxes, self._sandboxes = list(self._sandboxes.values()), {}
        for sandbox in sandboxes:
            await sandbox.close()
