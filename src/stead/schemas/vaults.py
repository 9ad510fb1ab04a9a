"""Vaults and credentials: request params -> stored form, split into what may be
shown (``auth`` as the API returns it) and what is sealed (the secret fields).

Secrets are write-only: nothing here returns them in a message. An error about
a secret field names the field, never its value.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from stead.jsonvalues import Json
from stead.sandbox_variables import HOST_SET_VARIABLES
from stead.schemas.limits import (
    HOST_NAME,
    MAX_URL_CHARS,
    check_http_url,
    check_length,
    check_metadata,
    patch_metadata,
)
from stead.schemas.validation import RequestError, StrictParams

VAULT_CREATE = StrictParams("vault_create")
VAULT_UPDATE = StrictParams("vault_update")
CREDENTIAL_CREATE = StrictParams("credential_create")
CREDENTIAL_UPDATE = StrictParams("credential_update")

MAX_SECRET_CHARS = 65536
MAX_ALLOWED_HOSTS = 16
SECRET_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,255}$")
SECRET_FIELDS = {
    "mcp_oauth": ("access_token", "refresh_token", "client_secret"),
    "static_bearer": ("token",),
    "environment_variable": ("secret_value",),
}
"""What each auth type seals; everything else in ``auth`` is shown."""
DEFAULT_INJECTION: Json = {"header": True, "body": False}


@dataclass(frozen=True)
class CredentialInput:
    """A credential as stored: ``auth`` is what the API shows, ``secret`` is sealed."""

    display_name: str | None
    metadata: dict[str, str]
    auth: Json
    secret: Json

    def __repr__(self) -> str:  # a traceback must not carry the secret
        return f"CredentialInput(auth={self.auth!r}, secret=<hidden>)"


def parse_vault_create(body: Any) -> Json:
    params = VAULT_CREATE.validate(body)
    check_length("display_name", params["display_name"], low=1, high=255)
    check_metadata("metadata", params.get("metadata", {}))
    return {"display_name": params["display_name"], "metadata": dict(params.get("metadata", {}))}


def parse_vault_update(body: Any) -> Json:
    params = VAULT_UPDATE.validate(body)
    if "display_name" in params:
        if params["display_name"] is None:
            raise RequestError("display_name: cannot be cleared")
        check_length("display_name", params["display_name"], low=1, high=255)
    return params


def apply_named_update(current_metadata: dict[str, str], params: Json) -> Json:
    """The changed ``display_name`` and ``metadata`` of a vault or a credential."""
    values: Json = {}
    if "display_name" in params:
        values["display_name"] = params["display_name"]
    if "metadata" in params:
        values["metadata"] = patch_metadata("metadata", current_metadata, params["metadata"])
    return values


def _secret(field: str, value: Any) -> str:
    if not isinstance(value, str) or not value:
        raise RequestError(f"{field}: must not be empty")
    if len(value) > MAX_SECRET_CHARS:
        raise RequestError(f"{field}: must be at most {MAX_SECRET_CHARS} characters")
    return value


def _bearer(field: str, value: Any) -> str:
    """A token sent as ``Authorization: Bearer <token>``: printable ASCII only,
    or no request could carry it (the error names the field, not the value)."""
    token = _secret(field, value)
    if not all(" " <= c <= "~" for c in token):
        raise RequestError(
            f"{field}: must be printable ASCII (it is sent in an Authorization header)"
        )
    return token


def _url(field: str, value: str) -> str:
    return check_http_url(field, value)


def _future(field: str, value: Any, now: datetime) -> str | None:
    if value is None:
        return None
    if isinstance(value, str):
        try:
            value = datetime.fromisoformat(value)
        except ValueError:
            raise RequestError(f"{field}: not an RFC 3339 time") from None
    if not isinstance(value, datetime):
        raise RequestError(f"{field}: not an RFC 3339 time")
    try:
        moment = value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)
    except OverflowError:
        raise RequestError(f"{field}: outside the years 1 to 9999 once converted to UTC") from None
    if moment <= now:
        raise RequestError(f"{field}: must be in the future")
    return moment.isoformat().replace("+00:00", "Z")


def _allowed_host(field: str, host: str) -> str:
    if len(host) > 253:
        raise RequestError(f"{field}: longer than a host name can be")
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        address = None
    if address is not None:
        if address.version != 4:
            raise RequestError(f"{field}: IPv6 addresses are not accepted")
        return host
    if not HOST_NAME.match(host):
        raise RequestError(
            f"{field}: {host[:80]!r} is not a bare host name, an IPv4 address or a *. wildcard "
            "(no scheme, port or path)"
        )
    return host.lower()


def _networking(field: str, value: Json) -> Json:
    if value["type"] == "unrestricted":
        return {"type": "unrestricted"}
    hosts = list(value["allowed_hosts"])
    if not hosts:
        raise RequestError(f"{field}.allowed_hosts: name at least one host")
    if len(hosts) > MAX_ALLOWED_HOSTS:
        raise RequestError(f"{field}.allowed_hosts: at most {MAX_ALLOWED_HOSTS} hosts")
    checked = [_allowed_host(f"{field}.allowed_hosts.{i}", h) for i, h in enumerate(hosts)]
    return {"type": "limited", "allowed_hosts": checked}


def _injection(field: str, given: Json | None, current: Json) -> Json:
    merged = dict(current)
    for key in ("header", "body"):
        if given is not None and given.get(key) is not None:
            merged[key] = bool(given[key])
    if not (merged["header"] or merged["body"]):
        raise RequestError(f"{field}: at least one of header and body must be true")
    return merged


def _token_endpoint_auth(field: str, value: Json) -> tuple[Json, Json]:
    kind = value["type"]
    if kind == "none":
        return {"type": "none"}, {}
    return {"type": kind}, {
        "client_secret": _secret(f"{field}.client_secret", value["client_secret"])
    }


def _refresh(field: str, value: Json) -> tuple[Json, Json]:
    check_length(f"{field}.client_id", value["client_id"], low=1, high=512)
    endpoint_auth, secret = _token_endpoint_auth(
        f"{field}.token_endpoint_auth", value["token_endpoint_auth"]
    )
    shown: Json = {
        "client_id": value["client_id"],
        "token_endpoint": _url(f"{field}.token_endpoint", value["token_endpoint"]),
        "token_endpoint_auth": endpoint_auth,
        "resource": value.get("resource"),
        "scope": value.get("scope") or None,
    }
    check_length(f"{field}.resource", shown["resource"], high=MAX_URL_CHARS)
    check_length(f"{field}.scope", shown["scope"], high=2048)
    secret["refresh_token"] = _secret(f"{field}.refresh_token", value["refresh_token"])
    return shown, secret


def _auth_create(auth: Json, now: datetime) -> tuple[Json, Json]:
    kind = auth["type"]
    if kind == "static_bearer":
        url = _url("auth.mcp_server_url", auth["mcp_server_url"])
        return {"type": kind, "mcp_server_url": url}, {
            "token": _bearer("auth.token", auth["token"])
        }
    if kind == "mcp_oauth":
        shown: Json = {
            "type": kind,
            "mcp_server_url": _url("auth.mcp_server_url", auth["mcp_server_url"]),
            "expires_at": _future("auth.expires_at", auth.get("expires_at"), now),
            "refresh": None,
        }
        secret: Json = {"access_token": _bearer("auth.access_token", auth["access_token"])}
        if auth.get("refresh") is not None:
            shown["refresh"], refresh_secret = _refresh("auth.refresh", auth["refresh"])
            secret.update(refresh_secret)
        return shown, secret
    name = auth["secret_name"]
    if not SECRET_NAME.match(name):
        raise RequestError(
            "auth.secret_name: must be an environment variable name (letters, digits and _, "
            "not starting with a digit, at most 256)"
        )
    if name in HOST_SET_VARIABLES or name.startswith("STEAD_"):
        raise RequestError(f"auth.secret_name: {name} is set by the sandbox itself")
    shown = {
        "type": kind,
        "secret_name": name,
        "networking": _networking("auth.networking", auth["networking"]),
        "injection_location": _injection(
            "auth.injection_location", auth.get("injection_location"), DEFAULT_INJECTION
        ),
    }
    return shown, {"secret_value": _secret("auth.secret_value", auth["secret_value"])}


def parse_credential_create(body: Any, now: datetime) -> CredentialInput:
    params = CREDENTIAL_CREATE.validate(body)
    check_length("display_name", params.get("display_name"), high=255)
    check_metadata("metadata", params.get("metadata", {}))
    auth, secret = _auth_create(params["auth"], now)
    return CredentialInput(
        display_name=params.get("display_name"),
        metadata=dict(params.get("metadata", {})),
        auth=auth,
        secret=secret,
    )


def parse_credential_update(body: Any) -> Json:
    params = CREDENTIAL_UPDATE.validate(body)
    if "display_name" in params and params["display_name"] is not None:
        check_length("display_name", params["display_name"], low=1, high=255)
    return params


def _update_oauth(auth: Json, secret: Json, change: Json, now: datetime) -> None:
    if "access_token" in change:
        secret["access_token"] = _bearer("auth.access_token", change["access_token"])
    if "expires_at" in change:
        auth["expires_at"] = _future("auth.expires_at", change["expires_at"], now)
    if "refresh" not in change:
        return
    refresh = change["refresh"]
    if refresh is None:
        auth["refresh"] = None
        for key in ("refresh_token", "client_secret"):
            secret.pop(key, None)
        return
    if auth.get("refresh") is None:
        raise RequestError(
            "auth.refresh: this credential has no refresh configuration to update; "
            "create a new credential with refresh settings"
        )
    shown = dict(auth["refresh"])
    if "refresh_token" in refresh:
        secret["refresh_token"] = _secret("auth.refresh.refresh_token", refresh["refresh_token"])
    if "scope" in refresh:
        check_length("auth.refresh.scope", refresh["scope"], high=2048)
        shown["scope"] = refresh["scope"] or None
    if "token_endpoint_auth" in refresh:
        if shown["token_endpoint_auth"]["type"] == "none":
            raise RequestError(
                "auth.refresh.token_endpoint_auth: the credential uses no client secret; "
                "only client_secret_basic or client_secret_post credentials take one"
            )
        given = refresh["token_endpoint_auth"].get("client_secret")
        if given is not None:
            field = "auth.refresh.token_endpoint_auth.client_secret"
            secret["client_secret"] = _secret(field, given)
    auth["refresh"] = shown


def apply_auth_update(
    auth: Json, secret: Json, change: Json | None, now: datetime
) -> tuple[Json, Json]:
    """(auth, secret) after an update's ``auth``, given the current ones."""
    if change is None:
        raise RequestError("auth: cannot be cleared")
    auth, secret = dict(auth), dict(secret)
    if change["type"] != auth["type"]:
        raise RequestError(
            f"auth.type: this credential is {auth['type']}; its type cannot change to "
            f"{change['type']} (create a new credential)"
        )
    if change["type"] == "static_bearer":
        if "token" in change:
            secret["token"] = _bearer("auth.token", change["token"])
    elif change["type"] == "mcp_oauth":
        _update_oauth(auth, secret, change, now)
    else:
        if "secret_value" in change:
            secret["secret_value"] = _secret("auth.secret_value", change["secret_value"])
        if "networking" in change:
            if change["networking"] is None:
                raise RequestError("auth.networking: cannot be cleared")
            auth["networking"] = _networking("auth.networking", change["networking"])
        if "injection_location" in change:
            auth["injection_location"] = _injection(
                "auth.injection_location", change["injection_location"], auth["injection_location"]
            )
    return auth, secret
