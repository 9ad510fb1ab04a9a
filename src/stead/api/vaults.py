"""/v1/vaults and their credentials: create, retrieve, update, list, archive, delete.

Secrets are sealed here, before the store sees them, bound to the credential's
id; responses carry ``auth`` without them. ``mcp_oauth_validate`` is in
``api/credential_checks.py``.
"""

from __future__ import annotations

from datetime import UTC, datetime

from fastapi import APIRouter, Depends, Query, Request

from stead.api import openapi, pagination, wire
from stead.api.body import json_body
from stead.api.deps import Caller, caller, services
from stead.api.params import CredentialId, VaultId
from stead.api.wire import JSONResponse
from stead.ids import new_id
from stead.schemas import vaults
from stead.store import CredentialRecord, VaultRecord

router = APIRouter(prefix="/v1/vaults", tags=["vaults"])
VAULT = openapi.response("beta.BetaManagedAgentsVault")
CREDENTIAL = openapi.response("beta.vaults.BetaManagedAgentsCredential")
CREDENTIAL_OR_CONFLICT = openapi.response("beta.vaults.BetaManagedAgentsCredential", 409)


@router.post("", responses=VAULT, openapi_extra=openapi.body("VaultCreateParams"))
async def create_vault(request: Request, who: Caller = Depends(caller)) -> JSONResponse:
    fields = vaults.parse_vault_create(await json_body(request))
    record = await services(request).store.create_vault(who.workspace_id, **fields)
    return JSONResponse(wire.vault(record))


@router.get("/{vault_id}", responses=VAULT)
async def retrieve_vault(
    request: Request, vault_id: VaultId, who: Caller = Depends(caller)
) -> JSONResponse:
    record = await services(request).store.get_vault(who.workspace_id, vault_id)
    return JSONResponse(wire.vault(record))


@router.post("/{vault_id}", responses=VAULT, openapi_extra=openapi.body("VaultUpdateParams"))
async def update_vault(
    request: Request, vault_id: VaultId, who: Caller = Depends(caller)
) -> JSONResponse:
    params = vaults.parse_vault_update(await json_body(request))

    def change(current: VaultRecord) -> dict[str, object]:
        return vaults.apply_named_update(current.metadata, params)

    record = await services(request).store.update_vault(who.workspace_id, vault_id, change)
    return JSONResponse(wire.vault(record))


@router.post("/{vault_id}/archive", responses=VAULT)
async def archive_vault(
    request: Request, vault_id: VaultId, who: Caller = Depends(caller)
) -> JSONResponse:
    app = services(request)
    record = await app.store.archive_vault(who.workspace_id, vault_id)
    await app.runtime.vault_changed(vault_id)
    return JSONResponse(wire.vault(record))


@router.delete("/{vault_id}", responses=openapi.response("beta.BetaManagedAgentsDeletedVault"))
async def delete_vault(
    request: Request, vault_id: VaultId, who: Caller = Depends(caller)
) -> JSONResponse:
    app = services(request)
    await app.store.delete_vault(who.workspace_id, vault_id)
    await app.runtime.vault_changed(vault_id)
    return JSONResponse({"id": vault_id, "type": "vault_deleted"})


@router.get("")
async def list_vaults(
    request: Request,
    limit: int = Query(20, ge=1, le=100),
    page: str | None = Query(None),
    include_archived: bool = Query(False),
    who: Caller = Depends(caller),
) -> JSONResponse:
    store = services(request).store
    return JSONResponse(
        await pagination.newest_first(
            request,
            who,
            "vaults",
            limit,
            page,
            lambda at: store.list_vaults(who.workspace_id, at, include_archived),
            wire.vault,
        )
    )


@router.post(
    "/{vault_id}/credentials",
    responses=CREDENTIAL_OR_CONFLICT,
    openapi_extra=openapi.body("CredentialCreateParams"),
)
async def create_credential(
    request: Request, vault_id: VaultId, who: Caller = Depends(caller)
) -> JSONResponse:
    app = services(request)
    given = vaults.parse_credential_create(await json_body(request), datetime.now(UTC))
    credential_id = new_id("credential")
    record = await app.store.create_credential(
        who.workspace_id,
        vault_id,
        credential_id,
        given.display_name,
        given.metadata,
        given.auth,
        app.secrets.seal(credential_id, given.secret),
    )
    await app.runtime.vault_changed(vault_id)
    return JSONResponse(wire.credential(record))


@router.get("/{vault_id}/credentials/{credential_id}", responses=CREDENTIAL)
async def retrieve_credential(
    request: Request, vault_id: VaultId, credential_id: CredentialId, who: Caller = Depends(caller)
) -> JSONResponse:
    store = services(request).store
    record = await store.get_credential(who.workspace_id, vault_id, credential_id)
    return JSONResponse(wire.credential(record))


@router.post(
    "/{vault_id}/credentials/{credential_id}",
    responses=CREDENTIAL_OR_CONFLICT,
    openapi_extra=openapi.body("CredentialUpdateParams"),
)
async def update_credential(
    request: Request, vault_id: VaultId, credential_id: CredentialId, who: Caller = Depends(caller)
) -> JSONResponse:
    app = services(request)
    params = vaults.parse_credential_update(await json_body(request))
    now = datetime.now(UTC)

    def change(current: CredentialRecord) -> dict[str, object]:
        values = vaults.apply_named_update(current.metadata, params)
        if "auth" in params:
            secret = app.secrets.open(current.id, current.sealed)
            auth, new_secret = vaults.apply_auth_update(current.auth, secret, params["auth"], now)
            values["auth"] = auth
            if new_secret != secret:
                values["sealed"] = app.secrets.seal(current.id, new_secret)
        return values

    record = await app.store.update_credential(who.workspace_id, vault_id, credential_id, change)
    if "auth" in params:  # a new name or metadata changes nothing a sandbox holds
        await app.runtime.vault_changed(vault_id)
    return JSONResponse(wire.credential(record))


@router.post("/{vault_id}/credentials/{credential_id}/archive", responses=CREDENTIAL)
async def archive_credential(
    request: Request, vault_id: VaultId, credential_id: CredentialId, who: Caller = Depends(caller)
) -> JSONResponse:
    app = services(request)
    record = await app.store.archive_credential(who.workspace_id, vault_id, credential_id)
    await app.runtime.vault_changed(vault_id)
    return JSONResponse(wire.credential(record))


@router.delete(
    "/{vault_id}/credentials/{credential_id}",
    responses=openapi.response("beta.vaults.BetaManagedAgentsDeletedCredential"),
)
async def delete_credential(
    request: Request, vault_id: VaultId, credential_id: CredentialId, who: Caller = Depends(caller)
) -> JSONResponse:
    app = services(request)
    await app.store.delete_credential(who.workspace_id, vault_id, credential_id)
    await app.runtime.vault_changed(vault_id)
    return JSONResponse({"id": credential_id, "type": "vault_credential_deleted"})


@router.get("/{vault_id}/credentials")
async def list_credentials(
    request: Request,
    vault_id: VaultId,
    limit: int = Query(20, ge=1, le=100),
    page: str | None = Query(None),
    include_archived: bool = Query(False),
    who: Caller = Depends(caller),
) -> JSONResponse:
    store = services(request).store
    return JSONResponse(
        await pagination.newest_first(
            request,
            who,
            f"credentials:{vault_id}",
            limit,
            page,
            lambda at: store.list_credentials(who.workspace_id, vault_id, at, include_archived),
            wire.credential,
        )
    )
