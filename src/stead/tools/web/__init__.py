"""web_fetch and web_search: the built-in tools that run in the brain, never in
the session's sandbox. ``run_web_tool`` is their one entry; the runtime gives
it the tool's resolved config, the operator's ``WebOptions`` and the session's
``CredentialGuard``."""

from __future__ import annotations

from stead.tools.web.guard import CredentialGuard
from stead.tools.web.options import WebOptions
from stead.tools.web.run import run_web_tool

__all__ = ["CredentialGuard", "WebOptions", "run_web_tool"]
