"""Page cursors that cannot be forged: ``page_<payload>.<tag>``.

The payload (base64url JSON) holds the order, the direction and the key of the
row a page ends at; the tag is an HMAC-SHA256 over the workspace, the list and
the payload with the installation's cursor key (kept in the store, so every
process of one installation shares it). A cursor is therefore only accepted by
the list and workspace that issued it, and every key it carries was written by
this server: nothing a client makes up reaches the store. Anything else is a
400 "not a cursor issued by this server".
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol, TypeVar

from starlette.requests import HTTPConnection

from stead.api.deps import Caller, services
from stead.schemas import RequestError
from stead.store import Order, Page, PageRequest

T = TypeVar("T")


class Dated(Protocol):
    @property
    def created_at(self) -> datetime: ...
    @property
    def id(self) -> str: ...


D = TypeVar("D", bound=Dated)
CREATED_KEY: tuple[type, ...] = (datetime, str)
"""Rows listed newest or oldest first: (created_at, id)."""
VERSION_KEY: tuple[type, ...] = (int,)
EVENT_KEY: tuple[type, ...] = (int, int)
"""(0, seq) for the log, (1, queue position) for pending events."""
PENDING_EVENT_KEY: tuple[type, ...] = (int, int, int)
"""(1, queue position, the last seq listed before it): an ascending listing's
cursor into the queue (``events.events_page``)."""
PREFIX = "page_"
TAG_BYTES = 16
NOT_OURS = "page: not a cursor issued by this server for this list"


@dataclass(frozen=True)
class Listing:
    """One list as one caller sees it: what a cursor is bound to."""

    secret: bytes
    workspace_id: str
    name: str
    """The list and its parent, e.g. ``agents`` or ``events:sesn_…``."""

    def tag(self, payload: bytes) -> bytes:
        scope = f"{self.workspace_id}\0{self.name}\0".encode()
        return hmac.digest(self.secret, scope + payload, hashlib.sha256)[:TAG_BYTES]


def listing(request: HTTPConnection, who: Caller, name: str) -> Listing:
    """The list ``name`` as ``who`` sees it, keyed with the installation's cursor secret."""
    return Listing(services(request).cursor_secret, who.workspace_id, name)


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def _encode_value(value: Any) -> Any:
    return {"t": value.isoformat()} if isinstance(value, datetime) else value


def _decode_value(value: Any) -> Any:
    if isinstance(value, dict) and set(value) == {"t"}:
        return datetime.fromisoformat(value["t"])
    return value


def encode(listing: Listing, order: Order, key: tuple[Any, ...], direction: str) -> str:
    payload = {"o": order, "d": direction, "k": [_encode_value(v) for v in key]}
    raw = json.dumps(payload, separators=(",", ":")).encode()
    return f"{PREFIX}{_b64(raw)}.{_b64(listing.tag(raw))}"


def _verified(listing: Listing, cursor: str) -> dict[str, Any]:
    body, dot, tag = cursor.removeprefix(PREFIX).partition(".")
    try:
        raw, presented = _unb64(body), _unb64(tag)
    except ValueError:
        raise RequestError(NOT_OURS) from None
    if not dot or not hmac.compare_digest(presented, listing.tag(raw)):
        raise RequestError(NOT_OURS)
    payload: dict[str, Any] = json.loads(raw)
    return payload


def page_request(
    listing: Listing,
    order: Order,
    limit: int,
    cursor: str | None,
    key_types: tuple[type, ...],
    *,
    or_types: tuple[type, ...] | None = None,
) -> PageRequest:
    """Decodes ``cursor`` for ``listing``; its key must have ``key_types`` (or
    ``or_types``)."""
    if not cursor:
        return PageRequest(limit=limit, order=order)
    payload = _verified(listing, cursor)
    # Issued by this server, so well formed; checked anyway, against a key of an older format.
    try:
        key = tuple(_decode_value(v) for v in payload["k"])
        order_of, direction = payload["o"], payload["d"]
    except (ValueError, KeyError, TypeError):
        raise RequestError(NOT_OURS) from None
    shaped = _shaped(key, key_types) or (or_types is not None and _shaped(key, or_types))
    if not shaped or direction not in ("after", "before"):
        raise RequestError(NOT_OURS)
    if order_of != order:
        raise RequestError(f"page: this cursor was issued for order={order_of}, not {order}")
    if direction == "before":
        return PageRequest(limit=limit, order=order, before=key)
    return PageRequest(limit=limit, order=order, after=key)


def _shaped(key: tuple[Any, ...], types: tuple[type, ...]) -> bool:
    return len(key) == len(types) and all(
        isinstance(v, t) and not (t is int and isinstance(v, bool))
        for v, t in zip(key, types, strict=True)
    )


def page_body(
    listing: Listing,
    order: Order,
    page: Page[T],
    key: Callable[[T], tuple[Any, ...]],
    to_json: Callable[[T], Any],
    *,
    bidirectional: bool = False,
) -> dict[str, Any]:
    """The list envelope: ``data`` and ``next_page`` (plus ``prev_page`` when bidirectional)."""
    items = page.items
    body: dict[str, Any] = {
        "data": [to_json(item) for item in items],
        "next_page": encode(listing, order, key(items[-1]), "after")
        if page.has_next and items
        else None,
    }
    if bidirectional:
        body["prev_page"] = (
            encode(listing, order, key(items[0]), "before") if page.has_prev and items else None
        )
    return body


async def newest_first(
    request: HTTPConnection,
    who: Caller,
    name: str,
    limit: int,
    cursor: str | None,
    fetch: Callable[[PageRequest], Awaitable[Page[D]]],
    to_json: Callable[[D], Any],
) -> dict[str, Any]:
    """One page of the list ``name``, newest first by (created_at, id)."""
    bound = listing(request, who, name)
    page = await fetch(page_request(bound, "desc", limit, cursor, CREATED_KEY))
    return page_body(bound, "desc", page, lambda r: (r.created_at, r.id), to_json)
