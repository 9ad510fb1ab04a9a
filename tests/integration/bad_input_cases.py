"""The malformed requests of ``test_bad_input``: each with the status and the
text its error must carry (see that module's docstring)."""

from __future__ import annotations

import base64
import json
import re
from dataclasses import dataclass, field
from typing import Any

A, E, S = "/v1/agents", "/v1/environments", "/v1/sessions"
AG, SE = A + "/{agent}", S + "/{session}"
EV = SE + "/events"
MODEL = "claude-sonnet-4-6"
TOOLSET = {"type": "agent_toolset_20260401"}
INVALID = "invalid_request_error"
ERROR_TYPES = {400: INVALID, 401: "authentication_error", 403: "permission_error"}
ERROR_TYPES |= {404: "not_found_error", 405: INVALID, 409: INVALID, 413: "request_too_large"}
ERROR_TYPES |= {415: INVALID}
PLACEHOLDER = re.compile(r"^\{(\w+)\}$")
Json = dict[str, Any]


@dataclass(frozen=True)
class Case:
    id: str
    status: int
    method: str
    path: str
    names: str | None = None
    body: Any = None
    raw: bytes | None = None
    params: dict[str, Any] = field(default_factory=dict)
    headers: dict[str, str] = field(default_factory=dict)
    auth: bool = True


def agent(**fields: Any) -> Json:
    return {"name": "bad", "model": MODEL, **fields}


def web(**fields: Any) -> Json:
    """The agent toolset with a web_fetch config of ``fields``."""
    return {**TOOLSET, "configs": [{"name": "web_fetch", **fields}]}


def custom_tool(**fields: Any) -> Json:
    schema = {"type": "object"}
    return {"type": "custom", "name": "t", "description": "d", "input_schema": schema} | fields


def session(**fields: Any) -> Json:
    return {"agent": "{agent}", "environment_id": "{env}", **fields}


def msg(text: str = "hi") -> Json:
    return {"type": "user.message", "content": [{"type": "text", "text": text}]}


def system() -> Json:
    return {"type": "system.message", "content": [{"type": "text", "text": "be brief"}]}


def confirm(**fields: Any) -> Json:
    event = {"type": "user.tool_confirmation", "tool_use_id": "sevt_nope", "result": "allow"}
    return event | fields


def events(*items: Json) -> Json:
    return {"events": list(items)}


def budget(amount: str) -> Json:
    return {"type": "limit", "max_list_cost": {"amount": amount, "currency": "USD"}}


def forge(payload: Any) -> str:
    """A cursor in this server's format that it never issued."""
    return "page_" + base64.urlsafe_b64encode(json.dumps(payload).encode()).decode().rstrip("=")


META_17 = {f"k{i}": "v" for i in range(17)}
KEY_65 = {"k" * 65: "v"}
VALUE_513 = {"k": "v" * 513}
LIMITED_BAD_HOST = {"type": "limited", "allowed_hosts": ["not a host"]}
LIMITED_LONG_LABEL = {"type": "limited", "allowed_hosts": ["a" * 64 + ".example.com"]}
LIMITED_NO_PACKAGES = {"type": "limited", "allowed_hosts": [], "allow_package_managers": False}
RUBRIC = {"type": "text", "content": "c"}
OUTCOME = {"type": "user.define_outcome", "description": "d", "rubric": RUBRIC}
HUGE = 10**20
ARITY_CURSOR = forge({"l": "agents", "o": "desc", "d": "after", "k": [1, 2, 3]})
HUGE_KEY_CURSOR = (
    forge({"o": "desc", "d": "after", "k": [{"t": "9999-12-31T23:59:59+00:00"}, "\ud800"]})
    + ".AAAAAAAAAAAAAAAAAAAAAA"
)
LONG_INT = "1" * 5000
EDGE_EARLY = "0001-01-01T00:00:00+05:00"
EDGE_LATE = "9999-12-31T23:59:59-05:00"


def raw_agent(fragment: str) -> bytes:
    """An agent body whose custom tool's schema holds ``fragment`` as a value, verbatim."""
    body = json.dumps(agent(tools=[custom_tool(input_schema={"type": "object", "x": "@"})]))
    return body.replace('"@"', fragment).encode()


# fmt: off
CASES = [
    # authentication, routing, methods
    Case("auth-no-key", 401, "GET", A, auth=False),
    Case("auth-unknown-x-api-key", 401, "GET", A, headers={"x-api-key": "sk-stead-no"}, auth=False),
    Case("auth-unknown-bearer", 401, "GET", A,
         headers={"authorization": "Bearer sk-stead-no"}, auth=False),
    Case("auth-basic-scheme", 401, "GET", A, headers={"authorization": "Basic {key}"}, auth=False),
    Case("auth-empty-bearer", 401, "GET", A, headers={"authorization": "Bearer"}, auth=False),
    Case("auth-workspace-header-mismatch", 403, "GET", A, "anthropic-workspace-id",
         headers={"anthropic-workspace-id": "wrkspc_someone_else"}),
    Case("route-unknown", 404, "GET", "/v1/agentz"),
    Case("route-unknown-subresource", 404, "GET", AG + "/nope"),
    Case("method-delete-agent", 405, "DELETE", AG),
    Case("method-patch-session", 405, "PATCH", SE, body={"title": "x"}),
    Case("method-post-stream", 405, "POST", EV + "/stream"),
    # content types
    Case("content-type-missing", 415, "POST", A, "content-type", body=agent(),
         headers={"content-type": ""}),
    Case("content-type-text", 415, "POST", A, "content-type", body=agent(),
         headers={"content-type": "text/plain"}),
    Case("content-type-form", 415, "POST", EV, "content-type", raw=b"events=1",
         headers={"content-type": "application/x-www-form-urlencoded"}),
    Case("content-type-latin-1", 415, "POST", A, "charset", body=agent(),
         headers={"content-type": "application/json; charset=latin-1"}),
    # numbers and text JSON allows but stead cannot hold, wherever they are
    Case("json-integer-of-5000-digits", 400, "POST", A, "body.description",
         raw=f'{{"name": "n", "model": "{MODEL}", "description": {LONG_INT}}}'.encode()),
    Case("json-integer-beyond-64-bits", 400, "POST", A, "input_schema.x",
         raw=raw_agent(str(2**64))),
    Case("json-float-overflowing-to-infinity", 400, "POST", A, "input_schema.x",
         raw=raw_agent("1e400")),
    Case("json-negative-overflow", 400, "POST", A, "input_schema.x", raw=raw_agent("-1e999")),
    Case("json-nan", 400, "POST", A, "input_schema.x", raw=raw_agent("NaN")),
    Case("json-infinity-literal", 400, "POST", A, "input_schema.x", raw=raw_agent("Infinity")),
    Case("json-minus-infinity", 400, "POST", A, "input_schema.x", raw=raw_agent("-Infinity")),
    Case("json-lone-surrogate", 400, "POST", A, "input_schema.x", raw=raw_agent('"\\ud800"')),
    Case("json-huge-int-in-metadata", 400, "POST", E, "metadata.k",
         raw=b'{"name": "n", "metadata": {"k": 123456789012345678901234567890}}'),
    Case("json-infinity-in-event", 400, "POST", EV, "events.0",
         raw=b'{"events": [{"type": "user.message", "content": Infinity}]}'),
    Case("json-surrogate-in-key", 400, "POST", A, "metadata", raw=b'{"name": "n", "model": "m",'
         b' "metadata": {"\\udc00": "v"}}'),
    Case("json-duplicate-key", 400, "POST", A, "body.name",
         raw=f'{{"name": "a", "name": "b", "model": "{MODEL}"}}'.encode()),
    Case("json-duplicate-key-nested", 400, "POST", A, "input_schema.type",
         raw=raw_agent('1, "type": "object"')),
    Case("json-nested-65-deep", 400, "POST", A, "nested deeper",
         raw=b'{"name": "n", "model": "m", "metadata": ' + b"[" * 65 + b"]" * 65 + b"}"),
    # path parameters
    Case("path-id-with-nul", 400, "GET", A + "/agent_%00x", "agent_id"),
    Case("path-id-too-long", 400, "GET", S + "/" + "s" * 65, "session_id"),
    Case("path-id-unicode", 400, "POST", E + "/env_%C3%A9/archive", "environment_id"),
    # agents: create
    Case("agents-create-malformed-json", 400, "POST", A, "body", raw=b'{"name": "x",'),
    Case("agents-create-invalid-utf8", 400, "POST", A, "body", raw=b'{"name": "\xff"}'),
    Case("agents-create-deeply-nested-json", 400, "POST", A, "body",
         raw=b"[" * 50_000 + b"]" * 50_000),
    Case("agents-create-json-array", 400, "POST", A, "body", raw=b"[1, 2]"),
    Case("agents-create-json-string", 400, "POST", A, "body", raw=b'"an agent"'),
    Case("agents-create-empty-body", 400, "POST", A, "body", raw=b""),
    Case("agents-create-missing-name", 400, "POST", A, "name", body={"model": MODEL}),
    Case("agents-create-missing-model", 400, "POST", A, "model", body={"name": "n"}),
    Case("agents-create-empty-name", 400, "POST", A, "name", body=agent(name="")),
    Case("agents-create-name-not-string", 400, "POST", A, "name", body=agent(name=42)),
    Case("agents-create-unknown-field", 400, "POST", A, "colour", body=agent(colour="red")),
    Case("agents-create-unknown-tool-type", 400, "POST", A, "tools.0",
         body=agent(tools=[{"type": "hammer"}])),
    Case("agents-create-unknown-permission-policy", 400, "POST", A, "permission_policy",
         body=agent(tools=[{**TOOLSET, "default_config": {"permission_policy": {"type": "ask"}}}])),
    Case("agents-create-custom-tool-no-schema", 400, "POST", A, "input_schema",
         body=agent(tools=[{"type": "custom", "name": "t", "description": "d"}])),
    Case("agents-create-custom-tool-bad-name", 400, "POST", A, "tools.0.name",
         body=agent(tools=[custom_tool(name="no spaces!")])),
    Case("agents-create-web-domain-with-scheme", 400, "POST", A,
         "tools.0.configs.0.allowed_domains.1",
         body=agent(tools=[web(allowed_domains=["ok.example", "https://docs.example"])])),
    Case("agents-create-web-domain-wildcard", 400, "POST", A, "blocked_domains.0",
         body=agent(tools=[web(blocked_domains=["*.ads.example"])])),
    Case("agents-create-web-empty-domains", 400, "POST", A, "allowed_domains",
         body=agent(tools=[web(allowed_domains=[])])),
    Case("agents-create-web-zero-tokens", 400, "POST", A, "max_content_tokens",
         body=agent(tools=[web(max_content_tokens=0)])),
    Case("agents-create-web-sources-all-none", 400, "POST", A, "url_sources",
         body=agent(tools=[web(url_sources=dict.fromkeys(
             ("user_input", "client_tool_results", "server_tool_results"), "none"))])),
    Case("agents-create-web-sources-unknown-client-tool", 400, "POST", A,
         "url_sources.client_tool_results",
         body=agent(tools=[web(url_sources={"client_tool_results": {
             "type": "only", "tools": [{"type": "tool_reference", "name": "nope"}]}})])),
    Case("agents-create-web-sources-bad-server-tool", 400, "POST", A,
         "url_sources.server_tool_results",
         body=agent(tools=[web(url_sources={"server_tool_results": {
             "type": "except", "tools": [{"type": "tool_reference", "name": "bash"}]}})])),
    Case("agents-create-unused-mcp-server", 400, "POST", A, "mcp_servers",
         body=agent(mcp_servers=[{"type": "url", "name": "s", "url": "https://mcp.example"}])),
    Case("agents-create-mcp-server-bad-ipv6-url", 400, "POST", A, "mcp_servers.0.url",
         body=agent(mcp_servers=[{"type": "url", "name": "s", "url": "http://[::1/mcp"}])),
    Case("agents-create-mcp-server-url-without-host", 400, "POST", A, "mcp_servers.0.url",
         body=agent(mcp_servers=[{"type": "url", "name": "s", "url": "http:///mcp"}])),
    Case("agents-create-mcp-server-url-port-zero", 400, "POST", A, "mcp_servers.0.url: port 0",
         body=agent(mcp_servers=[{"type": "url", "name": "s", "url": "https://m.test:0/"}])),
    Case("agents-create-mcp-config-name-empty", 400, "POST", A, "tools.0.configs.0.name",
         body=agent(mcp_servers=[{"type": "url", "name": "s", "url": "https://mcp.example"}],
                    tools=[{"type": "mcp_toolset", "mcp_server_name": "s",
                            "configs": [{"name": ""}]}])),
    Case("agents-create-mcp-config-name-10000", 400, "POST", A, "tools.0.configs.0.name",
         body=agent(mcp_servers=[{"type": "url", "name": "s", "url": "https://mcp.example"}],
                    tools=[{"type": "mcp_toolset", "mcp_server_name": "s",
                            "configs": [{"name": "x" * 10_000}]}])),
    Case("agents-create-custom-tool-named-like-mcp", 400, "POST", A, "tools.0.name",
         body=agent(tools=[{"type": "custom", "name": "mcp__s__echo", "description": "d",
                            "input_schema": {"type": "object"}}])),
    Case("agents-create-metadata-17-pairs", 400, "POST", A, "metadata",
         body=agent(metadata=META_17)),
    Case("agents-create-metadata-key-65", 400, "POST", A, "metadata", body=agent(metadata=KEY_65)),
    Case("agents-create-metadata-value-513", 400, "POST", A, "metadata",
         body=agent(metadata=VALUE_513)),
    Case("agents-create-metadata-value-int", 400, "POST", A, "metadata",
         body=agent(metadata={"k": 1})),
    # agents: retrieve, update, archive, versions, list
    Case("agents-retrieve-unknown-id", 404, "GET", A + "/agent_nope", "agent_nope"),
    Case("agents-retrieve-environment-id", 404, "GET", A + "/{env}", "{env}"),
    Case("agents-retrieve-other-workspace", 404, "GET", A + "/{other_agent}", "{other_agent}"),
    Case("agents-retrieve-version-0", 400, "GET", AG, "version", params={"version": 0}),
    Case("agents-retrieve-version-missing", 404, "GET", AG, "version", params={"version": 99}),
    Case("agents-retrieve-version-huge", 400, "GET", AG, "version", params={"version": HUGE}),
    Case("agents-update-stale-version", 409, "POST", AG, "version",
         body={"version": 1, "name": "x"}),
    Case("agents-update-archived", 400, "POST", A + "/{agent_archived}", "archived",
         body={"name": "x"}),
    Case("agents-update-unknown-field", 400, "POST", AG, "nmae", body={"nmae": "x"}),
    Case("agents-update-empty-name", 400, "POST", AG, "name", body={"name": ""}),
    Case("agents-update-null-name", 400, "POST", AG, "name", body={"name": None}),
    Case("agents-update-version-not-int", 400, "POST", AG, "version", body={"version": "two"}),
    # JSON's types as they are: no coercion of a boolean, a digit string or 1.0.
    Case("agents-update-version-true", 400, "POST", AG, "version", body={"version": True}),
    Case("agents-update-version-digit-string", 400, "POST", AG, "version",
         body={"version": "1"}),
    Case("agents-update-version-float", 400, "POST", AG, "version", body={"version": 1.0}),
    Case("agents-create-enabled-string", 400, "POST", A, "enabled",
         body=agent(tools=[{**TOOLSET, "default_config": {"enabled": "false"}}])),
    Case("agents-create-name-number", 400, "POST", A, "name", body={"name": 7, "model": MODEL}),
    Case("agents-update-metadata-17-pairs", 400, "POST", AG, "metadata",
         body={"metadata": META_17}),
    Case("agents-update-other-workspace", 404, "POST", A + "/{other_agent}", "{other_agent}",
         body={"name": "x"}),
    Case("agents-archive-unknown-id", 404, "POST", A + "/agent_nope/archive", "agent_nope"),
    Case("agents-archive-other-workspace", 404, "POST", A + "/{other_agent}/archive",
         "{other_agent}"),
    Case("agents-versions-unknown-id", 404, "GET", A + "/agent_nope/versions", "agent_nope"),
    Case("agents-versions-limit-0", 400, "GET", AG + "/versions", "limit", params={"limit": 0}),
    Case("agents-versions-cursor-of-agent-list", 400, "GET", AG + "/versions", "page",
         params={"page": "{agents_cursor}"}),
    Case("agents-list-limit-0", 400, "GET", A, "limit", params={"limit": 0}),
    Case("agents-list-limit-101", 400, "GET", A, "limit", params={"limit": 101}),
    Case("agents-list-page-garbage", 400, "GET", A, "page", params={"page": "garbage!!"}),
    Case("agents-list-page-forged-key", 400, "GET", A, "page", params={"page": ARITY_CURSOR}),
    Case("agents-list-page-environments-cursor", 400, "GET", A, "page",
         params={"page": "{envs_cursor}"}),
    Case("agents-list-created-at-not-a-date", 400, "GET", A, "created_at[gte]",
         params={"created_at[gte]": "yesterday"}),
    Case("agents-list-created-at-before-year-1", 400, "GET", A, "created_at[gte]",
         params={"created_at[gte]": EDGE_EARLY}),
    Case("agents-list-created-at-after-year-9999", 400, "GET", A, "created_at[lte]",
         params={"created_at[lte]": EDGE_LATE}),
    Case("agents-list-page-forged-out-of-range", 400, "GET", A, "page",
         params={"page": HUGE_KEY_CURSOR}),
    Case("agents-list-page-of-other-workspace", 400, "GET", A, "page",
         params={"page": "{other_agents_cursor}"}),
    Case("agents-versions-cursor-of-other-agent", 400, "GET", A + "/{agent_archived}/versions",
         "page", params={"page": "{versions_cursor}"}),
    Case("agents-list-include-archived-not-bool", 400, "GET", A, "include_archived",
         params={"include_archived": "maybe"}),
    # environments
    Case("envs-create-missing-name", 400, "POST", E, "name", body={"description": "d"}),
    Case("envs-create-empty-name", 400, "POST", E, "name", body={"name": ""}),
    Case("envs-create-257-pip-packages", 400, "POST", E, "config.packages.pip",
         body={"name": "many", "config": {"type": "cloud",
                                          "packages": {"pip": [f"p{i}" for i in range(257)]}}}),
    Case("envs-create-npm-option", 400, "POST", E, "config.packages.npm.0",
         body={"name": "opt", "config": {"type": "cloud", "packages": {"npm": ["-g"]}}}),
    Case("envs-create-duplicate-name", 409, "POST", E, "name", body={"name": "{env_name}"}),
    Case("envs-create-unknown-config-type", 400, "POST", E, "config",
         body={"name": "n", "config": {"type": "moon"}}),
    Case("envs-create-unknown-networking-type", 400, "POST", E, "networking",
         body={"name": "n", "config": {"type": "cloud", "networking": {"type": "sometimes"}}}),
    Case("envs-create-bad-allowed-host", 400, "POST", E, "allowed_hosts",
         body={"name": "n", "config": {"type": "cloud", "networking": LIMITED_BAD_HOST}}),
    # A 64-character label: taken before, then refused by the egress proxy at every tool call.
    Case("envs-create-allowed-host-long-label", 400, "POST", E, "allowed_hosts",
         body={"name": "n", "config": {"type": "cloud", "networking": LIMITED_LONG_LABEL}}),
    # Packages under limited networking need the package registries (the SDK's rule).
    Case("envs-create-packages-without-package-managers", 400, "POST", E,
         "config.networking.allow_package_managers",
         body={"name": "n", "config": {"type": "cloud", "networking": LIMITED_NO_PACKAGES,
                                       "packages": {"pip": ["requests"]}}}),
    Case("envs-create-unknown-scope", 400, "POST", E, "scope", body={"name": "n", "scope": "moon"}),
    Case("envs-create-unknown-field", 400, "POST", E, "region", body={"name": "n", "region": "eu"}),
    Case("envs-create-metadata-17-pairs", 400, "POST", E, "metadata",
         body={"name": "n", "metadata": META_17}),
    Case("envs-update-archived", 400, "POST", E + "/{env_archived}", "archived",
         body={"name": "x"}),
    Case("envs-update-duplicate-name", 409, "POST", E + "/{env2}", "name",
         body={"name": "{env_name}"}),
    Case("envs-update-null-name", 400, "POST", E + "/{env}", "name", body={"name": None}),
    Case("envs-update-config-type-change", 400, "POST", E + "/{env}", "config.type",
         body={"config": {"type": "self_hosted"}}),
    Case("envs-update-packages-without-package-managers", 400, "POST", E + "/{env}",
         "config.networking.allow_package_managers",
         body={"config": {"type": "cloud", "networking": LIMITED_NO_PACKAGES,
                          "packages": {"npm": ["typescript"]}}}),
    Case("envs-update-unknown-id", 404, "POST", E + "/env_nope", "env_nope", body={"name": "x"}),
    Case("envs-update-other-workspace", 404, "POST", E + "/{other_env}", "{other_env}",
         body={"name": "x"}),
    Case("envs-retrieve-session-id", 404, "GET", E + "/{session}", "{session}"),
    Case("envs-delete-unknown-id", 404, "DELETE", E + "/env_nope", "env_nope"),
    Case("envs-delete-other-workspace", 404, "DELETE", E + "/{other_env}", "{other_env}"),
    Case("envs-delete-in-use", 409, "DELETE", E + "/{env}", "{env}"),
    Case("envs-list-limit-101", 400, "GET", E, "limit", params={"limit": 101}),
    Case("envs-list-page-garbage", 400, "GET", E, "page", params={"page": "page_%%%"}),
    # sessions
    Case("sessions-create-json-array", 400, "POST", S, "body", raw=b'["agent"]'),
    Case("sessions-create-missing-agent", 400, "POST", S, "agent",
         body={"environment_id": "{env}"}),
    Case("sessions-create-missing-environment", 400, "POST", S, "environment_id",
         body={"agent": "{agent}"}),
    Case("sessions-create-unknown-environment", 404, "POST", S, "environment_id",
         body=session(environment_id="env_nope")),
    Case("sessions-create-agent-id-as-environment", 404, "POST", S, "environment_id",
         body=session(environment_id="{agent}")),
    Case("sessions-create-environment-id-as-agent", 404, "POST", S, "agent",
         body=session(agent="{env}")),
    Case("sessions-create-other-workspace-agent", 404, "POST", S, "agent",
         body=session(agent="{other_agent}")),
    Case("sessions-create-other-workspace-env", 404, "POST", S, "environment_id",
         body=session(environment_id="{other_env}")),
    Case("sessions-create-archived-agent", 400, "POST", S, "agent",
         body=session(agent="{agent_archived}")),
    Case("sessions-create-archived-environment", 400, "POST", S, "environment_id",
         body=session(environment_id="{env_archived}")),
    Case("sessions-create-agent-version-0", 400, "POST", S, "version",
         body=session(agent={"type": "agent", "id": "{agent}", "version": 0})),
    Case("sessions-create-agent-version-missing", 404, "POST", S, "version",
         body=session(agent={"type": "agent", "id": "{agent}", "version": 99})),
    Case("sessions-create-agent-version-huge", 400, "POST", S, "version",
         body=session(agent={"type": "agent", "id": "{agent}", "version": HUGE})),
    Case("sessions-create-unknown-agent-ref-type", 400, "POST", S, "agent",
         body=session(agent={"type": "robot", "id": "{agent}"})),
    Case("sessions-create-51-initial-events", 400, "POST", S, "initial_events",
         body=session(initial_events=[msg()] * 51)),
    Case("sessions-create-initial-interrupt", 400, "POST", S, "initial_events",
         body=session(initial_events=[{"type": "user.interrupt"}])),
    Case("sessions-create-initial-system-message", 400, "POST", S, "initial_events",
         body=session(initial_events=[msg(), system()])),
    Case("sessions-create-initial-outcome-not-graded", 400, "POST", S, "initial_events.1.type",
         body=session(initial_events=[msg(), OUTCOME])),
    Case("sessions-create-initial-empty-content", 400, "POST", S, "initial_events.0.content",
         body=session(initial_events=[{"type": "user.message", "content": []}])),
    Case("sessions-create-bad-vault-id", 400, "POST", S, "vault_ids",
         body=session(vault_ids=["{agent}"])),
    Case("sessions-create-bad-budget-amount", 400, "POST", S, "budget",
         body=session(budget=budget("12.50"))),
    Case("sessions-create-budget-amount-with-newline", 400, "POST", S, "budget",
         body=session(budget=budget("2500\n"))),
    Case("sessions-create-metadata-key-65", 400, "POST", S, "metadata",
         body=session(metadata=KEY_65)),
    Case("sessions-create-unknown-field", 400, "POST", S, "priority",
         body=session(priority="high")),
    Case("sessions-update-archived", 409, "POST", S + "/{session_archived}", "archived",
         body={"title": "x"}),
    Case("sessions-update-vault-ids", 400, "POST", SE, "vault_ids", body={"vault_ids": []}),
    Case("sessions-update-add-budget", 400, "POST", SE, "budget", body={"budget": budget("100")}),
    Case("sessions-update-unknown-field", 400, "POST", SE, "status", body={"status": "idle"}),
    Case("sessions-update-unknown-tool-type", 400, "POST", SE, "tools",
         body={"agent": {"tools": [{"type": "hammer"}]}}),
    Case("sessions-update-other-workspace", 404, "POST", S + "/{other_session}", "{other_session}",
         body={"title": "x"}),
    Case("sessions-retrieve-agent-id", 404, "GET", S + "/{agent}", "{agent}"),
    Case("sessions-archive-unknown-id", 404, "POST", S + "/sesn_nope/archive", "sesn_nope"),
    Case("sessions-delete-unknown-id", 404, "DELETE", S + "/sesn_nope", "sesn_nope"),
    Case("sessions-delete-other-workspace", 404, "DELETE", S + "/{other_session}",
         "{other_session}"),
    Case("sessions-list-order-sideways", 400, "GET", S, "order", params={"order": "sideways"}),
    Case("sessions-list-bogus-status", 400, "GET", S, "statuses[]", params={"statuses[]": "bogus"}),
    Case("sessions-list-limit-101", 400, "GET", S, "limit", params={"limit": 101}),
    Case("sessions-list-cursor-of-other-order", 400, "GET", S, "page",
         params={"page": "{sessions_asc_cursor}"}),
    Case("sessions-list-created-at-not-a-date", 400, "GET", S, "created_at[lt]",
         params={"created_at[lt]": "2024-13-45"}),
    Case("sessions-list-created-at-edge", 400, "GET", S, "created_at[gt]",
         params={"created_at[gt]": EDGE_LATE}),
    Case("sessions-list-agent-id-with-nul", 400, "GET", S, "agent_id",
         params={"agent_id": "agent_\x00"}),
    Case("sessions-list-agent-version-0", 400, "GET", S, "agent_version",
         params={"agent_version": 0}),
    Case("sessions-list-agent-version-huge", 400, "GET", S, "agent_version",
         params={"agent_version": HUGE}),
    # session events: send
    Case("events-send-malformed-json", 400, "POST", EV, "body", raw=b'{"events": [}'),
    Case("events-send-missing-events", 400, "POST", EV, "events", body={}),
    Case("events-send-events-not-a-list", 400, "POST", EV, "events", body={"events": msg()}),
    Case("events-send-empty-list", 400, "POST", EV, "events", body=events()),
    Case("events-send-1001-events", 400, "POST", EV, "events", body=events(*[msg()] * 1001)),
    Case("events-send-unknown-type", 400, "POST", EV, "events.0", body=events({"type": "user.x"})),
    Case("events-send-agent-event-type", 400, "POST", EV, "events.0",
         body=events({"type": "agent.message", "content": [{"type": "text", "text": "x"}]})),
    Case("events-send-unknown-content-block", 400, "POST", EV, "events.0.content",
         body=events({"type": "user.message", "content": [{"type": "hologram"}]})),
    Case("events-send-empty-content", 400, "POST", EV, "events.0.content",
         body=events({"type": "user.message", "content": []})),
    Case("events-send-tool-result-not-self-hosted", 400, "POST", EV, "self_hosted",
         body=events({"type": "user.tool_result", "tool_use_id": "sevt_x"})),
    Case("events-send-blank-text-block", 400, "POST", EV, "events.0.content.0.text",
         body=events({"type": "user.message", "content": [{"type": "text", "text": " \n"},
                                                          {"type": "text", "text": "hi"}]})),
    Case("events-send-system-message-not-last", 400, "POST", EV, "events.1",
         body=events(msg(), system(), msg())),
    Case("events-send-system-message-alone", 400, "POST", EV, "events.0", body=events(system())),
    Case("events-send-confirmation-unknown-tool-use", 400, "POST", EV, "tool_use_id",
         body=events(confirm())),
    Case("events-send-confirmation-bad-result", 400, "POST", EV, "result",
         body=events(confirm(result="maybe"))),
    Case("events-send-deny-message-with-allow", 400, "POST", EV, "deny_message",
         body=events(confirm(deny_message="no"))),
    Case("events-send-custom-result-names-user-event", 400, "POST", EV, "custom_tool_use_id",
         body=events({"type": "user.custom_tool_result", "custom_tool_use_id": "{user_event}"})),
    Case("events-send-custom-result-id-not-string", 400, "POST", EV, "custom_tool_use_id",
         body=events({"type": "user.custom_tool_result", "custom_tool_use_id": 42})),
    Case("events-send-valid-then-invalid", 400, "POST", EV, "events.1.tool_use_id",
         body=events(msg(), confirm())),
    Case("events-send-outcome-21-iterations", 400, "POST", EV, "max_iterations",
         body=events({**OUTCOME, "max_iterations": 21})),
    Case("events-send-outcome-not-graded", 400, "POST", EV, "events.0.type",
         body=events(OUTCOME)),
    Case("events-send-archived-session", 409, "POST", S + "/{session_archived}/events", "archived",
         body=events(msg())),
    Case("events-send-unknown-session", 404, "POST", S + "/sesn_nope/events", "sesn_nope",
         body=events(msg())),
    Case("events-send-other-workspace", 404, "POST", S + "/{other_session}/events",
         "{other_session}", body=events(msg())),
    # session events: list and stream
    Case("events-list-limit-1001", 400, "GET", EV, "limit", params={"limit": 1001}),
    Case("events-list-order-sideways", 400, "GET", EV, "order", params={"order": "sideways"}),
    Case("events-list-bogus-type", 400, "GET", EV, "types[]", params={"types[]": "bogus"}),
    Case("events-list-created-at-not-a-date", 400, "GET", EV, "created_at[gte]",
         params={"created_at[gte]": "not-a-date"}),
    Case("events-list-cursor-of-other-session", 400, "GET", EV, "page",
         params={"page": "{events_cursor}"}),
    Case("events-list-page-forged-key", 400, "GET", EV, "page", params={"page": "{events_forged}"}),
    Case("events-list-created-at-edge", 400, "GET", EV, "created_at[lt]",
         params={"created_at[lt]": EDGE_EARLY}),
    Case("events-stream-after-with-nul", 400, "GET", EV + "/stream", "after",
         params={"after": "sevt_\x00"}),
    Case("events-list-unknown-session", 404, "GET", S + "/sesn_nope/events", "sesn_nope"),
    Case("events-list-other-workspace", 404, "GET", S + "/{other_session}/events",
         "{other_session}"),
    Case("events-stream-bogus-delta", 400, "GET", EV + "/stream", "event_deltas[]",
         params={"event_deltas[]": "bogus"}),
    Case("events-stream-unknown-after", 400, "GET", EV + "/stream", "after",
         params={"after": "sevt_nope"}),
    Case("events-stream-unknown-last-event-id", 400, "GET", EV + "/stream", "Last-Event-ID",
         headers={"last-event-id": "sevt_nope"}),
    Case("events-stream-unknown-session", 404, "GET", S + "/sesn_nope/events/stream", "sesn_nope"),
    Case("events-stream-other-workspace", 404, "GET", S + "/{other_session}/events/stream",
         "{other_session}"),
]
# fmt: on
