"""Query and path parameter types, bounded to what the store can hold.

A value outside them is a 400 naming the parameter (``errors._validation``)
before it reaches SQL: a timestamp whose offset pushes it past year 9999 or
before year 1 cannot be converted to UTC, and an id with characters no stead id
has (a NUL byte, say) is not something any backend should be asked about.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated

from fastapi import Path
from pydantic import AfterValidator, StringConstraints

ID_PATTERN = r"^[A-Za-z0-9_\-]{1,64}$"
"""stead's ids (``agent_…``, ``sesn_…``) and the hosted API's fit this; ids are at most 64 long."""


def _utc(value: datetime) -> datetime:
    if value.tzinfo is None:  # the API's convention: no offset means UTC
        return value.replace(tzinfo=UTC)
    try:
        return value.astimezone(UTC)
    except OverflowError:
        raise ValueError("the time is outside the years 1 to 9999 once converted to UTC") from None


Timestamp = Annotated[datetime, AfterValidator(_utc)]
"""An RFC 3339 time, converted to UTC."""
ResourceId = Annotated[str, StringConstraints(pattern=ID_PATTERN)]
"""An id in a query (``agent_id=``) or header; the pattern keeps NULs and the like out."""
AgentId = Annotated[str, Path(pattern=ID_PATTERN)]
EnvironmentId = Annotated[str, Path(pattern=ID_PATTERN)]
SessionId = Annotated[str, Path(pattern=ID_PATTERN)]
VaultId = Annotated[str, Path(pattern=ID_PATTERN)]
CredentialId = Annotated[str, Path(pattern=ID_PATTERN)]
FileId = Annotated[str, Path(pattern=ID_PATTERN)]
MemoryStoreId = Annotated[str, Path(pattern=ID_PATTERN)]
MemoryId = Annotated[str, Path(pattern=ID_PATTERN)]
MemoryVersionId = Annotated[str, Path(pattern=ID_PATTERN)]
