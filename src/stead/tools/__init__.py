"""The tools room: the model-facing built-in toolset over any ``Sandbox``.

Other rooms import only from here. ``run_tool`` executes one call and returns
what the model sees; ``TOOL_DEFINITIONS`` is what the model is told;
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
    tool_definitions,
)
from stead.tools.outcome import ToolOutcome
from stead.tools.toolset import bash_outcome, run_tool

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
    "ToolOutcome",
    "bash_outcome",
    "run_tool",
    "tool_definitions",
]
