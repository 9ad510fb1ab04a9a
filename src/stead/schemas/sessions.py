"""Session requests: the agent reference, overrides, the agent snapshot, updates."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from stead import usage as accounting
from stead.jsonvalues import Json
from stead.schemas import agents, repositories, resources
from stead.schemas.limits import check_length, check_metadata, check_version, patch_metadata
from stead.schemas.validation import RequestError, StrictParams

CREATE = StrictParams("session_create")
UPDATE = StrictParams("session_update")
MAX_INITIAL_EVENTS = 50
MAX_VAULTS = 64
AMOUNT = re.compile(r"[0-9]{1,15}")


@dataclass(frozen=True)
class SessionCreate:
    agent_id: str
    agent_version: int | None
    overrides: Json
    environment_id: str
    fields: Json
    initial_events: list[Json]
    file_mounts: list[resources.FileMount]
    """Files to mount: ``fields["resources"]`` once their files are checked."""
    memory_mounts: list[resources.MemoryMount]
    """Memory stores to mount: in ``fields["resources"]`` once their stores are read."""
    repositories: list[repositories.RepositoryMount]
    """Repositories to clone: ``fields["resources"]`` too, their tokens sealed apart."""
    resource_types: list[str]
    """Each resource's type, in the order given (the order they are kept in)."""


def _budget(value: Json | None, field: str = "budget") -> Json | None:
    if value is None:
        return None
    cost = value["max_list_cost"]
    if not AMOUNT.fullmatch(str(cost["amount"])):
        raise RequestError(
            f"{field}.max_list_cost.amount: must be a whole number of cents as a string, "
            'such as "2500" for $25.00'
        )
    return {"type": "limit", "max_list_cost": {"amount": str(cost["amount"]), "currency": "USD"}}


def parse_create(body: Any) -> SessionCreate:
    params = CREATE.validate(body)
    agent = params["agent"]
    if isinstance(agent, str):
        agent_id, version, overrides = agent, None, {}
    else:
        agent_id, version = agent["id"], agent.get("version")
        overrides = {k: v for k, v in agent.items() if k not in ("id", "type", "version")}
    check_version("agent.version", version)
    check_length("title", params.get("title"), high=512)
    check_metadata("metadata", params.get("metadata", {}))
    given = list(params.get("resources", []))
    file_mounts, memory_mounts, found = resources.parse_create(given)
    vault_ids = list(params.get("vault_ids", []))
    if len(vault_ids) > MAX_VAULTS:
        raise RequestError(f"vault_ids: at most {MAX_VAULTS} vaults")
    for i, vault_id in enumerate(vault_ids):
        if not vault_id.startswith("vlt_") or len(vault_id) > 128:
            raise RequestError(f"vault_ids.{i}: {vault_id[:80]!r} is not a vault id (vlt_...)")
        if vault_id in vault_ids[:i]:
            raise RequestError(f"vault_ids.{i}: {vault_id} is given twice")
    initial = list(params.get("initial_events", []))
    if len(initial) > MAX_INITIAL_EVENTS:
        raise RequestError(
            f"initial_events: at most {MAX_INITIAL_EVENTS} events, got {len(initial)}"
        )
    return SessionCreate(
        agent_id=agent_id,
        agent_version=version,
        overrides=overrides,
        environment_id=params["environment_id"],
        fields={
            "title": params.get("title"),
            "metadata": dict(params.get("metadata", {})),
            "vault_ids": vault_ids,
            "budget": _budget(params.get("budget")),
            "resources": [],
        },
        initial_events=initial,
        file_mounts=file_mounts,
        memory_mounts=memory_mounts,
        repositories=found,
        resource_types=[str(item["type"]) for item in given],
    )


def check_budgetable(budget: Json | None, model: str, priced: bool) -> None:
    """A budget needs a list price for every model the session can call (spec §2.4)."""
    if budget is not None and not priced:
        raise RequestError(
            f"budget: model {model!r} has no list price, so a budget cannot be tracked; "
            "the operator can price it with STEAD_MODEL_PRICES",
            code="model_not_budgetable",
        )


def snapshot(agent_id: str, version: int, definition: Json, overrides: Json) -> Json:
    """The session's frozen copy of an agent version, with overrides applied."""
    check_length("agent.system", overrides.get("system"), high=agents.SYSTEM_CHARS)
    servers = definition["mcp_servers"]
    if "mcp_servers" in overrides:
        servers = agents.resolve_mcp_servers(list(overrides["mcp_servers"]), "agent.mcp_servers")
    tools = definition["tools"]
    if "tools" in overrides:
        tools = agents.resolve_tools(list(overrides["tools"]), servers, "agent.tools")
    elif "mcp_servers" in overrides:
        agents.resolve_tools(tools, servers, "agent.tools")
    return {
        "id": agent_id,
        "type": "agent",
        "version": version,
        "name": definition["name"],
        "description": definition["description"],
        "system": overrides.get("system", definition["system"]),
        "model": agents.resolve_model(overrides["model"], definition["model"], "agent.model")
        if "model" in overrides
        else definition["model"],
        "tools": tools,
        "mcp_servers": servers,
        "skills": agents.resolve_skills(list(overrides["skills"]), "agent.skills")
        if "skills" in overrides
        else definition["skills"],
        "multiagent": None,
        "execution_identity": definition["execution_identity"],
    }


def parse_update(body: Any) -> Json:
    params = UPDATE.validate(body)
    if "vault_ids" in params:
        raise RequestError(
            "vault_ids: vaults are attached when a session is created and cannot change"
        )
    check_length("title", params.get("title"), high=512)
    if "budget" in params:
        params["budget"] = _budget(params["budget"])
    return params


def apply_update(current: Json, params: Json) -> Json:
    """Changed column values (agent, budget, metadata, title) from the current ones
    (``current`` also holds ``usage``, which a new budget must stay above)."""
    values: Json = {}
    if "title" in params:
        values["title"] = params["title"]
    if "metadata" in params:
        values["metadata"] = patch_metadata("metadata", current["metadata"], params["metadata"])
    if "budget" in params:
        if current["budget"] is None and params["budget"] is not None:
            raise RequestError(
                "budget: a budget can only be set when the session is created",
                code="budget_create_only",
            )
        cap = accounting.cap_nanos(params["budget"])
        spent = int(current["usage"].get("list_cost_nanos") or 0)
        if cap is not None and cap <= spent:
            raise RequestError(
                f"budget: the session has already spent ${accounting.cents(spent) / 100:.2f}; "
                "a budget must be above what it spent",
                code="budget_not_raised",
            )
        values["budget"] = params["budget"]
    change = params.get("agent")
    if change:
        agent = dict(current["agent"])
        if "mcp_servers" in change:
            agent["mcp_servers"] = agents.resolve_mcp_servers(
                list(change["mcp_servers"] or []), "agent.mcp_servers"
            )
        if "tools" in change:
            agent["tools"] = agents.resolve_tools(
                list(change["tools"] or []), agent["mcp_servers"], "agent.tools"
            )
        else:
            agents.resolve_tools(agent["tools"], agent["mcp_servers"], "agent.tools")
        values["agent"] = agent
    return values
