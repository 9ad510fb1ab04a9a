"""What the model is told about the built-in toolset (``agent_toolset_20260401``),
and what the agent loop needs to know about each tool's side effects.

Input fields follow the SDK's ``BetaManagedAgentsAgentToolset20260401*Input``
types (spec §4.6); limits follow its reference implementation.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

from stead.media_types import IMAGE_MAX_PIXELS
from stead.sandbox import EXEC_OUTPUT_LIMIT, GLOB_RESULT_LIMIT, GREP_OUTPUT_LIMIT
from stead.tools.web.page import DEFAULT_MAX_CONTENT_TOKENS

BASH_DEFAULT_TIMEOUT = 120.0
"""Seconds a command may run when the call gives no ``timeout_ms``."""
BASH_MAX_TIMEOUT = 3600.0
"""Longest ``timeout_ms`` honoured; larger values are lowered to it."""
READ_MAX_BYTES = 256 * 1024
"""Largest text file ``read`` returns whole, and largest ``view_range`` slice."""
EDIT_MAX_BYTES = 256 * 1024
IMAGE_MAX_BASE64_BYTES = 5 * 1024 * 1024
PDF_MAX_BYTES = 20 * 1024 * 1024
MEDIA_TYPES = {
    ".png": "image/png",
    ".jpg": "image/jpeg",
    ".jpeg": "image/jpeg",
    ".gif": "image/gif",
    ".webp": "image/webp",
    ".pdf": "application/pdf",
}
"""Files ``read`` returns as base64 image or document blocks instead of text."""

WEB_TOOL_NAMES: tuple[str, ...] = ("web_fetch", "web_search")
"""Tools the brain runs itself (``run_web_tool``); they never use the sandbox."""
TOOL_NAMES: tuple[str, ...] = ("bash", "read", "write", "edit", "glob", "grep", *WEB_TOOL_NAMES)
IDEMPOTENT_TOOLS: frozenset[str] = frozenset({"read", "glob", "grep", *WEB_TOOL_NAMES})
"""Tools the op ledger may simply run again when a call is in doubt (DESIGN
rule 5). ``bash``, ``write`` and ``edit`` change the workspace: a call that may
have run is reported to the model instead of being repeated. The web tools
only read (an HTTP GET, a search)."""
RESUMABLE_TOOLS: frozenset[str] = frozenset({"bash"})
"""Tools whose calls the sandbox itself runs at most once per op key, keeping
the result: a call in doubt is simply made again with the same op key. The
sandbox then returns the recorded result, waits for the command still running,
runs a command that never reached it, or says that one it started may have run
(``ExecInDoubt``), never running anything twice."""

_STRING = {"type": "string"}

TOOL_DEFINITIONS: tuple[dict[str, Any], ...] = (
    {
        "name": "bash",
        "description": (
            "Run a command in a persistent bash shell in the workspace. The working "
            "directory and exported variables persist between calls. stdout and stderr "
            f"are combined; only the last {EXEC_OUTPUT_LIMIT // 1024} KiB of output is "
            f"kept. Commands time out after {BASH_DEFAULT_TIMEOUT:g} s unless timeout_ms "
            "says otherwise; a timed-out command is killed together with the shell. "
            "stdin is empty: do not run interactive programs."
        ),
        "input_schema": {
            "type": "object",
            "properties": {
                "command": _STRING | {"description": "Shell command to execute."},
                "restart": {
                    "type": "boolean",
                    "description": "Restart the shell instead of running a command.",
                },
                "timeout_ms": {
                    "type": "integer",
                    "description": "Per-call timeout in milliseconds.",
                },
            },
        },
    },
    {
        "name": "read",
        "description": (
            "Read a file in the workspace. Text files up to "
            f"{READ_MAX_BYTES // 1024} KiB are returned whole; for larger ones pass "
            "view_range. PNG, JPEG, GIF, WebP images (at most "
            f"{IMAGE_MAX_PIXELS} pixels on a side) and PDFs are returned as images "
            "and documents."
        ),
        "input_schema": {
            "type": "object",
            "properties": {
                "file_path": _STRING | {"description": "Path of the file to read."},
                "view_range": {
                    "type": "array",
                    "items": {"type": "integer"},
                    "minItems": 2,
                    "maxItems": 2,
                    "description": (
                        "[start_line, end_line], 1-based and inclusive; an end_line "
                        "of 0 or less means to the end of the file."
                    ),
                },
            },
            "required": ["file_path"],
        },
    },
    {
        "name": "write",
        "description": (
            "Write a file in the workspace, replacing its contents and creating "
            "missing parent directories."
        ),
        "input_schema": {
            "type": "object",
            "properties": {
                "file_path": _STRING | {"description": "Path of the file to write."},
                "content": _STRING | {"description": "Full file contents to write."},
            },
            "required": ["file_path", "content"],
        },
    },
    {
        "name": "edit",
        "description": (
            "Replace text in a file by exact string match. old_string must occur "
            "exactly once unless replace_all is true."
        ),
        "input_schema": {
            "type": "object",
            "properties": {
                "file_path": _STRING | {"description": "Path of the file to edit."},
                "old_string": _STRING | {"description": "Text to find."},
                "new_string": _STRING | {"description": "Replacement text."},
                "replace_all": {
                    "type": "boolean",
                    "description": "Replace every occurrence instead of requiring one.",
                },
            },
            "required": ["file_path", "old_string", "new_string"],
        },
    },
    {
        "name": "glob",
        "description": (
            "List paths matching a doublestar glob pattern (e.g. **/*.py), newest "
            f"first, at most {GLOB_RESULT_LIMIT}."
        ),
        "input_schema": {
            "type": "object",
            "properties": {
                "pattern": _STRING | {"description": "Relative doublestar glob pattern."},
                "path": _STRING
                | {"description": "Directory to search under; defaults to the workspace."},
            },
            "required": ["pattern"],
        },
    },
    {
        "name": "grep",
        "description": (
            "Search file contents for a regular expression (Python syntax). Prints "
            "path:line:text for each matching line; binary files and .git, node_modules, "
            ".venv, venv and __pycache__ directories are skipped; output stops at "
            f"{GREP_OUTPUT_LIMIT // 1024} KiB."
        ),
        "input_schema": {
            "type": "object",
            "properties": {
                "pattern": _STRING | {"description": "Regular expression to search for."},
                "path": _STRING
                | {"description": "File or directory to search; defaults to the workspace."},
            },
            "required": ["pattern"],
        },
    },
    {
        "name": "web_fetch",
        "description": (
            "Fetch a web page or document (an http or https URL) and return its content. "
            "HTML comes back as readable text with links as absolute URLs, other text as "
            "it is, PDFs as documents. Only URLs that appeared in this conversation can be "
            "fetched: in a user message or the system prompt, a custom tool's result, or "
            "an earlier web_search or web_fetch result. Text is cut at about "
            f"{DEFAULT_MAX_CONTENT_TOKENS} tokens unless configured otherwise."
        ),
        "input_schema": {
            "type": "object",
            "properties": {"url": _STRING | {"description": "The URL to fetch."}},
            "required": ["url"],
        },
    },
    {
        "name": "web_search",
        "description": (
            "Search the web. Returns results as a numbered list of title, URL and "
            "snippet; read a result in full with web_fetch."
        ),
        "input_schema": {
            "type": "object",
            "properties": {"query": _STRING | {"description": "The search query."}},
            "required": ["query"],
        },
    },
)


DEFINITIONS: Mapping[str, dict[str, Any]] = MappingProxyType(
    {d["name"]: d for d in TOOL_DEFINITIONS}
)
"""``TOOL_DEFINITIONS`` by name (read-only; copy before changing one)."""


def tool_definitions(names: tuple[str, ...] | list[str] | None = None) -> list[dict[str, Any]]:
    """Definitions for the Messages API ``tools`` list, in ``names`` order (default: all)."""
    unknown = [n for n in names or () if n not in DEFINITIONS]
    if unknown:
        raise KeyError(f"not built-in tools: {', '.join(unknown)}")
    return [copy.deepcopy(DEFINITIONS[n]) for n in (names if names is not None else TOOL_NAMES)]
