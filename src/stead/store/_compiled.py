"""Statements of the hot paths, compiled once per connection and run on the DBAPI cursor.

SQLAlchemy's per-execution work (cache key, parameter coercion, result objects)
costs more than the SQLite commit itself, and more than ten times the query
for the session lookup with its derived status. The hot statements (append an
event, look a session up, read events after a seq) are still written once as
Core constructs with bind parameters, compiled for the connection's dialect on
first use; the column types' own bind and result processors are applied, so
values are exactly what SQLAlchemy would write and read.
"""

from __future__ import annotations

from collections import namedtuple
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from sqlalchemy import Connection, Float
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
        # Values fixed in the statement itself (literals) are sent with every execution.
        self._fixed = {name: b.value for name, b in compiled.binds.items() if not b.required}
        for name, bind in compiled.binds.items():
            processor = bind.type.dialect_impl(dialect).bind_processor(dialect)
            if processor is not None:
                self._processors[bind.key] = processor
                self._processors[name] = processor
        # Positional drivers (SQLite): each slot's name, processor and fixed value,
        # worked out once, so an execution only fills the slots in.
        self._slots = [
            (name, self._processors.get(name), name in self._fixed) for name in self._order or ()
        ]
        columns = list(getattr(statement, "selected_columns", ()))
        self._row = namedtuple("Row", [c.key for c in columns]) if columns else None
        self._readers: list[Processor | None] = [_reader(c.type, dialect) for c in columns]

    def params(self, values: Mapping[str, Any]) -> Any:
        if self._order is not None:
            filled = []
            for name, processor, has_fixed in self._slots:
                value = values[name] if name in values or not has_fixed else self._fixed[name]
                filled.append(value if processor is None else processor(value))
            return tuple(filled)
        processors = self._processors
        return {
            k: (processors[k](v) if k in processors else v)
            for k, v in {**self._fixed, **values}.items()
        }

    def execute(self, conn: Connection, values: Mapping[str, Any]) -> Any:
        cursor = conn.connection.driver_connection.cursor()  # type: ignore[union-attr]
        cursor.execute(self.sql, self.params(values))
        return cursor

    def fetch(self, conn: Connection, values: Mapping[str, Any]) -> list[Any]:
        """Rows as named tuples, each value read through its column type."""
        assert self._row is not None, "fetch needs a SELECT"
        cursor = self.execute(conn, values)
        rows = cursor.fetchall()
        cursor.close()
        readers = self._readers
        return [
            self._row(*[v if r is None else r(v) for r, v in zip(readers, row, strict=True)])
            for row in rows
        ]

    def execute_many(self, conn: Connection, rows: Sequence[Mapping[str, Any]]) -> None:
        cursor = conn.connection.driver_connection.cursor()  # type: ignore[union-attr]
        cursor.executemany(self.sql, [self.params(row) for row in rows])
        cursor.close()


def _float(value: Any) -> float | None:
    return None if value is None else float(value)


def _reader(type_: Any, dialect: Any) -> Processor | None:
    # A float's processor on PostgreSQL needs the cursor's column type code, which
    # a compiled read does not have; every driver returns a float or a number.
    if isinstance(type_, Float):
        return _float
    result: Processor | None = type_.dialect_impl(dialect).result_processor(dialect, None)
    return result


def compiled(conn: Connection, name: str, build: Callable[[], ClauseElement]) -> Compiled:
    """The statement ``name`` compiled for ``conn`` (cached on the connection)."""
    cache: dict[str, Compiled] = conn.info.setdefault("stead.compiled", {})
    found = cache.get(name)
    if found is None:
        found = cache[name] = Compiled(build(), conn)
    return found
