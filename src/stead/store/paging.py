"""Keyset paging records every list method of the store takes and returns (the
SQL that walks them is ``_paging.py``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Generic, Literal, TypeVar

T = TypeVar("T")
Order = Literal["asc", "desc"]


@dataclass(frozen=True, slots=True)
class PageRequest:
    """Keyset paging: ``after``/``before`` are the sort key of the cursor row."""

    limit: int
    order: Order
    after: tuple[Any, ...] | None = None
    before: tuple[Any, ...] | None = None


@dataclass(frozen=True, slots=True)
class Page(Generic[T]):
    items: list[T]
    has_next: bool
    has_prev: bool
