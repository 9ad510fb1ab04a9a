"""Session resources and captured outputs, and the narrow protocol for them.

A session's resources are kept in its row (``sessions.resources``, the shapes
the API returns), changed under the session's lock. Files the agent writes to
``/mnt/session/outputs/`` become Files API files through a ledger keyed by
(session, path, content digest): each distinct content of a path is captured
once, even when the capture is cut short and run again.
"""

from __future__ import annotations

from typing import Protocol

from stead.jsonvalues import Json
from stead.store.files import FileRecord, NewFile


class SessionResourceStore(Protocol):
    async def add_session_resource(
        self, workspace_id: str, session_id: str, resource: Json, *, limit: int
    ) -> Json:
        """Appends a ``file`` resource to the session. ``NotFound`` for the session
        or (naming ``file_id``) a file that is not visible in the workspace;
        ``Conflict`` when the session is archived or terminated, holds ``limit``
        resources, or has one at the same ``mount_path`` (400)."""
        ...

    async def delete_session_resource(
        self, workspace_id: str, session_id: str, resource_id: str
    ) -> Json:
        """Removes a resource and returns it; ``NotFound`` if there is none."""
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
