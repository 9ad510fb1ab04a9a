"""``github_repository`` resources: the checked request and the stored shape
(the SDK's ``GitHubRepositoryResource``; the token is never part of it).

The repository is cloned into the session's workspace, by default at
``/workspace/<repo>``, from an ``https`` URL with no credentials, query or
fragment in it (the token travels apart, injected by the sandbox's egress proxy
for that repository's paths only).
"""

from __future__ import annotations

import posixpath
import re
from dataclasses import dataclass
from urllib.parse import urlsplit

from stead.jsonvalues import Json
from stead.schemas.mount_paths import plain_path_under
from stead.schemas.validation import RequestError

TYPE = "github_repository"
WORKSPACE = "/workspace"
RESERVED = ("/workspace/skills",)
"""Where stead binds content of its own (an agent's skills)."""
MAX_URL = 2048
MAX_TOKEN = 4096
SEGMENT = re.compile(r"^[A-Za-z0-9._~-]{1,200}$")
HOST = re.compile(r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?(\.[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?)*$")
TOKEN = re.compile(r"^[!-~]+$")
BRANCH = re.compile(r"^[A-Za-z0-9._/+-]{1,255}$")
SHA = re.compile(r"^([0-9a-f]{40}|[0-9a-f]{64})$")


@dataclass(frozen=True, slots=True, repr=False)
class RepositoryMount:
    """A checked repository resource request; ``token`` never shows in ``repr``."""

    url: str
    host: str
    paths: tuple[str, ...]
    """The URL's path with and without ``.git``: where its token may go."""
    mount_path: str
    checkout: Json | None
    token: str | None

    def __repr__(self) -> str:
        return f"RepositoryMount(url={self.url!r}, mount_path={self.mount_path!r})"


def parse(params: Json, prefix: str) -> RepositoryMount:
    """``params`` already match the SDK's ``GitHubRepositoryResourceParams``."""
    url, host, path = check_url(str(params["url"]), f"{prefix}url")
    bare = path.removesuffix(".git")
    name = posixpath.basename(bare)
    given = params.get("mount_path")
    mount_path = f"{WORKSPACE}/{name}" if given is None else check_mount_path(given, prefix)
    token = params.get("authorization_token")
    if token is not None:
        token = check_token(str(token), f"{prefix}authorization_token")
    return RepositoryMount(
        url=url,
        host=host,
        paths=(bare, bare + ".git"),
        mount_path=mount_path,
        checkout=check_checkout(params.get("checkout"), f"{prefix}checkout"),
        token=token,
    )


def check_url(url: str, field: str) -> tuple[str, str, str]:
    """(url, host, path) of a repository's ``https`` URL, or a 400 naming ``field``."""
    if len(url) > MAX_URL or not url.isascii() or any(c.isspace() for c in url):
        raise RequestError(f"{field}: not a usable repository URL")
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        raise RequestError(f"{field}: {url[:200]!r} is not a URL") from None
    if parts.scheme != "https":
        raise RequestError(f"{field}: {url[:200]!r} must be an https:// URL")
    if parts.username is not None or parts.password is not None:
        raise RequestError(
            f"{field}: the URL must not hold credentials; give authorization_token instead"
        )
    if parts.query or parts.fragment or url.endswith(("?", "#")):
        raise RequestError(f"{field}: the URL must have no query or fragment")
    host = (parts.hostname or "").lower()
    if not HOST.match(host) or port == 0:
        raise RequestError(f"{field}: {url[:200]!r} does not name a host")
    path = parts.path.rstrip("/")
    segments = path.split("/")[1:]
    if not segments or not all(SEGMENT.match(s) and s not in (".", "..") for s in segments):
        raise RequestError(
            f"{field}: {url[:200]!r} must name a repository, such as https://github.com/owner/repo"
        )
    if not posixpath.basename(path.removesuffix(".git")):  # "/.git", "/o/.git"
        raise RequestError(f"{field}: {url[:200]!r} does not name a repository")
    return url, host, path


def check_token(token: str, field: str) -> str:
    if not token or len(token) > MAX_TOKEN or not TOKEN.match(token):
        raise RequestError(
            f"{field}: must be 1 to {MAX_TOKEN} visible ASCII characters (no spaces)"
        )
    return token


def check_checkout(checkout: Json | None, field: str) -> Json | None:
    if checkout is None:
        return None
    if checkout["type"] == "branch":
        name = str(checkout["name"])
        if (
            not BRANCH.match(name)
            or name.startswith(("-", "/", "."))
            or name.endswith(("/", ".", ".lock"))
            or ".." in name
            or "//" in name
        ):
            raise RequestError(f"{field}.name: {name[:100]!r} is not a branch name")
        return {"type": "branch", "name": name}
    sha = str(checkout["sha"]).lower()
    if not SHA.match(sha):
        raise RequestError(
            f"{field}.sha: {sha[:100]!r} is not a full commit id (40 or 64 hex digits)"
        )
    return {"type": "commit", "sha": sha}


def check_mount_path(path: str, prefix: str = "") -> str:
    """A plain absolute path below ``/workspace/``, outside what stead binds there."""
    field = f"{prefix}mount_path"
    plain_path_under(path, WORKSPACE, field)
    for reserved in RESERVED:
        if path == reserved or path.startswith(reserved + "/"):
            raise RequestError(f"{field}: {reserved} is where stead puts the agent's skills")
    return path


def resource(resource_id: str, mount: RepositoryMount, now: str) -> Json:
    """The stored (and returned) shape of a repository resource: never its token."""
    return {
        "id": resource_id,
        "type": TYPE,
        "url": mount.url,
        "mount_path": mount.mount_path,
        "checkout": mount.checkout,
        "created_at": now,
        "updated_at": now,
    }
