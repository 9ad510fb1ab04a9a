"""web_fetch and web_search for the agent loop: run in the brain, under the
tool's own config, never touching (creating, waking or renewing) the session's
sandbox. Sessions on a server with ``STEAD_SANDBOX=off`` use them too.

Each call reads the session (its agent's config for the tool, its vaults) so
a changed credential applies to the next call at once, and opens the
session's ``environment_variable`` credentials into a ``CredentialGuard``: web
tools substitute none, refuse to send a value where its ``networking`` does
not allow, and scrub values from what the model sees.
"""

from __future__ import annotations

from stead import tools
from stead.config import Settings
from stead.egress_policy import upstream_context
from stead.harness import enabled_builtin_tools
from stead.jsonvalues import Json
from stead.runtime.credentials import SessionCredentials
from stead.sandbox import EnvironmentCredential
from stead.store import SessionStore
from stead.tools import CredentialGuard, ToolOutcome, WebOptions


class WebTools:
    def __init__(
        self, settings: Settings, store: SessionStore, credentials: SessionCredentials
    ) -> None:
        self._settings = settings
        self._store = store
        self._credentials = credentials
        self._options: WebOptions | None = None

    def _web_options(self) -> WebOptions:
        """Built at the first call (the extra CA file is read then, not at import)."""
        if self._options is None:
            settings = self._settings
            self._options = WebOptions(
                timeout=settings.web_timeout_seconds,
                max_bytes=settings.web_fetch_max_bytes,
                tls=upstream_context(settings.egress_extra_ca_file),
                pinned=dict(settings.egress_hosts),
                search_url=settings.web_search_url,
            )
        return self._options

    async def run(self, session_id: str, name: str, tool_input: Json) -> ToolOutcome:
        session = await self._store.session_snapshot(session_id)
        config = enabled_builtin_tools(session.agent).get(name)
        if config is None:
            return ToolOutcome.error(f"{name}: the tool is not enabled for this agent")
        secrets = await self._credentials.egress_secrets(  # placeholders are all it guards
            session_id, session.workspace_id, session.vault_ids, repositories_too=False
        )
        guard = CredentialGuard([s for s in secrets if isinstance(s, EnvironmentCredential)])
        return await tools.run_web_tool(name, tool_input, config, self._web_options(), guard)
