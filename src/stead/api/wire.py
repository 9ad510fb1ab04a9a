"""Store records -> the API's JSON objects (shapes of the SDK's response models),
and the one way they are rendered to bytes."""

from __future__ import annotations

import json
import logging
from datetime import datetime
from typing import Any

from starlette.responses import JSONResponse as StarletteJSONResponse

from stead import usage as accounting
from stead.jsonvalues import Json, repaired
from stead.store import (
    Actor,
    AgentRecord,
    CredentialRecord,
    EnvironmentRecord,
    EventRecord,
    FileRecord,
    MemoryPrefix,
    MemoryRecord,
    MemoryStoreRecord,
    MemoryVersionRecord,
    SessionRecord,
    SkillRecord,
    SkillVersionRecord,
    VaultRecord,
)

log = logging.getLogger("stead.api")


def encoded(content: Any) -> bytes:
    """Strict JSON of ``content`` in UTF-8. A value an earlier version of stead stored
    that cannot be rendered (a non-finite number, an unpaired surrogate) is shown
    repaired, never as a 500; ``stead db check --repair`` heals the row itself."""
    try:
        return json.dumps(
            content, ensure_ascii=False, allow_nan=False, separators=(",", ":")
        ).encode("utf-8")
    except (ValueError, UnicodeEncodeError):
        log.warning("a stored value is not valid JSON; rendered repaired (see stead db check)")
        healed = json.dumps(repaired(content), ensure_ascii=False, separators=(",", ":"))
        return healed.encode("utf-8")


class JSONResponse(StarletteJSONResponse):
    """Every JSON answer of the API: rendered by ``encoded``."""

    def render(self, content: Any) -> bytes:
        return encoded(content)


def ts(value: datetime | None) -> str | None:
    if value is None:
        return None
    return value.isoformat(timespec="microseconds").replace("+00:00", "Z")


def agent(record: AgentRecord) -> Json:
    return {
        "type": "agent",
        "id": record.id,
        **record.definition,
        "version": record.version,
        "created_at": ts(record.created_at),
        "updated_at": ts(record.updated_at),
        "archived_at": ts(record.archived_at),
    }


def environment(record: EnvironmentRecord) -> Json:
    return {
        "type": "environment",
        "id": record.id,
        "name": record.name,
        "description": record.description,
        "config": record.config,
        "metadata": record.metadata,
        "scope": record.scope,
        "created_at": ts(record.created_at),
        "updated_at": ts(record.updated_at),
        "archived_at": ts(record.archived_at),
    }


def session(record: SessionRecord, now: datetime) -> Json:
    end = record.terminated_at or now
    usage = accounting.wire(record.usage)
    return {
        "type": "session",
        "id": record.id,
        "status": record.status,
        "title": record.title,
        "environment_id": record.environment_id,
        "agent": record.agent,
        "resources": record.resources,
        "vault_ids": record.vault_ids,
        "metadata": record.metadata,
        "budget": record.budget,
        "usage": usage,
        "stats": {
            "active_seconds": usage["active_seconds"],
            "duration_seconds": max(0.0, (end - record.created_at).total_seconds()),
        },
        "outcome_evaluations": [],
        "deployment_id": None,
        "created_at": ts(record.created_at),
        "updated_at": ts(record.updated_at),
        "archived_at": ts(record.archived_at),
    }


def event(record: EventRecord) -> Json:
    """The wire form; keys starting with ``_`` are stead's own (e.g. thinking text kept
    for replaying the conversation) and never leave the server."""
    body = {k: v for k, v in record.body.items() if not k.startswith("_")}
    return {"type": record.type, "id": record.id, **body, "processed_at": ts(record.processed_at)}


def vault(record: VaultRecord) -> Json:
    return {
        "type": "vault",
        "id": record.id,
        "display_name": record.display_name,
        "metadata": record.metadata,
        "created_at": ts(record.created_at),
        "updated_at": ts(record.updated_at),
        "archived_at": ts(record.archived_at),
    }


def credential(record: CredentialRecord) -> Json:
    """The credential as the API shows it: ``auth`` holds no secret (the store
    never had one in the clear)."""
    return {
        "type": "vault_credential",
        "id": record.id,
        "vault_id": record.vault_id,
        "display_name": record.display_name,
        "metadata": record.metadata,
        "auth": record.auth,
        "created_at": ts(record.created_at),
        "updated_at": ts(record.updated_at),
        "archived_at": ts(record.archived_at),
    }


def skill(record: SkillRecord) -> Json:
    """``BetaSkill``: every skill stead keeps is a workspace's own (``custom``)."""
    return {
        "type": "skill",
        "id": record.id,
        "display_name": record.display_name,
        "latest_version_id": record.latest_version,
        "source": {"type": "custom"},
        "created_at": ts(record.created_at),
        "updated_at": ts(record.updated_at),
    }


def skill_version(record: SkillVersionRecord) -> Json:
    return {
        "type": "skill_version",
        "id": record.version,
        "skill_id": record.skill_id,
        "name": record.name,
        "description": record.description,
        "created_at": ts(record.created_at),
    }


def file(record: FileRecord, now: datetime) -> Json:
    """``BetaFileMetadata`` as of ``now``. Every stead file can be downloaded
    until it expires: the bytes are the installation's own (the hosted API
    refuses to serve back plain uploads)."""
    scope = None if record.scope is None else {"type": record.scope.type, "id": record.scope.id}
    return {
        "type": "file",
        "id": record.id,
        "filename": record.filename,
        "mime_type": record.mime_type,
        "size_bytes": record.size_bytes,
        "created_at": ts(record.created_at),
        "expires_at": ts(record.expires_at),
        "downloadable": record.expires_at is None or record.expires_at > now,
        "scope": scope,
    }


# memory stores, memories and memory versions


def memory_store(record: MemoryStoreRecord) -> Json:
    return {
        "type": "memory_store",
        "id": record.id,
        "name": record.name,
        "description": record.description,
        "metadata": record.metadata,
        "created_at": ts(record.created_at),
        "updated_at": ts(record.updated_at),
        "archived_at": ts(record.archived_at),
    }


def memory(record: MemoryRecord, content: str | None) -> Json:
    """``BetaManagedAgentsMemory``; ``content`` None for ``view=basic``."""
    return {
        "type": "memory",
        "id": record.id,
        "memory_store_id": record.memory_store_id,
        "path": record.path,
        "content": content,
        "content_sha256": record.content_sha256,
        "content_size_bytes": record.content_size_bytes,
        "memory_version_id": record.version_id,
        "created_at": ts(record.created_at),
        "updated_at": ts(record.updated_at),
    }


def memory_prefix(record: MemoryPrefix) -> Json:
    return {"type": "memory_prefix", "path": record.path}


ACTOR_ID_FIELDS = {
    "api_actor": "api_key_id",
    "session_actor": "session_id",
    "user_actor": "user_id",
    "service_account_actor": "service_account_id",
}


def _actor(actor: Actor | None) -> Json | None:
    if actor is None:
        return None
    field = ACTOR_ID_FIELDS[actor.type]
    return {"type": actor.type, field: actor.id}


def memory_version(record: MemoryVersionRecord, content: str | None) -> Json:
    """``BetaManagedAgentsMemoryVersion``; ``content`` None for ``view=basic``, a
    redacted version or a ``deleted`` one."""
    return {
        "type": "memory_version",
        "id": record.id,
        "memory_id": record.memory_id,
        "memory_store_id": record.memory_store_id,
        "operation": record.operation,
        "path": record.path,
        "content": content,
        "content_sha256": record.content_sha256,
        "content_size_bytes": record.content_size_bytes,
        "created_by": _actor(record.created_by),
        "created_at": ts(record.created_at),
        "redacted_at": ts(record.redacted_at),
        "redacted_by": _actor(record.redacted_by),
    }
