"""Environment configuration: request params -> resolved (wire) form."""

from __future__ import annotations

import ipaddress
from typing import Any

from stead.jsonvalues import Json
from stead.package_specs import PACKAGE_MANAGERS, packages_problem, specs_problem
from stead.schemas.limits import HOST_NAME, check_length, check_metadata, patch_metadata
from stead.schemas.validation import RequestError, StrictParams

CREATE = StrictParams("environment_create")
UPDATE = StrictParams("environment_update")

MAX_ALLOWED_HOSTS = 256


LIMITED_DEFAULTS: Json = {
    "type": "limited",
    "allowed_hosts": [],
    "allow_mcp_servers": False,
    "allow_package_managers": False,
}


def _networking(value: Json | None, field: str, current: Json | None = None) -> Json:
    """``value`` resolved; on an update, a ``limited`` field that is omitted or
    null keeps its ``current`` value (as ``packages`` do), when that is limited too."""
    if value is None or value["type"] == "unrestricted":
        return {"type": "unrestricted"}
    base = current if current is not None and current["type"] == "limited" else LIMITED_DEFAULTS
    given = {k: v for k, v in value.items() if v is not None}
    hosts: list[str] = list(
        given["allowed_hosts"] if "allowed_hosts" in given else base["allowed_hosts"]
    )
    if len(hosts) > MAX_ALLOWED_HOSTS:
        raise RequestError(f"{field}.allowed_hosts: at most {MAX_ALLOWED_HOSTS} hosts")
    for i, host in enumerate(hosts):
        if not _allowed_host(host):
            raise RequestError(f"{field}.allowed_hosts.{i}: {host!r} is not a host name or address")
    return {
        "type": "limited",
        "allowed_hosts": hosts,
        "allow_mcp_servers": bool(given.get("allow_mcp_servers", base["allow_mcp_servers"])),
        "allow_package_managers": bool(
            given.get("allow_package_managers", base["allow_package_managers"])
        ),
    }


def _allowed_host(host: str) -> bool:
    """A host name, a ``*.`` wildcard or an IP address; IPv6 with or without
    brackets (the egress proxy compares addresses in canonical form), without a
    zone, which names an interface of the machine, not a host."""
    if HOST_NAME.match(host):
        return len(host) <= 253
    literal = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    try:
        address = ipaddress.ip_address(literal)
    except ValueError:
        return False
    return address.version == 6 and "%" not in literal


def _packages(value: Json | None, current: Json | None = None) -> Json:
    base = current or {k: [] for k in PACKAGE_MANAGERS}
    given = value or {}
    resolved: Json = {"type": "packages"}
    for manager in PACKAGE_MANAGERS:
        chosen = given.get(manager)
        if chosen is None:
            resolved[manager] = list(base[manager])
            continue
        resolved[manager] = list(chosen)
        for i, spec in enumerate(chosen):
            check_length(f"config.packages.{manager}.{i}", spec, low=1, high=512)
    # Refused here, not at the sandbox's first wake: the host would refuse it
    # there too, after the caller was told it was accepted. The specs kept from
    # before were checked when they were given; the list's length is of all.
    given_now = {m: resolved[m] for m in PACKAGE_MANAGERS if given.get(m) is not None}
    listed = {m: resolved[m] for m in PACKAGE_MANAGERS}
    if problem := packages_problem(given_now) or specs_problem(listed):
        raise RequestError(f"config.{problem}")
    return resolved


def _cloud(networking: Json, packages: Json) -> Json:
    """A cloud config of ``networking`` and ``packages`` (both resolved), refused
    when ``limited`` networking would not let its packages' registries be used:
    the SDK's rule (``packages`` under ``limited`` require
    ``allow_package_managers``), on the whole config an update leaves."""
    listed = any(packages[manager] for manager in PACKAGE_MANAGERS)
    if listed and networking["type"] == "limited" and not networking["allow_package_managers"]:
        raise RequestError(
            "config.networking.allow_package_managers: must be true when config.packages"
            " lists packages under limited networking"
        )
    return {"type": "cloud", "networking": networking, "packages": packages}


def resolve_config(config: Json | None) -> Json:
    if config is None:
        config = {"type": "cloud"}
    if config["type"] == "self_hosted":
        return {"type": "self_hosted"}
    return _cloud(
        _networking(config.get("networking"), "config.networking"),
        _packages(config.get("packages")),
    )


def merge_config(current: Json, change: Json | None) -> Json:
    if change is None:
        return current
    if change["type"] != current["type"]:
        raise RequestError(
            f"config.type: cannot change an environment from {current['type']} "
            f"to {change['type']}; create a new environment",
            code="invalid_config_type_change",
        )
    if change["type"] == "self_hosted":
        return current
    networking = current["networking"]
    if "networking" in change:
        networking = _networking(change["networking"], "config.networking", networking)
    packages = current["packages"]
    if "packages" in change:
        packages = _packages(change["packages"], None if change["packages"] is None else packages)
    return _cloud(networking, packages)


def parse_create(body: Any) -> Json:
    params = CREATE.validate(body)
    _check_scope(params.get("scope"))
    check_length("name", params["name"], low=1, high=255)
    check_length("description", params.get("description"), high=2048)
    check_metadata("metadata", params.get("metadata", {}))
    return {
        "name": params["name"],
        "description": params.get("description"),
        "config": resolve_config(params.get("config")),
        "metadata": dict(params.get("metadata", {})),
        "scope": params.get("scope"),
    }


def _check_scope(scope: str | None) -> None:
    """One installation is one organization: there is no account scope."""
    if scope is not None and scope != "organization":
        raise RequestError(f"scope: {scope!r} is not supported; stead has only 'organization'")


def parse_update(body: Any) -> Json:
    params = UPDATE.validate(body)
    _check_scope(params.get("scope"))
    if "name" in params:
        if params["name"] is None:
            raise RequestError("name: cannot be cleared")
        check_length("name", params["name"], low=1, high=255)
    check_length("description", params.get("description"), high=2048)
    return params


def apply_update(current: Json, params: Json) -> Json:
    """Changed column values, given the current ones (name, description, config, ...)."""
    values: Json = {key: params[key] for key in ("name", "description", "scope") if key in params}
    if "config" in params:
        values["config"] = merge_config(current["config"], params["config"])
    if "metadata" in params:
        values["metadata"] = patch_metadata(
            "metadata", current["metadata"], params["metadata"], empty_deletes=True
        )
    return values
