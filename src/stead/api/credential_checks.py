"""``POST /v1/vaults/{id}/credentials/{id}/mcp_oauth_validate``: probe the
credential's MCP server (``initialize``, ``tools/list``) with its token and, on
a 401, try the refresh the credential holds, as the spec says.

A refresh that succeeds is written back (sealed), so the next session uses the
new token; the refresh token it used must still be the stored one, or another
refresh won meanwhile and its tokens are kept. The write-back never claims the
request's ``Idempotency-Key``: a retry replaying an earlier answer keeps it too.
The exchange is the sessions' own (``McpTokens.checked_exchange``): recorded as
under way first, so an answer lost with this process is known for one, and a
refresh token that may have been spent so is not presented (``invalid``, no
refresh attempted: the credential needs new tokens).
"""

from __future__ import annotations

from datetime import UTC, datetime
from types import ModuleType
from typing import TYPE_CHECKING, Any

from fastapi import APIRouter, Depends, Request

from stead.api import openapi
from stead.api.deps import Caller, Services, caller, services
from stead.api.params import CredentialId, VaultId
from stead.api.wire import JSONResponse, ts
from stead.jsonvalues import Json
from stead.runtime import (
    RefreshInDoubt,
    RefreshMoved,
    RefreshUnderWay,
    load_mcp,
    write_back_grant,
)
from stead.schemas import RequestError
from stead.store import CredentialRecord, not_claiming

if TYPE_CHECKING:
    from stead.tools.mcp import EgressRules, HttpResponse, McpFailed

router = APIRouter(prefix="/v1/vaults", tags=["vaults"])
PROBED = ("mcp_oauth", "static_bearer")


def _http(response: HttpResponse | None, secrets: list[str]) -> Json | None:
    if response is None:
        return None
    shown = response.redacted(secrets)
    return {
        "status_code": shown.status_code,
        "content_type": shown.content_type,
        "body": shown.body,
        "body_truncated": shown.body_truncated,
    }


def _probe_failure(failure: McpFailed, secrets: list[str]) -> Json:
    return {"method": failure.method, "http_response": _http(failure.http, secrets)}


@router.post(
    "/{vault_id}/credentials/{credential_id}/mcp_oauth_validate",
    responses=openapi.response("beta.vaults.BetaManagedAgentsCredentialValidation"),
)
async def validate_credential(
    request: Request, vault_id: VaultId, credential_id: CredentialId, who: Caller = Depends(caller)
) -> JSONResponse:
    app = services(request)
    credential = await app.store.get_credential(who.workspace_id, vault_id, credential_id)
    kind = credential.auth["type"]
    if kind not in PROBED:
        raise RequestError(
            f"credential {credential_id} is {kind}: only mcp_oauth and static_bearer "
            "credentials have an MCP server to validate against"
        )
    secret = app.secrets.open(credential.id, credential.sealed)
    secrets = [v for v in secret.values() if isinstance(v, str)]
    token = secret.get("access_token") or secret.get("token") or ""
    timeout = app.settings.mcp_timeout_seconds
    url = credential.auth["mcp_server_url"]
    result: dict[str, Any] = {"status": "valid", "mcp_probe": None, "refresh": None}
    mcp = await load_mcp()
    # No session, so no environment: the blocklist alone, as for a token endpoint.
    rules = app.runtime.mcp.egress.rules(mcp)
    try:
        await mcp.list_tools(url, token, timeout, rules)
    except mcp.McpFailed as failure:
        result.update(status="unknown", mcp_probe=_probe_failure(failure, secrets))
        if failure.unauthorized:
            refreshed = await _refresh_and_retry(mcp, app, rules, credential, secret, secrets)
            result.update(refreshed)
    body = {
        "type": "vault_credential_validation",
        "credential_id": credential.id,
        "vault_id": credential.vault_id,
        "has_refresh_token": "refresh_token" in secret,
        "validated_at": ts(datetime.now(UTC)),
        **result,
    }
    return JSONResponse(body)


async def _refresh_and_retry(
    mcp: ModuleType,
    app: Services,
    rules: EgressRules,
    credential: CredentialRecord,
    secret: Json,
    secrets: list[str],
) -> Json:
    """After a 401: the verdict, the refresh's outcome and the probe's (again)."""
    if credential.auth.get("refresh") is None or "refresh_token" not in secret:
        return {"status": "invalid", "refresh": {"status": "no_refresh_token"}}
    timeout = app.settings.mcp_timeout_seconds
    try:
        # Its record of the exchange is no write of the request's either: a
        # retry replaying an earlier answer must not undo it.
        with not_claiming():
            grant = await app.runtime.mcp.tokens.checked_exchange(mcp, credential, secret)
    except RefreshInDoubt:
        return {"status": "invalid", "refresh": None}
    except (RefreshUnderWay, RefreshMoved):  # another refresh's tokens come (or came)
        return {"status": "unknown", "refresh": None}
    except mcp.RefreshFailed as failed:
        verdict = "invalid" if failed.status == "failed" else "unknown"
        return {
            "status": verdict,
            "refresh": {"status": failed.status, "http_response": _http(failed.http, secrets)},
        }
    # The upstream has spent the old refresh token: the new grant is kept even
    # when this is a retry whose Idempotency-Key replays an earlier answer.
    with not_claiming():
        await write_back_grant(app.store, app.secrets, credential, secret["refresh_token"], grant)
    outcome: Json = {"status": "valid", "mcp_probe": None, "refresh": {"status": "succeeded"}}
    try:
        url = credential.auth["mcp_server_url"]
        await mcp.list_tools(url, grant.access_token, timeout, rules)
    except mcp.McpFailed as failure:
        shown = [*secrets, grant.access_token, grant.refresh_token or ""]
        outcome["status"] = "invalid" if failure.unauthorized else "unknown"
        outcome["mcp_probe"] = _probe_failure(failure, shown)
    return outcome
