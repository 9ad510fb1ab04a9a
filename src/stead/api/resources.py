"""/v1/sessions/{id}/resources: add, list, retrieve, update, delete; and the
``resources`` of a session create.

A ``file`` resource mounts an uploaded file read-only in the session's sandbox
(``runtime.mounts``). The file is checked in the workspace (unknown, another
workspace's and deleted files are a 404 naming the field) in the transaction
that stores the resource; the sandbox gets it before its next use.

A ``github_repository`` resource (at create, or added in create's shape) is
cloned at the next run's first sandbox tool call. Its token is sealed here,
bound to the resource id, before the store sees it; it is never returned. An
update replaces it and a delete drops it, and the session's sandbox gets its
new credentials at once (``Runtime.repository_tokens_changed``), wherever it
is served.

A ``memory_store`` resource is given at create only (``resources.add`` does not
take one, as the SDK's params say) and stays for the session's life: it
mounts the store at ``/mnt/memory/<slug>`` (``runtime.memory_mounts``). The
store is checked here for its name, and again in the transaction that creates
the session (unknown or another workspace's: 404, archived: 400, naming the field).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated

from fastapi import APIRouter, Depends, Path, Query, Request

from stead.api import openapi, pagination, wire
from stead.api.body import json_body
from stead.api.deps import Caller, Services, caller, services
from stead.api.params import ID_PATTERN, SessionId
from stead.api.wire import JSONResponse
from stead.ids import new_id
from stead.jsonvalues import Json
from stead.schemas import RequestError, repositories, resources
from stead.store import NotFound, Page, PageRequest

router = APIRouter(prefix="/v1/sessions/{session_id}/resources", tags=["sessions"])
RESOURCE = openapi.response("beta.sessions.BetaManagedAgentsFileResource", 409)
ANY_RESOURCE = openapi.response("beta.sessions.BetaManagedAgentsSessionResource")
DELETED = openapi.response("beta.sessions.BetaManagedAgentsDeleteSessionResource")
SessionResourceId = Annotated[str, Path(pattern=ID_PATTERN)]
KEY_TYPES: tuple[type, ...] = (str, str)
"""A resource's (created_at, id), the order resources are listed in."""


async def _check_sandbox(
    app: Services, workspace_id: str, environment_id: str, field: str, kind: str, what: str
) -> None:
    """Resources of ``kind`` (which ``what`` in the sandbox) reach this
    environment's sandboxes."""
    if not app.sandboxes.mounts_supported:
        raise RequestError(
            f"{field}: this stead server's sandbox provider ({app.settings.sandbox}) "
            f"cannot {what}; {kind} resources need STEAD_SANDBOX=bwrap"
        )
    environment = await app.store.get_environment(workspace_id, environment_id)
    if environment.config.get("type") == "self_hosted":
        raise RequestError(
            f"{field}: environment {environment_id} is self-hosted (its workers supply "
            f"the sandbox), so stead cannot {what} there"
        )


async def check_repositories(
    app: Services,
    workspace_id: str,
    environment_id: str,
    found: list[repositories.RepositoryMount],
    field: str = "resources",
) -> tuple[list[Json], dict[str, bytes | None]]:
    """The stored shapes of repository resources, and each one's token sealed
    to its resource id (None: it has none)."""
    if not found:
        return [], {}
    await _check_sandbox(
        app, workspace_id, environment_id, field, repositories.TYPE, "clone repositories"
    )
    now = wire.ts(datetime.now(UTC))
    assert now is not None
    made, tokens = [], {}
    for mount in found:
        resource_id = new_id("session_resource")
        made.append(repositories.resource(resource_id, mount, now))
        tokens[resource_id] = None if mount.token is None else _seal(app, resource_id, mount.token)
    return made, tokens


def _seal(app: Services, resource_id: str, token: str) -> bytes:
    return app.secrets.seal(resource_id, {"authorization_token": token})


async def check_file_mounts(
    app: Services,
    workspace_id: str,
    environment_id: str,
    mounts: list[resources.FileMount],
    prefix: str,
) -> list[Json]:
    """The stored shapes of ``mounts`` once this server can mount files in the
    environment's sandboxes and every file is a visible file of the workspace
    that is small enough."""
    if not mounts:
        return []
    field = prefix.rstrip(".") or "type"
    await _check_sandbox(app, workspace_id, environment_id, field, "file", "mount files")
    found = {
        f.id: f for f in await app.store.files_by_ids(workspace_id, [m.file_id for m in mounts])
    }
    moment = datetime.now(UTC)
    now = wire.ts(moment)
    assert now is not None
    made = []
    for i, mount in enumerate(mounts):
        field = f"{prefix}{i}.file_id" if prefix else "file_id"
        record = found.get(mount.file_id)
        if record is None:
            raise NotFound("file", mount.file_id, field=field)
        if record.expires_at is not None and record.expires_at <= moment:
            raise RequestError(f"{field}: {mount.file_id} has expired", code="file_expired")
        if record.size_bytes > app.settings.max_mounted_file_bytes:
            raise RequestError(
                f"{field}: {mount.file_id} is {record.size_bytes} bytes; stead mounts files"
                f" of up to {app.settings.max_mounted_file_bytes} bytes"
                " (STEAD_MAX_MOUNTED_FILE_BYTES)"
            )
        made.append(resources.file_resource(new_id("session_resource"), mount, now))
    return made


async def check_memory_mounts(
    app: Services, workspace_id: str, environment_id: str, mounts: list[resources.MemoryMount]
) -> list[Json]:
    """The stored shapes of ``mounts``, each store's name and description as
    they are now, once this server can mount them and every store is a live
    store of the workspace (the session's create checks that again)."""
    if not mounts:
        return []
    field = f"resources.{mounts[0].index}"
    await _check_sandbox(
        app, workspace_id, environment_id, field, "memory_store", "mount memory stores"
    )
    stores = []
    for mount in mounts:
        field = f"resources.{mount.index}.memory_store_id"
        try:
            store = await app.store.get_memory_store(workspace_id, mount.memory_store_id)
        except NotFound:
            raise NotFound("memory_store", mount.memory_store_id, field=field) from None
        if store.archived_at is not None:
            raise RequestError(
                f"{field}: memory store {store.id} is archived; new sessions cannot use it"
            )
        stores.append(store)
    now = wire.ts(datetime.now(UTC))
    assert now is not None
    paths = resources.memory_mount_paths([store.name for store in stores])
    return [
        resources.memory_resource(
            new_id("session_resource"), mount, store.name, store.description, path, now
        )
        for mount, store, path in zip(mounts, stores, paths, strict=True)
    ]


@router.post(
    "",
    responses=RESOURCE,
    openapi_extra=openapi.body("ResourceAddParams"),
)
async def add_resource(
    request: Request, session_id: SessionId, who: Caller = Depends(caller)
) -> JSONResponse:
    mount = resources.parse_add(await json_body(request))
    app = services(request)
    session = await app.store.get_session(who.workspace_id, session_id)  # 404 before the file's
    workspace_id, environment_id = who.workspace_id, session.environment_id
    if isinstance(mount, repositories.RepositoryMount):
        [resource], tokens = await check_repositories(
            app, workspace_id, environment_id, [mount], "type"
        )
        sealed = tokens[resource["id"]]
    else:
        [resource] = await check_file_mounts(app, workspace_id, environment_id, [mount], "")
        sealed = None
    added = await app.store.add_session_resource(
        who.workspace_id, session_id, resource, limit=resources.MAX_RESOURCES, sealed_token=sealed
    )
    app.runtime.resources_changed(session_id)
    if sealed is not None:  # the proxy holds the token before the clone needs it
        await app.runtime.repository_tokens_changed(session_id)
    return JSONResponse(added)


@router.get("")
async def list_resources(
    request: Request,
    session_id: SessionId,
    limit: int | None = Query(None, ge=1, le=1000),
    page: str | None = Query(None),
    who: Caller = Depends(caller),
) -> JSONResponse:
    session = await services(request).store.get_session(who.workspace_id, session_id)
    held = sorted(session.resources, key=_key)
    bound = pagination.listing(request, who, f"resources:{session_id}")
    wanted = pagination.page_request(bound, "asc", limit or len(held) or 1, page, KEY_TYPES)
    return JSONResponse(pagination.page_body(bound, "asc", _page(held, wanted), _key, dict))


def _key(resource: Json) -> tuple[str, str]:
    return str(resource.get("created_at", "")), str(resource.get("id", ""))


def _page(held: list[Json], wanted: PageRequest) -> Page[Json]:
    after = wanted.after
    rest = [r for r in held if after is None or _key(r) > tuple(after)]
    return Page(rest[: wanted.limit], len(rest) > wanted.limit, len(rest) < len(held))


@router.get("/{resource_id}", responses=ANY_RESOURCE)
async def retrieve_resource(
    request: Request,
    session_id: SessionId,
    resource_id: SessionResourceId,
    who: Caller = Depends(caller),
) -> JSONResponse:
    session = await services(request).store.get_session(who.workspace_id, session_id)
    return JSONResponse(_find(session.resources, resource_id))


def _find(held: list[Json], resource_id: str) -> Json:
    found = next((r for r in held if r.get("id") == resource_id), None)
    if found is None:
        raise NotFound("session resource", resource_id)
    return found


@router.post(
    "/{resource_id}",
    responses=ANY_RESOURCE,
    openapi_extra=openapi.body("ResourceUpdateParams"),
)
async def update_resource(
    request: Request,
    session_id: SessionId,
    resource_id: SessionResourceId,
    who: Caller = Depends(caller),
) -> JSONResponse:
    token = resources.parse_update(await json_body(request))
    app = services(request)
    stamp = wire.ts(datetime.now(UTC))
    assert stamp is not None
    sealed = _seal(app, resource_id, token)
    changed = await app.store.set_repository_token(
        who.workspace_id, session_id, resource_id, sealed, stamp
    )
    await app.runtime.repository_tokens_changed(session_id)
    return JSONResponse(changed)


@router.delete(
    "/{resource_id}",
    responses=DELETED,
)
async def delete_resource(
    request: Request,
    session_id: SessionId,
    resource_id: SessionResourceId,
    who: Caller = Depends(caller),
) -> JSONResponse:
    app = services(request)
    session = await app.store.get_session(who.workspace_id, session_id)
    if _find(session.resources, resource_id).get("type") == "memory_store":
        raise RequestError(
            f"resource_id: {resource_id} is a memory_store resource; memory stores stay "
            "attached for the session's life"
        )
    deleted = await app.store.delete_session_resource(who.workspace_id, session_id, resource_id)
    app.runtime.resources_changed(session_id)
    if deleted.get("type") == repositories.TYPE:  # its token stops being injected now
        await app.runtime.repository_tokens_changed(session_id)
    return JSONResponse({"id": resource_id, "type": "session_resource_deleted"})
