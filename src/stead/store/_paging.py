"""Keyset paging shared by every list query (no OFFSET: pages stay stable under inserts)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from sqlalchemy import ColumnElement, Connection, Select, tuple_

from stead.store.base import Page, PageRequest

T = TypeVar("T")


def fetch_page(
    conn: Connection,
    stmt: Select[Any],
    key: Sequence[ColumnElement[Any]],
    page: PageRequest,
    to_record: Callable[[Any], T],
) -> Page[T]:
    """Runs ``stmt`` limited to one page in ``page.order``.

    ``after`` walks forward from the cursor row, ``before`` walks backward and
    the rows are flipped back into display order.
    """
    row_key = tuple_(*key)
    backward = page.before is not None
    ascending = (page.order == "asc") != backward
    if page.after is not None:
        bound = tuple_(*page.after)
        stmt = stmt.where(row_key > bound if page.order == "asc" else row_key < bound)
    if page.before is not None:
        bound = tuple_(*page.before)
        stmt = stmt.where(row_key < bound if page.order == "asc" else row_key > bound)
    stmt = stmt.order_by(*[c.asc() if ascending else c.desc() for c in key])
    rows = conn.execute(stmt.limit(page.limit + 1)).all()
    more = len(rows) > page.limit
    items = [to_record(r) for r in rows[: page.limit]]
    if backward:
        items.reverse()
        return Page(items=items, has_next=True, has_prev=more)
    return Page(items=items, has_next=more, has_prev=page.after is not None)
