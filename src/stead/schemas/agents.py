"""Agent definitions: request params -> the resolved, stored (wire) form.

A definition holds every versioned field; two definitions are equal exactly
when an update changed nothing, which is how no-op updates make no version.
"""

from __future__ import annotations

import re
from collections.abc import Collection
from typing import Any

from stead.egress_policy import InvalidPolicy, domain_entry
from stead.jsonvalues import Json
from stead.schemas.limits import (
    check_http_url,
    check_length,
    check_metadata,
    check_version,
    patch_metadata,
)
from stead.schemas.validation import RequestError, StrictParams

CREATE = StrictParams("agent_create")
UPDATE = StrictParams("agent_update")

BUILTIN_TOOLS = ("bash", "edit", "read", "write", "glob", "grep", "web_fetch", "web_search")
AGENT_TOOLSET = "agent_toolset_20260401"
WEB_TOOL_KEYS = (
    "url_sources",
    "allowed_domains",
    "blocked_domains",
    "max_content_tokens",
    "user_location",
)
MAX_TOOLS = 256
MAX_MCP_SERVERS = 20
MCP_TOOL_NAME_CHARS = 128
"""The longest MCP tool name an ``mcp_toolset``'s ``configs`` may name (the SDK's limit)."""
MAX_SKILLS = 20
CUSTOM_TOOL_NAME = re.compile(r"^[A-Za-z0-9_-]{1,128}$")
DEFAULT_IDENTITY: Json = {"type": "service_account"}
URL_SOURCES = ("user_input", "client_tool_results", "server_tool_results")
SERVER_TOOLS = ("web_search", "web_fetch")


def _policy(value: Json | None, default: Json) -> Json:
    return {"type": value["type"]} if value else dict(default)


SYSTEM_CHARS = 100_000
"""The longest system prompt (the SDK's limit)."""


def resolve_model(model: str | Json, current: Json | None = None, field: str = "model") -> Json:
    """``current``: the stored model an update replaces. The SDK: ``model`` is
    replaced whole, except that an update without ``effort`` keeps the stored one."""
    if isinstance(model, str):
        model = {"id": model}
    effort = model.get("effort")
    if "effort" not in model and current is not None:
        effort = current.get("effort")
    if isinstance(effort, str):
        effort = {"type": effort}
    check_length(f"{field}.id", model["id"], low=1, high=256)
    return {
        "id": model["id"],
        "effort": effort,
        "inference_geo": model.get("inference_geo"),
        "speed": model.get("speed"),
    }


def check_served(model: Json, openai_models: Collection[str], field: str = "model") -> None:
    """A model an OpenAI-compatible server answers takes an ``effort`` (its
    ``reasoning_effort``) but has no ``speed`` or ``inference_geo`` to set."""
    if model["id"] not in openai_models:
        return
    for key in ("speed", "inference_geo"):
        if model.get(key) is not None:
            raise RequestError(
                f"{field}.{key}: {model['id']!r} is answered by an OpenAI-compatible "
                f"server (STEAD_OPENAI_MODELS), which has no {key}"
            )


def _resolve_toolset_configs(
    field: str, configs: list[Json], default: Json, extra_keys: tuple[str, ...]
) -> list[Json]:
    seen: set[str] = set()
    resolved = []
    for i, cfg in enumerate(configs):
        name = cfg["name"]
        if name in seen:
            raise RequestError(f"{field}.configs.{i}.name: {name!r} is configured twice")
        seen.add(name)
        entry: Json = {
            "name": name,
            "enabled": default["enabled"] if cfg.get("enabled") is None else cfg["enabled"],
            "permission_policy": _policy(
                cfg.get("permission_policy"), default["permission_policy"]
            ),
        }
        for key in extra_keys:
            if cfg.get(key) is not None:
                entry[key] = cfg[key]
        resolved.append(entry)
    return resolved


def _resolve_agent_toolset(field: str, tool: Json) -> Json:
    given = tool.get("default_config") or {}
    default = {
        "enabled": True if given.get("enabled") is None else given["enabled"],
        "permission_policy": _policy(given.get("permission_policy"), {"type": "always_allow"}),
    }
    configs = _resolve_toolset_configs(
        field,
        list(tool.get("configs") or []),
        default,
        WEB_TOOL_KEYS,
    )
    for i, cfg in enumerate(configs):
        cfg["type"] = cfg["name"]
        _check_web_config(f"{field}.configs.{i}", cfg)
    return {"type": AGENT_TOOLSET, "default_config": default, "configs": configs}


def _check_web_config(where: str, cfg: Json) -> None:
    """The web tools' own fields: domain lists of plain host names, a positive
    token cap, ``url_sources`` in the object form the API returns."""
    if cfg.get("allowed_domains") is not None and cfg.get("blocked_domains") is not None:
        raise RequestError(f"{where}: allowed_domains and blocked_domains are mutually exclusive")
    for key in ("allowed_domains", "blocked_domains"):
        if key in cfg:
            cfg[key] = list(cfg[key])
            if not cfg[key] or len(cfg[key]) > 64:
                raise RequestError(f"{where}.{key}: 1 to 64 entries (omit it for none)")
            try:
                for j, entry in enumerate(cfg[key]):
                    domain_entry(entry, f"{where}.{key}.{j}")
            except InvalidPolicy as exc:
                raise RequestError(str(exc)) from None
    if cfg.get("max_content_tokens") is not None and cfg["max_content_tokens"] < 1:
        raise RequestError(f"{where}.max_content_tokens: must be at least 1")
    if "url_sources" in cfg:
        cfg["url_sources"] = _url_sources(f"{where}.url_sources", cfg["url_sources"])


def _url_sources(where: str, given: Json) -> Json:
    """Each source as ``{"type": ...}`` (``"all"``/``"none"`` shorthands expanded);
    an unset source stays null, which allows it."""
    resolved: Json = {}
    for key in URL_SOURCES:
        value = given.get(key)
        if isinstance(value, str):
            value = {"type": value}
        if value is not None and value["type"] in ("only", "except"):
            tools = [{"type": "tool_reference", "name": t["name"]} for t in value["tools"]]
            value = {"type": value["type"], "tools": tools}
        elif value is not None:
            value = {"type": value["type"]}
        resolved[key] = value
    if all(resolved[key] == {"type": "none"} for key in URL_SOURCES):
        raise RequestError(f"{where}: every source is none, so nothing could be fetched")
    for name in _listed(resolved.get("server_tool_results")):
        if name not in SERVER_TOOLS:
            raise RequestError(
                f"{where}.server_tool_results: {name!r} is not web_search or web_fetch"
            )
    return resolved


def _listed(source: Json | None) -> list[str]:
    return [t["name"] for t in (source or {}).get("tools", [])]


def _resolve_mcp_toolset(field: str, tool: Json) -> Json:
    given = tool.get("default_config") or {}
    default = {
        "enabled": True if given.get("enabled") is None else given["enabled"],
        "permission_policy": _policy(given.get("permission_policy"), {"type": "always_ask"}),
    }
    given_configs = list(tool.get("configs") or [])
    for i, cfg in enumerate(given_configs):
        # The SDK: the name of the MCP tool to configure, 1-128 characters.
        check_length(f"{field}.configs.{i}.name", cfg["name"], low=1, high=MCP_TOOL_NAME_CHARS)
    configs = _resolve_toolset_configs(field, given_configs, default, ())
    return {
        "type": "mcp_toolset",
        "mcp_server_name": tool["mcp_server_name"],
        "default_config": default,
        "configs": configs,
    }


MCP_TOOL_PREFIX = "mcp__"
"""What the names the model calls MCP tools by start with (``harness.mcp``)."""


def _resolve_custom(field: str, tool: Json) -> Json:
    if not CUSTOM_TOOL_NAME.match(tool["name"]):
        raise RequestError(f"{field}.name: must be 1-128 characters of A-Z, a-z, 0-9, _ or -")
    if tool["name"].startswith(MCP_TOOL_PREFIX):
        # An MCP server's tools reach the model as mcp__<server>__<tool>; the
        # Messages API refuses a request that names one tool twice.
        raise RequestError(f"{field}.name: {MCP_TOOL_PREFIX!r} starts MCP tools' names")
    _check_schema(f"{field}.input_schema", tool["input_schema"])
    return {
        "type": "custom",
        "name": tool["name"],
        "description": tool["description"],
        "input_schema": dict(tool["input_schema"]),
    }


def _check_schema(field: str, schema: Json) -> None:
    """A tool's input schema must be a JSON Schema (draft 2020-12, as the Messages
    API reads it): accepted and then refused by the model API, it would fail
    every turn of every session of the agent."""
    # Imported here: only an agent with custom tools pays for it.
    from jsonschema import Draft202012Validator
    from jsonschema.exceptions import SchemaError

    try:
        Draft202012Validator.check_schema(schema)
    except SchemaError as exc:  # its ``path`` is a deque of keys and indexes
        where = "".join(f".{part}" for part in exc.path)
        raise RequestError(f"{field}{where}: not a JSON Schema ({exc.message[:200]})") from None
    except RecursionError:
        raise RequestError(f"{field}: nested too deeply") from None


def resolve_tools(tools: list[Json], mcp_servers: list[Json], field: str = "tools") -> list[Json]:
    resolved: list[Json] = []
    for i, tool in enumerate(tools):
        where = f"{field}.{i}"
        if tool["type"] == AGENT_TOOLSET:
            resolved.append(_resolve_agent_toolset(where, tool))
        elif tool["type"] == "mcp_toolset":
            resolved.append(_resolve_mcp_toolset(where, tool))
        else:
            resolved.append(_resolve_custom(where, tool))
    _check_tool_set(resolved, mcp_servers, field)
    return resolved


def _check_tool_set(tools: list[Json], mcp_servers: list[Json], field: str) -> None:
    if sum(t["type"] == AGENT_TOOLSET for t in tools) > 1:
        raise RequestError(f"{field}: {AGENT_TOOLSET} may appear only once")
    count = 0
    names: set[str] = (
        set(BUILTIN_TOOLS) if any(t["type"] == AGENT_TOOLSET for t in tools) else set()
    )
    server_names = {s["name"] for s in mcp_servers}
    referenced: set[str] = set()
    custom: set[str] = set()
    for i, tool in enumerate(tools):
        if tool["type"] == AGENT_TOOLSET:
            count += len(BUILTIN_TOOLS)
        elif tool["type"] == "mcp_toolset":
            count += max(1, len(tool["configs"]))
            server = tool["mcp_server_name"]
            if server not in server_names:
                raise RequestError(
                    f"{field}.{i}.mcp_server_name: no MCP server named {server!r} in mcp_servers"
                )
            if server in referenced:
                raise RequestError(f"{field}.{i}.mcp_server_name: {server!r} has two toolsets")
            referenced.add(server)
        else:
            count += 1
            custom.add(tool["name"])
            if tool["name"] in names:
                raise RequestError(f"{field}.{i}.name: tool name {tool['name']!r} is already used")
            names.add(tool["name"])
    _check_client_sources(tools, custom, field)
    if count > MAX_TOOLS:
        raise RequestError(f"{field}: at most {MAX_TOOLS} tools across all toolsets, got {count}")
    unreferenced = server_names - referenced
    if unreferenced:
        raise RequestError(
            f"mcp_servers: every server must be used by an mcp_toolset in {field}; "
            f"unused: {', '.join(sorted(unreferenced))}"
        )


def _check_client_sources(tools: list[Json], custom: set[str], field: str) -> None:
    """web_fetch's ``url_sources.client_tool_results`` may name only custom tools
    of the same agent."""
    for i, tool in enumerate(tools):
        for j, cfg in enumerate(tool.get("configs", []) if tool["type"] == AGENT_TOOLSET else []):
            sources = cfg.get("url_sources") or {}
            for name in _listed(sources.get("client_tool_results")):
                if name not in custom:
                    raise RequestError(
                        f"{field}.{i}.configs.{j}.url_sources.client_tool_results: "
                        f"{name!r} is not a custom tool of this agent"
                    )


def resolve_mcp_servers(servers: list[Json], field: str = "mcp_servers") -> list[Json]:
    if len(servers) > MAX_MCP_SERVERS:
        raise RequestError(f"{field}: at most {MAX_MCP_SERVERS} servers, got {len(servers)}")
    seen: set[str] = set()
    resolved = []
    for i, server in enumerate(servers):
        check_length(f"{field}.{i}.name", server["name"], low=1, high=255)
        if server["name"] in seen:
            raise RequestError(f"{field}.{i}.name: {server['name']!r} is used twice")
        seen.add(server["name"])
        check_http_url(f"{field}.{i}.url", server["url"])
        resolved.append({"type": "url", "name": server["name"], "url": server["url"]})
    return resolved


def resolve_skills(skills: list[Json], field: str = "skills") -> list[Json]:
    """Skill references with ``latest`` for an unpinned version. Only custom
    skills: stead has no copy of Anthropic's pre-built ones to mount. That each
    skill exists is the runtime's check (``check_skill_refs``)."""
    if len(skills) > MAX_SKILLS:
        raise RequestError(f"{field}: at most {MAX_SKILLS} skills, got {len(skills)}")
    seen: set[str] = set()
    for i, skill in enumerate(skills):
        if skill["type"] != "custom":
            raise RequestError(
                f"{field}.{i}.type: stead does not provide Anthropic pre-built skills "
                f"({skill['skill_id']!r}); upload the skill's files with POST /v1/skills "
                "and name it as a custom skill"
            )
        if skill["skill_id"] in seen:
            raise RequestError(f"{field}.{i}.skill_id: {skill['skill_id']!r} is named twice")
        seen.add(skill["skill_id"])
    return [
        {"type": s["type"], "skill_id": s["skill_id"], "version": s.get("version") or "latest"}
        for s in skills
    ]


def _check_identity(value: Json | None) -> None:
    """Sandboxes run as stead's own user: there is no AWS role to assume."""
    if value is not None and value.get("type") != "service_account":
        raise RequestError(
            f"execution_identity.type: {value.get('type')!r} is not supported by stead "
            "(tools run as the sandbox's own user): use service_account"
        )


def _check_multiagent(value: Json | None) -> None:
    if value is not None:
        raise RequestError("multiagent: multiagent orchestration is not supported by stead yet")


def definition_from_create(body: Any) -> Json:
    params = CREATE.validate(body)
    check_length("name", params["name"], low=1, high=256)
    check_length("description", params.get("description"), high=2048)
    check_length("system", params.get("system"), high=SYSTEM_CHARS)
    check_metadata("metadata", params.get("metadata", {}))
    _check_multiagent(params.get("multiagent"))
    _check_identity(params.get("execution_identity"))
    servers = resolve_mcp_servers(list(params.get("mcp_servers") or []))
    return {
        "name": params["name"],
        "description": params.get("description"),
        "system": params.get("system"),
        "model": resolve_model(params["model"]),
        "tools": resolve_tools(list(params.get("tools") or []), servers),
        "mcp_servers": servers,
        "skills": resolve_skills(list(params.get("skills") or [])),
        "multiagent": None,
        "execution_identity": params.get("execution_identity") or dict(DEFAULT_IDENTITY),
        "metadata": dict(params.get("metadata", {})),
    }


def parse_update(body: Any) -> tuple[int | None, Json]:
    """Validates an update body; returns (expected version, params)."""
    params = UPDATE.validate(body)
    if "name" in params:
        check_length("name", params["name"], low=1, high=256)
    check_length("description", params.get("description"), high=2048)
    check_length("system", params.get("system"), high=SYSTEM_CHARS)
    _check_multiagent(params.get("multiagent"))
    _check_identity(params.get("execution_identity"))
    expected = params.pop("version", None)
    check_version("version", expected)
    return expected, params


def apply_update(current: Json, params: Json) -> Json:
    """The definition after ``params``; pure, raises RequestError on inconsistency."""
    new = dict(current)
    if "name" in params:
        new["name"] = params["name"]
    for key in ("description", "system"):
        if key in params:
            new[key] = params[key] or None  # the SDK: "send empty string or null to clear"
    if "model" in params:
        new["model"] = resolve_model(params["model"], current["model"])
    if "execution_identity" in params:
        new["execution_identity"] = params["execution_identity"] or dict(DEFAULT_IDENTITY)
    if "metadata" in params:
        new["metadata"] = patch_metadata("metadata", current["metadata"], params["metadata"])
    if "skills" in params:
        new["skills"] = resolve_skills(list(params["skills"] or []))
    if "mcp_servers" in params:
        new["mcp_servers"] = resolve_mcp_servers(list(params["mcp_servers"] or []))
    if "tools" in params:
        new["tools"] = resolve_tools(list(params["tools"] or []), new["mcp_servers"])
    elif "mcp_servers" in params:
        _check_tool_set(new["tools"], new["mcp_servers"], "tools")
    return new
