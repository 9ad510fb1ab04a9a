"""The bodies of stead's webhook endpoint routes, as TypedDicts: the SDK has no
params for them (it only verifies deliveries), so ``stead.schemas.generate``
derives their validators from these, as it does from the SDK's own."""

from __future__ import annotations

from typing import Literal, NotRequired, Required

from typing_extensions import TypedDict  # pydantic reads only this one on Python 3.11


class WebhookCreateParams(TypedDict, total=False):
    url: Required[str]
    """Where deliveries are POSTed: https, or http to a host the operator pinned."""
    event_types: Required[list[str]]
    """The webhook event types to deliver, e.g. ``session.status_idled``."""
    description: NotRequired[str | None]


class WebhookUpdateParams(TypedDict, total=False):
    url: str
    event_types: list[str]
    description: str | None
    status: Literal["enabled", "disabled"]
    """A disabled endpoint gets no new deliveries and holds its pending ones."""
