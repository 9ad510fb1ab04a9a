"""MCP servers over Streamable HTTP (the ``mcp`` SDK), with the session's vault
credentials as bearer tokens: listing and calling tools (``connection.py``),
what a call's result shows the model (``content.py``) and refreshing OAuth
access tokens (``oauth.py``).

The SDK costs about a second and 24 MB to import: this package is imported on
first use only (``stead.runtime.mcp.load_mcp``), never at start.
"""

from stead.tools.mcp.connection import (
    HttpResponse,
    McpFailed,
    McpRefused,
    McpToolSpec,
    call_tool,
    list_tools,
    redact,
)
from stead.tools.mcp.content import call_outcome
from stead.tools.mcp.oauth import RefreshFailed, TokenGrant, refresh_access_token
from stead.tools.mcp.transport import EgressRules

__all__ = [
    "EgressRules",
    "HttpResponse",
    "McpFailed",
    "McpRefused",
    "McpToolSpec",
    "RefreshFailed",
    "TokenGrant",
    "call_outcome",
    "call_tool",
    "list_tools",
    "redact",
    "refresh_access_token",
]
