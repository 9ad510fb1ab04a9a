"""Bodies of the self-hosted work queue's ``update`` and ``stop`` (spec §2.3):
the SDK's params types, and the limits the API keeps on a work item's metadata."""

from __future__ import annotations

from typing import Any

from stead.schemas.validation import RequestError, StrictParams

UPDATE = StrictParams("work_update")
STOP = StrictParams("work_stop")
MAX_METADATA = 16
"""Keys a work item's metadata may hold (as a session's)."""


def metadata_patch(body: Any) -> dict[str, str | None]:
    """The ``metadata`` patch of an update: a string upserts a key, null deletes it."""
    patch: dict[str, str | None] = UPDATE.validate(body)["metadata"]
    if len(patch) > MAX_METADATA:
        raise RequestError(f"metadata: at most {MAX_METADATA} keys")
    for name, value in patch.items():
        if len(name) > 64 or not name:
            raise RequestError("metadata: keys are 1 to 64 characters")
        if value is not None and len(value) > 512:
            raise RequestError(f"metadata.{name}: must be a string of at most 512 characters")
    return patch


def stop_force(body: Any) -> bool:
    """``force`` of a stop request (an empty body is a graceful stop)."""
    return bool(STOP.validate(body).get("force", False))
