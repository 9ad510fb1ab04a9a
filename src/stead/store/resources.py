"""Session resources and captured outputs, and the narrow protocol for them.

A session's resources are kept in its row (``sessions.resources``, the shapes
the API returns), changed under the session's lock. A ``github_repository``
resource's token (sealed, bound to the resource id) and clone state live in
``session_repositories``, never in the shape the API returns. Files the agent writes to
``/mnt/session/outputs/`` become Files API files through a ledger keyed by
(session, path, content digest): each distinct content of a path is captured
once, even when the capture is cut short and run again.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

from stead.jsonvalues import Json
from stead.store.files import FileRecord, NewFile


@dataclass(frozen=True, slots=True, repr=False)
class RepositoryState:
    """A repository resource's private side: its sealed token (None: none was
    given) and when its clone into the sandbox finished (None: not yet)."""

    resource_id: str
    sealed_token: bytes | None
    cloned_at: datetime | None

    def __repr__(self) -> str:
        return f"RepositoryState(resource_id={self.resource_id!r}, cloned_at={self.cloned_at!r})"


class SessionResourceStore(Protocol):
    async def add_session_resource(
        self,
        workspace_id: str,
        session_id: str,
        resource: Json,
        *,
        limit: int,
        sealed_token: bytes | None = None,
    ) -> Json:
        """Appends a ``file`` or ``github_repository`` resource to the session (a
        repository with its ``sealed_token``, if any). ``NotFound`` for the
        session or (naming ``file_id``) a file that is not visible in the
        workspace; ``Conflict`` when the session is archived or terminated,
        holds ``limit`` resources, or has one at the same ``mount_path`` (400)."""
        ...

    async def delete_session_resource(
        self, workspace_id: str, session_id: str, resource_id: str
    ) -> Json:
        """Removes a resource (and a repository's token) and returns it;
        ``NotFound`` if there is none."""
        ...

    async def set_repository_token(
        self, workspace_id: str, session_id: str, resource_id: str, sealed: bytes, stamp: str
    ) -> Json:
        """Replaces a repository resource's sealed token and sets its
        ``updated_at`` to ``stamp``; the resource as the API shows it.
        ``NotFound`` for the session or resource; ``Conflict`` (400, naming
        ``authorization_token``) for a resource of another type."""
        ...

    async def repository_states(self, session_id: str) -> list[RepositoryState]:
        """The session's repository resources' tokens and clone state, by resource id."""
        ...

    async def mark_repository_cloned(self, resource_id: str) -> None:
        """Records that the resource's clone finished (its sandbox holds it)."""
        ...

    async def reseal_repository_tokens(self, reseal: Callable[[str, bytes], bytes | None]) -> int:
        """Replaces each sealed token with ``reseal(resource_id, sealed)`` where
        that is not None (``stead secrets rotate-key``); how many changed."""
        ...

    async def begin_output(
        self, new: NewFile, session_id: str, path: str, sha256: str, *, quota: int = 0
    ) -> FileRecord | None:
        """The file that holds this content of ``path``: begun now (pending) with
        ``new`` if it was never captured, else the one an earlier capture began,
        pending or ready; None if that one was deleted since (it stays deleted).
        ``quota`` as for ``begin_file``: ``StorageQuotaExceeded`` if a new file
        does not fit, and nothing is written."""
        ...
