"""A session's MCP toolsets: the tools its agent's servers offer, and calls to them.

MCP tools run in the brain (spec §5.3), with the session's vault credentials
as bearer tokens (``mcp_auth.py``); nothing of them reaches the sandbox. Each
server's tool list is asked for once per session and kept (a bounded cache
shared by the session's turns); a server that failed is asked again on the
session's next turn, and a call that could not reach the server drops the
list, so the next turn lists its tools anew.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

import anyio

from stead.config import Settings
from stead.egress_policy import InvalidPolicy
from stead.failpoints import FailPoints
from stead.harness import (
    McpTool,
    custom_tools,
    enabled_builtin_tools,
    servers_in_use,
    within_room,
)
from stead.jsonvalues import Json, weight
from stead.runtime.bounded import Bounded
from stead.runtime.mcp_auth import McpAuthFailed, McpEgress, McpTokens, TokenStore, load_mcp
from stead.runtime.sandboxconfig import session_networking
from stead.schemas import agents
from stead.store import EnvironmentStore, SessionRecord
from stead.tools import ToolOutcome
from stead.vault import SecretBox

log = logging.getLogger("stead.runtime.mcp")
T = TypeVar("T")
CONNECTION_FAILED = "mcp_connection_failed_error"
AUTHENTICATION_FAILED = "mcp_authentication_failed_error"
LISTS_KEPT = 4096
"""Server tool lists kept in memory (one per session and server)."""
LISTS_MAX_BYTES = 64 * 1024 * 1024
"""What the kept lists may weigh: a server may list hundreds of tools, each
with its schema, and every session using it keeps a list of its own."""
MAY_HAVE_RUN = (
    "The call may have reached the server and run before this failure: verify its "
    "effect before calling it again."
)


@dataclass(frozen=True, slots=True)
class McpProblem:
    """A server that could not be used, as its ``session.error`` says."""

    server: str
    error_type: str
    message: str


@dataclass(frozen=True, slots=True)
class Discovery:
    tools: tuple[McpTool, ...]
    problems: tuple[McpProblem, ...]
    left_out: tuple[str, ...] = ()
    """What was left out to keep within the tool limit (``offered``), as
    ``session.error`` says it."""


@dataclass(frozen=True, slots=True)
class McpCall:
    outcome: ToolOutcome
    problem: McpProblem | None = None

    @property
    def unreachable(self) -> bool:
        """The server could not be reached (not a refusal of its own): the call
        is counted ``unavailable``, as one whose sandbox does not answer."""
        return self.problem is not None and self.problem.error_type == CONNECTION_FAILED


_ListKey = tuple[str, str, str]
"""(session id, server name, server URL)."""


class McpStore(EnvironmentStore, TokenStore, Protocol):
    """What MCP calls use: the environment's networking and the vaults' tokens."""


class McpGateway:
    def __init__(
        self,
        settings: Settings,
        store: McpStore,
        box: SecretBox,
        *,
        exclusive: bool = False,
        failpoints: FailPoints | None = None,
    ) -> None:
        """``exclusive``: this process is the store's only brain (SQLite)."""
        self._store = store
        self._timeout = settings.mcp_timeout_seconds
        self._egress = McpEgress(settings)
        self._tokens = McpTokens(
            store,
            box,
            self._egress,
            timeout=self._timeout,
            exclusive=exclusive,
            failpoints=failpoints,
        )
        self._lists: Bounded[_ListKey, tuple[McpTool, ...]] = Bounded(LISTS_KEPT, LISTS_MAX_BYTES)

    @property
    def egress(self) -> McpEgress:
        """The rules the brain's MCP and OAuth traffic keeps (built once: TLS trust)."""
        return self._egress

    @property
    def tokens(self) -> McpTokens:
        """The vaults' tokens, refreshed one exchange per credential at a time."""
        return self._tokens

    def cached(self, session_id: str, agent: Json) -> tuple[McpTool, ...] | None:
        """The tools of every server the agent uses if all are listed already;
        None if one is not (then only ``discover`` can say)."""
        tools: list[McpTool] = []
        for server in servers_in_use(agent):
            listed = self._lists.get((session_id, server["name"], server["url"]))
            if listed is None:
                return None
            tools.extend(listed)
        return offered(agent, tools)[0]

    async def discover(self, session: SessionRecord) -> Discovery:
        """The tools of the session's agent's servers: the kept lists, and the
        others asked for now, all at once; each server that fails is a problem
        and offers no tools."""
        servers = servers_in_use(session.agent)
        if not servers:
            return Discovery((), ())
        found: dict[str, tuple[McpTool, ...] | McpProblem] = {}

        async def ask(server: Json) -> None:
            key = (session.id, server["name"], server["url"])
            kept = self._lists.use(key)
            if kept is not None:
                found[server["name"]] = kept
                return
            listed = await self._list(session, server)
            if not isinstance(listed, McpProblem):
                self._keep(key, listed)
            found[server["name"]] = listed

        async with anyio.create_task_group() as group:
            for server in servers:
                group.start_soon(ask, server)
        tools: list[McpTool] = []
        problems: list[McpProblem] = []
        for server in servers:  # in the agent's order, not the order answers came
            result = found[server["name"]]
            if isinstance(result, McpProblem):
                problems.append(result)
            else:
                tools.extend(result)
        kept, left_out = offered(session.agent, tools)
        return Discovery(kept, tuple(problems), left_out)

    def _keep(self, key: _ListKey, tools: tuple[McpTool, ...]) -> None:
        listed = [(t.name, t.description, t.input_schema) for t in tools]
        self._lists.put(key, tools, weight(listed))

    async def _list(self, session: SessionRecord, server: Json) -> tuple[McpTool, ...] | McpProblem:
        mcp = await load_mcp()

        async def listed(token: str | None, rules: Any) -> Any:
            return await mcp.list_tools(server["url"], token, self._timeout, rules)

        try:
            specs, sent = await self._authorised(session, server, listed)
        except _Unusable as exc:
            return exc.problem
        except mcp.McpRefused as exc:
            return McpProblem(server["name"], CONNECTION_FAILED, f"{server['name']}: {exc}")
        return tuple(
            McpTool(
                server["name"],
                s.name,
                mcp.redact(s.description, sent),
                _redacted_json(mcp, s.input_schema, sent),
                s.read_only,
            )
            for s in specs
            if _usable_schema(server["name"], s.name, s.input_schema)
        )

    async def call(
        self, session: SessionRecord, server_name: str, tool: str, arguments: Json, op_key: str
    ) -> McpCall:
        """Calls ``tool`` of the session's server ``server_name``. Never raises for
        anything the server did: that is an error outcome, with a problem when
        the server could not be used at all."""
        servers = session.agent.get("mcp_servers", [])
        server = next((s for s in servers if s["name"] == server_name), None)
        if server is None:
            return McpCall(ToolOutcome.error(f"the agent has no MCP server {server_name!r} now"))
        mcp = await load_mcp()
        in_doubt = False
        """The call failed after it was sent (no answer in time, the connection
        dropped, the server failed): it may have run."""

        async def called(token: str | None, rules: Any) -> Any:
            nonlocal in_doubt
            try:
                return await mcp.call_tool(
                    server["url"], token, self._timeout, rules, tool, arguments, op_key=op_key
                )
            except mcp.McpFailed as exc:
                in_doubt = exc.method == "tools/call" and not exc.unauthorized
                raise

        try:
            result, sent = await self._authorised(session, server, called)
        except _Unusable as exc:
            self._lists.pop((session.id, server["name"], server["url"]))
            message = exc.problem.message + (f"\n{MAY_HAVE_RUN}" if in_doubt else "")
            return McpCall(ToolOutcome.error(message), exc.problem)
        except mcp.McpRefused as exc:
            return McpCall(ToolOutcome.error(f"{server_name}: {exc}"))
        outcome: ToolOutcome = mcp.call_outcome(result)
        return McpCall(_redacted_outcome(mcp, outcome, sent))

    async def _authorised(
        self,
        session: SessionRecord,
        server: Json,
        work: Callable[[str | None, Any], Awaitable[T]],
    ) -> tuple[T, tuple[str, ...]]:
        """``work`` with the server's token and egress rules; after a 401, once
        more with a refreshed token. ``_Unusable`` when the server cannot be used.
        With the result, the tokens sent: a server that echoes one (in a result,
        a description or an error) must not show it to the model or the log, and
        no message this raises holds one."""
        mcp = await load_mcp()
        sent: list[str] = []

        async def attempt(token: str | None, rules: Any) -> T:
            if token:
                sent.append(token)
            return await work(token, rules)

        try:
            return await self._attempts(session, server, attempt), tuple(sent)
        except _Unusable as exc:
            problem = exc.problem
            message = mcp.redact(problem.message, sent)
            raise _Unusable(McpProblem(problem.server, problem.error_type, message)) from None
        except mcp.McpRefused as exc:
            raise mcp.McpRefused(mcp.redact(str(exc), sent)) from None

    async def _attempts(
        self,
        session: SessionRecord,
        server: Json,
        work: Callable[[str | None, Any], Awaitable[T]],
    ) -> T:
        """``_authorised``'s work: with the token, then after a 401 with a refreshed one."""
        mcp = await load_mcp()
        name, url = server["name"], server["url"]
        try:
            networking = await session_networking(self._store, session)
            rules = self._egress.rules(mcp, networking, url)
        except InvalidPolicy as exc:
            message = f"{name}: the environment's networking cannot be enforced: {exc}"
            raise _Unusable(McpProblem(name, CONNECTION_FAILED, message)) from None
        except ValueError as exc:  # a URL stored before the API checked it
            message = f"{name}: the server's URL cannot be used: {exc}"
            raise _Unusable(McpProblem(name, CONNECTION_FAILED, message)) from None
        try:
            held = await self._tokens.token_for(session.workspace_id, list(session.vault_ids), url)
            try:
                return await work(held.token, rules)
            except mcp.McpFailed as exc:
                if not exc.unauthorized:
                    raise
                if held.credential is None:
                    raise McpAuthFailed(
                        f"the server refused the connection and the session's vaults hold "
                        f"no credential for {url}"
                    ) from None
            held = await self._tokens.refreshed(held)
            return await work(held.token, rules)
        except McpAuthFailed as exc:
            raise _Unusable(McpProblem(name, AUTHENTICATION_FAILED, f"{name}: {exc}")) from None
        except mcp.McpFailed as exc:
            kind = AUTHENTICATION_FAILED if exc.unauthorized else CONNECTION_FAILED
            raise _Unusable(McpProblem(name, kind, f"{name}: {exc}")) from None


def offered(agent: Json, tools: Sequence[McpTool]) -> tuple[tuple[McpTool, ...], tuple[str, ...]]:
    """The servers' ``tools`` the agent may offer: with its built-in and custom
    tools, at most ``agents.MAX_TOOLS`` (the limit its definition is held to, where an
    ``mcp_toolset`` counts as the tools it configures). A server that lists
    more has the ones past the limit left out, in its listing's order; with
    them, what says so."""
    room = agents.MAX_TOOLS - len(enabled_builtin_tools(agent)) - len(custom_tools(agent))
    kept, left_out = within_room(agent, tools, room)
    notes = tuple(
        f"{server}: {count} of the MCP server's tools were left out: an agent offers at "
        f"most {agents.MAX_TOOLS} tools across all toolsets (disable the ones it does not need "
        "in its mcp_toolset's configs)"
        for server, count in left_out.items()
    )
    return kept, notes


def _usable_schema(server: str, tool: str, schema: Json) -> bool:
    """Whether the tool's input schema is a JSON Schema (draft 2020-12), as the
    Messages API checks every request's tools: one it refuses would fail every
    model request of the session, not only calls to this tool, so such a tool
    is left out (and logged)."""
    from jsonschema import Draft202012Validator
    from jsonschema.exceptions import SchemaError

    try:
        Draft202012Validator.check_schema(schema)
    except SchemaError as exc:
        log.warning(
            "MCP server %r: tool %r left out: its input schema is not a JSON Schema (%s)",
            server,
            tool,
            exc.message[:200],
        )
        return False
    except RecursionError:
        log.warning(
            "MCP server %r: tool %r left out: its input schema nests too deeply", server, tool
        )
        return False
    return True


def _redacted_outcome(mcp: Any, outcome: ToolOutcome, sent: tuple[str, ...]) -> ToolOutcome:
    if not sent:
        return outcome
    content = [
        {**block, "text": mcp.redact(block["text"], sent)} if block.get("type") == "text" else block
        for block in outcome.content
    ]
    return dataclasses.replace(outcome, content=content)


def _redacted_json(mcp: Any, value: Json, sent: tuple[str, ...]) -> Json:
    """``value`` (a tool's input schema) with any token it carries replaced."""
    if not sent:
        return value
    text = json.dumps(value, ensure_ascii=False)
    redacted = mcp.redact(text, sent)
    return value if redacted == text else dict(json.loads(redacted))


class _Unusable(Exception):
    def __init__(self, problem: McpProblem) -> None:
        super().__init__(problem.message)
        self.problem = problem
