"""MCP servers over Streamable HTTP (the ``mcp`` SDK), with the session's vault
credentials as bearer tokens: connecting and listing tools (``connection.py``)
and refreshing OAuth access tokens (``oauth.py``)."""

from stead.tools.mcp.connection import HttpResponse, McpFailed, list_tools
from stead.tools.mcp.oauth import RefreshFailed, TokenGrant, refresh_access_token

__all__ = [
    "HttpResponse",
    "McpFailed",
    "RefreshFailed",
    "TokenGrant",
    "list_tools",
    "refresh_access_token",
]
