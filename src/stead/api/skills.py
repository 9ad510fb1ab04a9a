"""/v1/skills and /v1/skills/{id}/versions: create (multipart: the files, or one
zip), list, retrieve, delete, download.

Validation is ``schemas.skills``; bytes and metadata are ``runtime.SkillKeeper``'s.
Another workspace's skill ids answer 404, like unknown ones.
"""

from __future__ import annotations

from typing import Annotated
from urllib.parse import quote

from fastapi import APIRouter, Depends, Path, Query, Request
from starlette.responses import StreamingResponse

from stead.api import openapi, pagination, uploads, wire
from stead.api.deps import Caller, caller, services
from stead.api.params import ID_PATTERN
from stead.api.wire import JSONResponse
from stead.ids import new_id
from stead.schemas import RequestError

router = APIRouter(prefix="/v1/skills", tags=["skills"])
SkillId = Annotated[str, Path(pattern=ID_PATTERN)]
Version = Annotated[str, Path(pattern=r"^(latest|[0-9]{1,32})$")]
"""A version id (digits) or ``latest``."""
SKILL = openapi.response("beta.BetaSkill")
VERSION = openapi.response("beta.skills.BetaSkillVersion")
UPLOAD_ERRORS = (409, 413, 415)
SOURCES = ("custom", "anthropic", "anthropic_example", "plugin")


async def _parts(
    request: Request, fields: tuple[str, ...]
) -> tuple[list[tuple[str, bytes]], dict[str, str]]:
    limits = services(request).skills.limits
    return await uploads.read_files(request, limits.max_total_bytes, limits.max_files, fields)


@router.post("", responses=openapi.response("beta.BetaSkill", *UPLOAD_ERRORS))
async def create_skill(request: Request, who: Caller = Depends(caller)) -> JSONResponse:
    parts, fields = await _parts(request, ("display_name",))
    skill, _ = await services(request).skills.create(
        who.workspace_id, new_id("skill"), parts, fields.get("display_name")
    )
    return JSONResponse(wire.skill(skill))


@router.get("")
async def list_skills(
    request: Request,
    limit: int = Query(20, ge=1, le=1000),
    page: str | None = Query(None),
    source: str | None = Query(None),
    who: Caller = Depends(caller),
) -> JSONResponse:
    if source is not None and source not in SOURCES:
        raise RequestError(f"source: expected one of {', '.join(SOURCES)}")
    store = services(request).store
    if source not in (None, "custom"):
        # stead serves the workspace's own skills only (``custom``).
        return JSONResponse({"data": [], "next_page": None})
    return JSONResponse(
        await pagination.newest_first(
            request,
            who,
            "skills",
            limit,
            page,
            lambda at: store.list_skills(who.workspace_id, at),
            wire.skill,
        )
    )


@router.get("/{skill_id}", responses=SKILL)
async def retrieve_skill(
    request: Request, skill_id: SkillId, who: Caller = Depends(caller)
) -> JSONResponse:
    record = await services(request).store.get_skill(who.workspace_id, skill_id)
    return JSONResponse(wire.skill(record))


@router.delete("/{skill_id}", responses=openapi.response("beta.BetaDeletedSkill"))
async def delete_skill(
    request: Request, skill_id: SkillId, who: Caller = Depends(caller)
) -> JSONResponse:
    await services(request).skills.delete(who.workspace_id, skill_id)
    return JSONResponse({"id": skill_id, "type": "skill_deleted"})


@router.post(
    "/{skill_id}/versions",
    responses=openapi.response("beta.skills.BetaSkillVersion", *UPLOAD_ERRORS),
)
async def create_skill_version(
    request: Request, skill_id: SkillId, who: Caller = Depends(caller)
) -> JSONResponse:
    keeper = services(request).skills
    await services(request).store.get_skill(who.workspace_id, skill_id)  # 404 before reading
    parts, _ = await _parts(request, ())
    record = await keeper.add_version(who.workspace_id, skill_id, parts)
    return JSONResponse(wire.skill_version(record))


@router.get("/{skill_id}/versions")
async def list_skill_versions(
    request: Request,
    skill_id: SkillId,
    limit: int = Query(20, ge=1, le=1000),
    page: str | None = Query(None),
    who: Caller = Depends(caller),
) -> JSONResponse:
    store = services(request).store
    return JSONResponse(
        await pagination.newest_first(
            request,
            who,
            f"skill_versions:{skill_id}",
            limit,
            page,
            lambda at: store.list_skill_versions(who.workspace_id, skill_id, at),
            wire.skill_version,
        )
    )


@router.get("/{skill_id}/versions/{version}", responses=VERSION)
async def retrieve_skill_version(
    request: Request, skill_id: SkillId, version: Version, who: Caller = Depends(caller)
) -> JSONResponse:
    record = await services(request).store.get_skill_version(who.workspace_id, skill_id, version)
    return JSONResponse(wire.skill_version(record))


@router.delete(
    "/{skill_id}/versions/{version}",
    responses=openapi.response("beta.skills.BetaDeletedSkillVersion"),
)
async def delete_skill_version(
    request: Request, skill_id: SkillId, version: Version, who: Caller = Depends(caller)
) -> JSONResponse:
    record = await services(request).skills.delete_version(who.workspace_id, skill_id, version)
    return JSONResponse({"id": record.version, "type": "skill_version_deleted"})


@router.get(
    "/{skill_id}/versions/{version}/content",
    responses={200: {"content": {"application/zip": {}}}, **openapi.errors(503)},
)
async def download_skill_version(
    request: Request, skill_id: SkillId, version: Version, who: Caller = Depends(caller)
) -> StreamingResponse:
    record, chunks = await services(request).skills.content(who.workspace_id, skill_id, version)
    disposition = f"attachment; filename*=UTF-8''{quote(record.name + '.zip', safe='')}"
    return StreamingResponse(
        chunks,
        media_type="application/zip",
        headers={"content-length": str(record.size_bytes), "content-disposition": disposition},
    )
