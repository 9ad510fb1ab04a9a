"""Session resources: the ``file`` resources stead mounts, checked requests and
the stored shape (the SDK's ``FileResource``); ``github_repository`` resources
are checked in ``repositories.py``.

A file resource puts an uploaded file read-only at ``mount_path`` in the
session's sandbox, under ``/mnt/session/uploads/`` (by default
``/mnt/session/uploads/<file_id>``). A repository resource is cloned into the
workspace; ``resources.add`` takes one in create's shape too (the SDK's
``ResourceAddParams`` name files only). ``memory_store`` resources are refused
with a 400 naming the type.
"""

from __future__ import annotations

import itertools
import posixpath
from dataclasses import dataclass
from typing import Any

from stead.jsonvalues import Json
from stead.schemas import repositories
from stead.schemas.repositories import RepositoryMount
from stead.schemas.validation import RequestError, StrictParams

ADD = StrictParams("resource_add")
ADD_REPOSITORY = StrictParams("repository_add")
UPDATE = StrictParams("resource_update")
UPLOADS = "/mnt/session/uploads"
"""Where file resources are mounted (read-only), as the spec's §4.7 says."""
MAX_RESOURCES = 100
"""Resources one session holds."""
MAX_MOUNT_PATH = 1024
SUPPORTED = ("file", repositories.TYPE)


@dataclass(frozen=True, slots=True)
class FileMount:
    """A checked file resource request: which file, and where."""

    file_id: str
    mount_path: str


def parse_add(body: Any) -> FileMount | RepositoryMount:
    if isinstance(body, dict) and body.get("type") == repositories.TYPE:
        return repositories.parse(ADD_REPOSITORY.validate(body), "")
    params = ADD.validate(body)
    return _file_mount(params, "")


def parse_update(body: Any) -> str:
    """The token of a resource update (only repository resources take one)."""
    params = UPDATE.validate(body)
    return repositories.check_token(str(params["authorization_token"]), "authorization_token")


def parse_create(items: list[Json]) -> tuple[list[FileMount], list[RepositoryMount]]:
    """The ``resources`` of a session create (already validated against the
    SDK's shapes): file mounts and repositories, or a 400 naming the first
    unsupported or malformed one."""
    if len(items) > MAX_RESOURCES:
        raise RequestError(f"resources: at most {MAX_RESOURCES} resources")
    files: list[FileMount] = []
    found: list[RepositoryMount] = []
    for i, item in enumerate(items):
        if item.get("type") == repositories.TYPE:
            found.append(repositories.parse(item, f"resources.{i}."))
        else:
            files.append(_file_mount(item, f"resources.{i}."))
    check_distinct([m.mount_path for m in files] + [r.mount_path for r in found], "resources")
    return files, found


def _file_mount(params: Json, prefix: str) -> FileMount:
    kind = params.get("type")
    if kind not in SUPPORTED:
        raise RequestError(
            f"{prefix}type: {kind} resources are not supported by stead yet "
            f"(supported: {', '.join(SUPPORTED)})"
        )
    file_id = str(params["file_id"])
    if not file_id.startswith("file_") or len(file_id) > 128:
        raise RequestError(f"{prefix}file_id: {file_id[:80]!r} is not a file id (file_...)")
    given = params.get("mount_path")
    path = f"{UPLOADS}/{file_id}" if given is None else check_mount_path(given, prefix)
    return FileMount(file_id, path)


def check_mount_path(path: str, prefix: str = "") -> str:
    """An absolute, plain path of a file under ``/mnt/session/uploads/``."""
    field = f"{prefix}mount_path"
    if len(path) > MAX_MOUNT_PATH or "\0" in path or "\\" in path:
        raise RequestError(f"{field}: not a usable path")
    if posixpath.normpath(path) != path or not path.startswith(UPLOADS + "/"):
        raise RequestError(
            f"{field}: {path[:200]!r} must be a plain absolute path under {UPLOADS}/ "
            "(no '.', '..' or '//')"
        )
    return path


def check_distinct(mount_paths: list[str], field: str) -> None:
    """No two resources at one path, nor one inside another's."""
    paths = sorted(mount_paths)
    for first, second in itertools.pairwise(paths):
        if second == first or second.startswith(first + "/"):
            raise RequestError(f"{field}: two resources are mounted at {second!r}")


def file_resource(resource_id: str, mount: FileMount, now: str) -> Json:
    """The stored (and returned) shape of a file resource."""
    return {
        "id": resource_id,
        "type": "file",
        "file_id": mount.file_id,
        "mount_path": mount.mount_path,
        "created_at": now,
        "updated_at": now,
    }
