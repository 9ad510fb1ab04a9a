"""Row locks on PostgreSQL (``_locks.py``): a session's lock, taken once per
transaction, is taken again by the next transaction on the same connection."""

from __future__ import annotations

import psycopg
import pytest
from sqlalchemy import text
from sqlalchemy.exc import OperationalError

from stead.store import SqlStore, _locks
from tests.databases import engine
from tests.unit.conftest import new_session

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.parametrize(
        "database_url", [pytest.param("postgres", marks=pytest.mark.postgres)], indirect=True
    ),
]
TRY_LOCK = "SELECT id FROM sessions WHERE id = :id FOR UPDATE NOWAIT"


async def test_each_transaction_takes_the_sessions_lock_again(
    store: SqlStore, database_url: str
) -> None:
    _, session_id = await new_session(store)
    holder, other = engine(database_url), engine(database_url)
    try:
        with holder.connect() as conn, other.connect() as rival:
            for _ in range(2):
                with conn.begin():
                    _locks.session(conn, session_id)
                    _locks.session(conn, session_id)  # held already: nothing sent
                    with pytest.raises(OperationalError) as refused, rival.begin():
                        rival.execute(text(TRY_LOCK), {"id": session_id})
                    assert isinstance(refused.value.orig, psycopg.errors.LockNotAvailable)
                with rival.begin():  # free once the holder committed
                    rival.execute(text(TRY_LOCK), {"id": session_id})
    finally:
        holder.dispose()
        other.dispose()
