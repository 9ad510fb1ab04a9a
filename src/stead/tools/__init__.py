"""The tools room: the model-facing built-in toolset over any ``Sandbox``.

Other rooms import only from here. ``run_tool`` executes one call in a
sandbox and returns what the model sees; ``run_web_tool`` runs web_fetch and
web_search, which need no sandbox; ``TOOL_DEFINITIONS`` is what the model is told;
``IDEMPOTENT_TOOLS`` and ``RESUMABLE_TOOLS`` are what the op ledger needs to
know (DESIGN rule 5).
"""

from __future__ import annotations

from stead.tools.definitions import (
    BASH_DEFAULT_TIMEOUT,
    BASH_MAX_TIMEOUT,
    DEFINITIONS,
    EDIT_MAX_BYTES,
    IDEMPOTENT_TOOLS,
    READ_MAX_BYTES,
    RESUMABLE_TOOLS,
    TOOL_DEFINITIONS,
    TOOL_NAMES,
    WEB_TOOL_NAMES,
    tool_definitions,
)
from stead.tools.outcome import ToolOutcome
from stead.tools.toolset import bash_outcome, run_tool
from stead.tools.web import CredentialGuard, WebOptions, run_web_tool

__all__ = [
    "BASH_DEFAULT_TIMEOUT",
    "BASH_MAX_TIMEOUT",
    "DEFINITIONS",
    "EDIT_MAX_BYTES",
    "IDEMPOTENT_TOOLS",
    "READ_MAX_BYTES",
    "RESUMABLE_TOOLS",
    "TOOL_DEFINITIONS",
    "TOOL_NAMES",
    "WEB_TOOL_NAMES",
    "CredentialGuard",
    "ToolOutcome",
    "WebOptions",
    "bash_outcome",
    "run_tool",
    "run_web_tool",
    "tool_definitions",
]
