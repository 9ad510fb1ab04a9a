"""The wire vocabulary: request validation derived from the SDK, and the pure rules
that turn requests into stored definitions. Imports nothing else from stead but
the shared package-spec rules (``stead.package_specs``)."""

from stead.schemas import (
    agents,
    environments,
    events,
    memories,
    repositories,
    resources,
    sessions,
    skills,
    vaults,
    webhooks,
    work,
    workspace_limits,
)
from stead.schemas.event_types import SessionEventType
from stead.schemas.limits import MAX_VERSION
from stead.schemas.skill_archive import SkillLimits
from stead.schemas.validation import RequestError, StrictParams

__all__ = [
    "MAX_VERSION",
    "RequestError",
    "SessionEventType",
    "SkillLimits",
    "StrictParams",
    "agents",
    "environments",
    "events",
    "memories",
    "repositories",
    "resources",
    "sessions",
    "skills",
    "vaults",
    "webhooks",
    "work",
    "workspace_limits",
]
