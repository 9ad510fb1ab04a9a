"""INSERT ... ON CONFLICT DO NOTHING tells a new row from an existing one on both
backends. The store reads it from RETURNING (the sandbox lease acquire, as a
compiled statement on the driver's cursor, and the idempotency key claim), since
through SQLAlchemy psycopg reports ``rowcount`` -1 for every INSERT; this pins
both facts."""

from __future__ import annotations

import pytest
from sqlalchemy import Column, Integer, MetaData, String, Table, bindparam

from stead.store._compiled import compiled
from stead.store._leases import _insert
from tests.databases import BACKENDS
from tests.databases import engine as engine_of

pytestmark = pytest.mark.parametrize("database_url", BACKENDS, indirect=True)


def test_inserted_is_true_for_a_new_row_and_false_on_a_conflict(database_url: str) -> None:
    table = Table(
        "upserted", MetaData(), Column("k", String, primary_key=True), Column("v", Integer)
    )
    engine = engine_of(database_url)
    try:
        with engine.begin() as conn:
            table.create(conn)

            def statement() -> object:
                insert = _insert(conn, table).values(k=bindparam("k"), v=bindparam("v"))
                return insert.on_conflict_do_nothing(index_elements=["k"]).returning(table.c.k)

            def put(key: str, value: int) -> bool:
                cursor = compiled(conn, "upserted", statement).execute(conn, {"k": key, "v": value})
                made = cursor.fetchone() is not None
                cursor.close()
                return made

            assert put("a", 1) is True
            assert put("a", 2) is False
            assert put("b", 3) is True
            assert dict([(r.k, r.v) for r in conn.execute(table.select())]) == {"a": 1, "b": 3}
            if conn.dialect.name == "postgresql":
                again = _insert(conn, table).values(k="c", v=4).on_conflict_do_nothing()
                assert conn.execute(again).rowcount == -1, "why rowcount is not read"
    finally:
        engine.dispose()
