"""What a tool call that met a sandbox error answers: the turn's retryable
``ToolsUnavailable`` (the sandbox may serve again), or, for a sandbox that
cannot serve the session for good, an error result for the model."""

from __future__ import annotations

from stead.runtime.deps import ToolsUnavailable
from stead.sandbox import HostLost, SandboxError, WorkspaceUnavailable
from stead.tools import ToolOutcome


def sandbox_unavailable(exc: SandboxError, *, reached: bool) -> ToolsUnavailable:
    return ToolsUnavailable(str(exc), reached=reached, host_lost=isinstance(exc, HostLost))


def sandbox_broken(name: str, exc: SandboxError) -> ToolOutcome:
    """The outcome of a call that found the sandbox unable to serve the session
    for good: an error for the model and a ``session.error`` for the turn."""
    message = f"the session's sandbox cannot be used: {exc}"
    # A lost workspace never comes back (rule 6): the session ends. Packages
    # or isolation an operator can fix end only the turn.
    terminal = isinstance(exc, WorkspaceUnavailable)
    return ToolOutcome([{"type": "text", "text": f"{name}: {message}"}], True, message, terminal)
