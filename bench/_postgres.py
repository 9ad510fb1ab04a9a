"""PostgreSQL for the benchmarks: schemas of their own, and what the server
itself takes for the steps stead's cross-process path is made of. Not a
benchmark itself.
"""

from __future__ import annotations

import os
import secrets
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from urllib.parse import quote

import psycopg

POSTGRES_URL = os.environ.get("BENCH_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/postgres")
CONNECT_TIMEOUT_S = 5
WAIT_S = 10.0
CHANNEL = "stead_bench_floor"


@contextmanager
def postgres_schema() -> Iterator[str]:
    """A URL of a new schema on ``POSTGRES_URL``, dropped afterwards."""
    schema = f"stead_bench_{secrets.token_hex(6)}"
    with psycopg.connect(POSTGRES_URL, autocommit=True, connect_timeout=CONNECT_TIMEOUT_S) as conn:
        conn.execute(f"CREATE SCHEMA {schema}")
    try:
        joiner = "&" if "?" in POSTGRES_URL else "?"
        yield f"{POSTGRES_URL}{joiner}options={quote(f'-csearch_path={schema}')}"
    finally:
        with psycopg.connect(
            POSTGRES_URL, autocommit=True, connect_timeout=CONNECT_TIMEOUT_S
        ) as conn:
            conn.execute(f"DROP SCHEMA {schema} CASCADE")


@dataclass
class Floor:
    """psycopg straight to the server, no stead: a durable insert and commit, a
    NOTIFY until another connection LISTENing has it, and a read of one row by
    key: the steps an event takes from one process to a reader of another."""

    url: str
    commits: list[float] = field(default_factory=list)
    notifies: list[float] = field(default_factory=list)
    reads: list[float] = field(default_factory=list)

    def __enter__(self) -> Floor:
        self._conn = psycopg.connect(self.url, connect_timeout=CONNECT_TIMEOUT_S)
        self._sender = psycopg.connect(self.url, autocommit=True, connect_timeout=CONNECT_TIMEOUT_S)
        self._listener = psycopg.connect(
            self.url, autocommit=True, connect_timeout=CONNECT_TIMEOUT_S
        )
        # A real table: a temporary one skips the write-ahead log and its flush.
        self._conn.execute("CREATE TABLE floor_events (id bigserial PRIMARY KEY, body jsonb)")
        self._conn.commit()
        self._listener.execute(f"LISTEN {CHANNEL}")
        return self

    def __exit__(self, *exc: object) -> None:
        for conn in (self._conn, self._sender, self._listener):
            conn.close()

    def sample(self) -> None:
        start = time.perf_counter()
        cursor = self._conn.execute("INSERT INTO floor_events (body) VALUES ('{}') RETURNING id")
        row = cursor.fetchone()
        self._conn.commit()
        self.commits.append(time.perf_counter() - start)
        start = time.perf_counter()
        self._sender.execute("SELECT pg_notify(%s, 'e')", (CHANNEL,))
        for _ in self._listener.notifies(timeout=WAIT_S, stop_after=1):
            pass
        self.notifies.append(time.perf_counter() - start)
        start = time.perf_counter()
        self._conn.execute("SELECT body FROM floor_events WHERE id = %s", row).fetchone()
        self._conn.commit()
        self.reads.append(time.perf_counter() - start)
