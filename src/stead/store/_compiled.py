"""Statements of the event-append hot path, compiled once per connection and run
on the DBAPI cursor.

SQLAlchemy's per-execution work (cache key, parameter coercion, result objects)
costs more than the SQLite commit itself, and appending events runs a fixed
pair of statements. They are still written once as Core constructs, compiled
for the connection's dialect on first use, and the column types' own bind
processors are applied, so the stored values are exactly what SQLAlchemy writes.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from sqlalchemy import Connection
from sqlalchemy.sql import ClauseElement

Processor = Callable[[Any], Any]


class Compiled:
    def __init__(self, statement: ClauseElement, conn: Connection) -> None:
        dialect = conn.dialect
        compiled: Any = statement.compile(dialect=dialect)  # a SQLCompiler
        self.sql = compiled.string
        self._order: Sequence[str] | None = (
            list(compiled.positiontup or []) if compiled.positional else None
        )
        self._processors: dict[str, Processor] = {}
        for name, bind in compiled.binds.items():
            processor = bind.type.dialect_impl(dialect).bind_processor(dialect)
            if processor is not None:
                self._processors[bind.key] = processor
                self._processors[name] = processor

    def params(self, values: Mapping[str, Any]) -> Any:
        processed = {
            k: (self._processors[k](v) if k in self._processors else v) for k, v in values.items()
        }
        if self._order is None:
            return processed
        return tuple(processed[name] for name in self._order)

    def execute(self, conn: Connection, values: Mapping[str, Any]) -> Any:
        cursor = conn.connection.driver_connection.cursor()  # type: ignore[union-attr]
        cursor.execute(self.sql, self.params(values))
        return cursor

    def execute_many(self, conn: Connection, rows: Sequence[Mapping[str, Any]]) -> None:
        cursor = conn.connection.driver_connection.cursor()  # type: ignore[union-attr]
        cursor.executemany(self.sql, [self.params(row) for row in rows])
        cursor.close()


def compiled(conn: Connection, name: str, build: Callable[[], ClauseElement]) -> Compiled:
    """The statement ``name`` compiled for ``conn`` (cached on the connection)."""
    cache: dict[str, Compiled] = conn.info.setdefault("stead.compiled", {})
    found = cache.get(name)
    if found is None:
        found = cache[name] = Compiled(build(), conn)
    return found
