"""The in-memory fake of the store (``InMemoryStore``): every aggregate with the
SQL store's semantics, one module of functions per aggregate over one ``Tables``
object, as the SQL store's ``_*.py`` modules work on a connection."""

from __future__ import annotations

from stead.store.inmemory.store import InMemoryStore

__all__ = ["InMemoryStore"]
