"""Session resources: the ``file`` and ``memory_store`` resources stead mounts,
checked requests and the stored shapes (the SDK's ``FileResource`` and
``MemoryStoreResource``); ``github_repository`` resources are checked in
``repositories.py``.

A file resource puts an uploaded file read-only at ``mount_path`` in the
session's sandbox, under ``/mnt/session/uploads/`` (by default
``/mnt/session/uploads/<file_id>``). A memory store resource (at create only,
as the spec says) mounts the store at ``/mnt/memory/<slug>``, read-write or
read-only. A repository resource is cloned into the workspace;
``resources.add`` takes one in create's shape too (the SDK's
``ResourceAddParams`` name files only).
"""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass
from typing import Any

from stead.jsonvalues import Json
from stead.mount_paths import MAX_DEPTH, NAME_MAX, name_problem
from stead.schemas import repositories
from stead.schemas.mount_paths import plain_path_under
from stead.schemas.repositories import RepositoryMount
from stead.schemas.validation import RequestError, StrictParams

ADD = StrictParams("resource_add")
ADD_REPOSITORY = StrictParams("repository_add")
UPDATE = StrictParams("resource_update")
UPLOADS = "/mnt/session/uploads"
"""Where file resources are mounted (read-only), as the spec's §4.7 says."""
MAX_RESOURCES = 100
"""Resources one session holds."""
SUPPORTED = ("file", "memory_store", repositories.TYPE)
MEMORY_ROOT = "/mnt/memory"
"""Where memory store resources are mounted, each under its slug."""
MAX_INSTRUCTIONS_CHARS = 4096
READ_WRITE, READ_ONLY = "read_write", "read_only"
_NOT_SLUG = re.compile(r"[^a-z0-9]+")


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


@dataclass(frozen=True, slots=True)
class MemoryMount:
    """A checked memory store resource request; ``index`` is its place in ``resources``."""

    index: int
    memory_store_id: str
    access: str
    instructions: str | None


def parse_create(
    items: list[Json],
) -> tuple[list[FileMount], list[MemoryMount], list[RepositoryMount]]:
    """The ``resources`` of a session create (already validated against the
    SDK's shapes): file mounts, memory store mounts and repositories, or a 400
    naming the first unsupported, malformed or repeated one."""
    if len(items) > MAX_RESOURCES:
        raise RequestError(f"resources: at most {MAX_RESOURCES} resources")
    files: list[FileMount] = []
    memory: list[MemoryMount] = []
    found: list[RepositoryMount] = []
    for i, item in enumerate(items):
        if item.get("type") == "memory_store":
            memory.append(_memory_mount(item, i))
        elif item.get("type") == repositories.TYPE:
            found.append(repositories.parse(item, f"resources.{i}."))
        else:
            files.append(_file_mount(item, f"resources.{i}."))
    check_distinct([m.mount_path for m in files] + [r.mount_path for r in found], "resources")
    seen: set[str] = set()
    for mount in memory:
        if mount.memory_store_id in seen:
            raise RequestError(
                f"resources.{mount.index}.memory_store_id: {mount.memory_store_id} is "
                "attached twice"
            )
        seen.add(mount.memory_store_id)
    return files, memory, found


def _memory_mount(params: Json, index: int) -> MemoryMount:
    prefix = f"resources.{index}."
    store_id = str(params["memory_store_id"])
    if not store_id.startswith("memstore_") or len(store_id) > 128:
        raise RequestError(
            f"{prefix}memory_store_id: {store_id[:80]!r} is not a memory store id (memstore_...)"
        )
    instructions = params.get("instructions")
    if instructions is not None and len(instructions) > MAX_INSTRUCTIONS_CHARS:
        raise RequestError(
            f"{prefix}instructions: at most {MAX_INSTRUCTIONS_CHARS} characters, "
            f"got {len(instructions)}"
        )
    return MemoryMount(index, store_id, params.get("access") or READ_WRITE, instructions)


def memory_slug(name: str, room: int = 0) -> str:
    """The spec's mount name of a store: its name lowercased, each run of other
    characters than a-z and 0-9 made one ``-``; cut to leave ``room`` bytes of
    a directory name (``NAME_MAX``) for a suffix."""
    slug = _NOT_SLUG.sub("-", name.lower()).strip("-")[: NAME_MAX - room]
    return slug.rstrip("-") or "memory"


def memory_mount_paths(names: list[str]) -> list[str]:
    """Where stores of these names mount, in order; a slug taken by an earlier
    store gets ``-2``, ``-3`` and so on, so no two stores share a mount."""
    taken: set[str] = set()
    paths = []
    for name in names:
        slug, n = memory_slug(name), 1
        while slug in taken:
            n += 1
            slug = f"{memory_slug(name, len(f'-{n}'))}-{n}"
        taken.add(slug)
        paths.append(f"{MEMORY_ROOT}/{slug}")
    return paths


def memory_resource(
    resource_id: str, mount: MemoryMount, name: str, description: str, path: str, now: str
) -> Json:
    """The stored (and returned) shape of a memory store resource: the SDK's
    fields, with the store's name and description as they were at attach time,
    and the ``id`` and times every stored resource has."""
    return {
        "id": resource_id,
        "type": "memory_store",
        "memory_store_id": mount.memory_store_id,
        "access": mount.access,
        "instructions": mount.instructions,
        "name": name,
        "description": description,
        "mount_path": path,
        "created_at": now,
        "updated_at": now,
    }


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
    """An absolute, plain path of a file under ``/mnt/session/uploads/`` that the
    sandbox host can put there: accepted and then refused by the host, it would
    fail every sandbox tool call of the session (``stead.mount_paths``)."""
    field = f"{prefix}mount_path"
    plain_path_under(path, UPLOADS, field)
    parts = path.removeprefix(UPLOADS + "/").split("/")
    if len(parts) > MAX_DEPTH:
        raise RequestError(f"{field}: deeper than {MAX_DEPTH} levels below {UPLOADS}/")
    for part in parts:
        if problem := name_problem(part):
            raise RequestError(f"{field}: the component {part[:80]!r} {problem}")
    return path


def check_distinct(mount_paths: list[str], field: str) -> None:
    """No two resources at one path, nor one inside another's."""
    # By components: a directory sorts right before what is inside it
    # ("/w/a" < "/w/a/c" < "/w/a-b"; as strings "/w/a-b" came between).
    paths = sorted(mount_paths, key=lambda path: path.split("/"))
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
