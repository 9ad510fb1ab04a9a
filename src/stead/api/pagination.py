"""Opaque page cursors: base64url JSON naming the list, its order and the key of a row.

A cursor only works for the list and order that issued it, so reusing it with
another ``order`` is a 400 rather than a silently wrong page.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable
from datetime import datetime
from typing import Any, TypeVar

from stead.schemas import RequestError
from stead.store import Order, Page, PageRequest

T = TypeVar("T")
CREATED_KEY: tuple[type, ...] = (datetime, str)
"""Rows listed newest or oldest first: (created_at, id)."""
VERSION_KEY: tuple[type, ...] = (int,)
EVENT_KEY: tuple[type, ...] = (int, int)
"""(0, seq) for the log, (1, queue position) for pending events."""


def _encode_value(value: Any) -> Any:
    return {"t": value.isoformat()} if isinstance(value, datetime) else value


def _decode_value(value: Any) -> Any:
    if isinstance(value, dict) and set(value) == {"t"}:
        return datetime.fromisoformat(value["t"])
    return value


def encode(list_name: str, order: Order, key: tuple[Any, ...], direction: str) -> str:
    payload = {"l": list_name, "o": order, "d": direction, "k": [_encode_value(v) for v in key]}
    raw = json.dumps(payload, separators=(",", ":")).encode()
    return "page_" + base64.urlsafe_b64encode(raw).decode().rstrip("=")


def page_request(
    list_name: str,
    order: Order,
    limit: int,
    cursor: str | None,
    key_types: tuple[type, ...],
) -> PageRequest:
    """Decodes ``cursor`` for ``list_name``; its key must have ``key_types``."""
    if not cursor:
        return PageRequest(limit=limit, order=order)
    try:
        body = cursor.removeprefix("page_")
        payload = json.loads(base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)))
        key = tuple(_decode_value(v) for v in payload["k"])
        list_of, order_of, direction = payload["l"], payload["o"], payload["d"]
    except (ValueError, KeyError, TypeError, AttributeError):
        raise RequestError("page: not a cursor issued by this server") from None
    shaped = len(key) == len(key_types) and all(
        isinstance(v, t) and not (t is int and isinstance(v, bool))
        for v, t in zip(key, key_types, strict=False)
    )
    if not shaped or direction not in ("after", "before"):
        raise RequestError("page: not a cursor issued by this server")
    if list_of != list_name:
        raise RequestError("page: this cursor belongs to another list")
    if order_of != order:
        raise RequestError(f"page: this cursor was issued for order={order_of}, not {order}")
    if isinstance(key[0], datetime) and key[0].tzinfo is None:
        raise RequestError("page: not a cursor issued by this server")
    if direction == "before":
        return PageRequest(limit=limit, order=order, before=key)
    return PageRequest(limit=limit, order=order, after=key)


def page_body(
    list_name: str,
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
        "next_page": encode(list_name, order, key(items[-1]), "after")
        if page.has_next and items
        else None,
    }
    if bidirectional:
        body["prev_page"] = (
            encode(list_name, order, key(items[0]), "before") if page.has_prev and items else None
        )
    return body
