"""Webhook endpoints: which event types stead delivers, which log events raise
them, and the endpoint routes' bodies checked into stored form.

The names are the SDK's webhook names (``beta.webhooks.unwrap`` parses them),
which differ from the session stream's: ``session.status_idle`` in the log is
``session.status_idled`` to a webhook.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

from stead.jsonvalues import Json
from stead.schemas.limits import check_http_url, check_length
from stead.schemas.validation import RequestError, StrictParams

CREATE = StrictParams("webhook_create")
UPDATE = StrictParams("webhook_update")

FROM_LOG = {
    "session.status_running": "session.status_run_started",
    "session.status_idle": "session.status_idled",
    "session.status_rescheduled": "session.status_rescheduled",
    "session.status_terminated": "session.status_terminated",
    "session.updated": "session.updated",
}
"""A session log event type -> the webhook event type it raises."""
FROM_STOP_REASON = {
    "budget_reached": "session.budget_reached",
    "requires_action": "session.requires_action",
}
"""A ``session.status_idle``'s ``stop_reason.type`` -> the webhook event type it
raises besides ``session.status_idled``."""
RESOURCE_TYPES = (
    "session.created",
    "session.archived",
    "session.deleted",
    "agent.created",
    "agent.updated",
    "agent.archived",
    "environment.created",
    "environment.updated",
    "environment.archived",
    "environment.deleted",
    "vault.created",
    "vault.archived",
    "vault.deleted",
)
"""Webhook event types raised by a change of a resource (not by a log event)."""
EVENT_TYPES = (
    frozenset(FROM_LOG.values()) | frozenset(FROM_STOP_REASON.values()) | frozenset(RESOURCE_TYPES)
)
"""Every webhook event type stead delivers; a subscription to another is a 400."""


def raised_by(event_type: str, body: Json) -> list[str]:
    """The webhook event types a session log event raises (none for most)."""
    raised = FROM_LOG.get(event_type)
    if raised is None:
        return []
    reason = body.get("stop_reason") if event_type == "session.status_idle" else None
    kind = reason.get("type") if isinstance(reason, dict) else None
    extra = FROM_STOP_REASON.get(kind) if isinstance(kind, str) else None
    return [raised] if extra is None else [raised, extra]


MAX_DESCRIPTION_CHARS = 512


def parse_create(body: Any) -> Json:
    params = CREATE.validate(body)
    return {
        "url": check_url(params["url"]),
        "event_types": check_event_types(params["event_types"]),
        "description": _description(params.get("description")),
    }


def parse_update(body: Any) -> Json:
    params = UPDATE.validate(body)
    checks: dict[str, Callable[[Any], object]] = {
        "url": check_url,
        "event_types": check_event_types,
        "description": _description,
        "status": str,
    }
    return {key: checks[key](value) for key, value in params.items()}


def check_url(url: str) -> str:
    """The URL's shape only; whether stead may reach its host is the egress rules'
    call (``runtime.webhook_targets``)."""
    check_http_url("url", url)
    if urlsplit(url).fragment:
        raise RequestError("url: must not have a #fragment")
    return url


def check_event_types(types: list[str]) -> list[str]:
    if not types:
        raise RequestError("event_types: subscribe to at least one event type")
    for name in types:
        if name not in EVENT_TYPES:
            raise RequestError(
                f"event_types: stead does not deliver {name!r}; "
                f"known: {', '.join(sorted(EVENT_TYPES))}"
            )
    return sorted(set(types))


def _description(text: str | None) -> str | None:
    check_length("description", text, high=MAX_DESCRIPTION_CHARS)
    return text
