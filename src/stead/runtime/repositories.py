"""``github_repository`` resources in a session's sandbox: their tokens as
egress credentials, and their clones.

* A token never enters the sandbox: it goes to the sandbox's egress proxy as an
  ``authorization: Basic x-access-token:<token>`` header (what GitHub and git's
  smart HTTP take) set on requests for that repository's paths only. An update
  or delete of the resource replaces the proxy's set at once.
* The clone runs in the sandbox, through its egress proxy, before the first
  sandbox tool call of a run, once per resource: into a temporary directory
  beside ``mount_path``, renamed into place only when the checkout is complete,
  so a clone cut short is never mistaken for a finished one. The store records
  it as cloned after the rename; a clone found in place is recorded so.
* A clone that fails is a ``session.error`` of the spec's repository types
  (``retrying``): the turn goes on without it and the next run tries again.
"""

from __future__ import annotations

import base64
import logging
import posixpath
import shlex
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from urllib.parse import urlsplit

from stead.jsonvalues import Json
from stead.runtime.opkeys import op_key
from stead.sandbox import EgressCredential, ExecInDoubt, Sandbox, SandboxError
from stead.schemas import repositories
from stead.store import RepositoryState, SessionRecord
from stead.vault import SealError, SecretBox

log = logging.getLogger("stead.runtime.repositories")

CLONE_FAILED = 10
CHECKOUT_FAILED = 11
NOT_EMPTY = 12
MAX_MESSAGE = 600


@dataclass(frozen=True, slots=True)
class CloneFailure:
    """A repository that could not be cloned: ``error_type`` is one of the
    spec's ``repository_*_error`` types."""

    resource_id: str
    url: str
    error_type: str
    message: str


def egress_credentials(
    box: SecretBox, held: Sequence[Json], states: Sequence[RepositoryState]
) -> list[EgressCredential]:
    """The proxy's credentials for the session's repositories with a token;
    one whose token cannot be opened is left out (and logged, never its value)."""
    by_id = {str(r.get("id")): r for r in held if r.get("type") == repositories.TYPE}
    found = []
    for state in states:
        resource = by_id.get(state.resource_id)
        if resource is None or state.sealed_token is None:
            continue
        try:
            token = str(box.open(state.resource_id, state.sealed_token)["authorization_token"])
        except SealError as exc:
            log.error("repository resource %s: its token is not used: %s", state.resource_id, exc)
            continue
        url, host, path = repositories.check_url(str(resource["url"]), "url")
        bare = path.removesuffix(".git")
        basic = base64.b64encode(f"x-access-token:{token}".encode()).decode()
        found.append(
            EgressCredential(
                host=host,
                header="authorization",
                value=f"Basic {basic}",
                credential_id=state.resource_id,
                paths=(bare, bare + ".git"),
                port=urlsplit(url).port or 443,
            )
        )
    return found


def clone_script(resource: Json) -> str:
    """A command for the sandbox's shell that leaves the repository at its
    ``mount_path`` or nothing there; its exit status says which step failed."""
    dest = str(resource["mount_path"])
    parent = posixpath.dirname(dest)
    tmp = posixpath.join(parent, f".stead-clone-{resource['id']}")
    url = str(resource["url"])
    checkout = resource.get("checkout") or None
    if checkout is None:
        clone = f'git clone --quiet -- {shlex.quote(url)} "$tmp"'
        switch = "true"
    elif checkout["type"] == "branch":
        name = shlex.quote(str(checkout["name"]))
        clone = f'git clone --quiet --no-checkout -- {shlex.quote(url)} "$tmp"'
        switch = f'git -C "$tmp" checkout --quiet -B {name} --track origin/{name} --'
    else:
        sha = shlex.quote(str(checkout["sha"]))
        clone = f'git clone --quiet --no-checkout -- {shlex.quote(url)} "$tmp"'
        switch = (
            f'git -C "$tmp" checkout --quiet --detach {sha} -- 2>/dev/null || '
            f'{{ git -C "$tmp" fetch --quiet origin {sha} && '
            f'git -C "$tmp" checkout --quiet --detach {sha} --; }}'
        )
    return "\n".join(
        [
            "(",
            f"dest={shlex.quote(dest)}; tmp={shlex.quote(tmp)}",
            'if [ -e "$dest/.git" ]; then exit 0; fi',
            'if [ -n "$(ls -A "$dest" 2>/dev/null)" ]; then',
            f'  echo "$dest exists and is not empty"; exit {NOT_EMPTY}',
            "fi",
            f'rm -rf "$tmp" && mkdir -p {shlex.quote(parent)} || exit {CLONE_FAILED}',
            "export GIT_TERMINAL_PROMPT=0",
            f'{clone} || {{ rm -rf "$tmp"; exit {CLONE_FAILED}; }}',
            f'{switch} || {{ rm -rf "$tmp"; exit {CHECKOUT_FAILED}; }}',
            'rmdir "$dest" 2>/dev/null',
            f'mv -T "$tmp" "$dest" || {{ rm -rf "$tmp"; exit {CLONE_FAILED}; }}',
            ")",
        ]
    )


def classify(exit_code: int | None, output: str) -> str:
    """The spec's error type for a clone that ended with ``exit_code``."""
    if exit_code == CHECKOUT_FAILED:
        return "repository_checkout_error"
    if exit_code != CLONE_FAILED:
        return "repository_clone_error"
    text = output.lower()
    if "error: 401" in text or "could not read username" in text or "authentication" in text:
        return "repository_authentication_error"
    if "error: 403" in text or "http code 403" in text:  # the origin, or the proxy's policy
        return "repository_forbidden_error"
    if "error: 404" in text or "not found" in text:
        return "repository_not_found_error"
    return "repository_clone_error"


async def clone(
    sandbox: Sandbox, resource: Json, run_id: str, seconds: float
) -> CloneFailure | None:
    """Clones one repository resource in ``sandbox`` (``clone_script``); None
    when it is in place. At most once per run: a run retried after a crash
    finds the clone it started (running or finished) by its op key. ``seconds``:
    the command's own limit, as ``Sandbox.exec``'s ``timeout``."""
    script = clone_script(resource)
    args = {"url": resource["url"], "mount_path": resource["mount_path"]}
    key = op_key("repository:clone", args, run_id, str(resource["id"]))
    try:
        result = await sandbox.exec(script, op_key=key, timeout=seconds)
    except ExecInDoubt:  # the host lost it: the script starts over safely
        result = await sandbox.exec(script, op_key=key + ":again", timeout=seconds)
    if result.exit_code == 0:
        return None
    output = result.output.strip()[-MAX_MESSAGE:]
    if result.timed_out:
        output = f"the clone took longer than {seconds:g}s"
    error_type = classify(result.exit_code, output)
    url = str(resource["url"])
    return CloneFailure(
        str(resource["id"]),
        url,
        error_type,
        f"repository {url} was not cloned into {resource['mount_path']}: {output or 'git failed'}",
    )


async def clone_pending(
    sandbox: Sandbox,
    session: SessionRecord,
    pending: Sequence[RepositoryState],
    run_id: str,
    seconds: float,
    cloned: Callable[[str], Awaitable[None]],
) -> list[CloneFailure]:
    """Clones each of ``pending`` still among the session's resources, in order,
    and records each one in place with ``cloned``; the ones that failed. A
    sandbox that fails meanwhile clones nothing more: the run's tool calls meet
    it too, and say so, and the next run tries again."""
    held = {str(r.get("id")): r for r in session.resources}
    failures = []
    for state in pending:
        resource = held.get(state.resource_id)
        if resource is None:
            continue  # deleted meanwhile
        try:
            failure = await clone(sandbox, resource, run_id, seconds)
        except SandboxError as exc:
            log.info("session %s: repositories not cloned yet: %s", session.id, exc)
            break
        if failure is None:
            await cloned(state.resource_id)
        else:
            failures.append(failure)
    return failures
