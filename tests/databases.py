"""The databases tests run the store on: a SQLite file, or a PostgreSQL schema.

PostgreSQL is the server on 127.0.0.1:5432 (``STEAD_TEST_POSTGRES_URL`` names
another). Each test run (each xdist worker) creates a database of its own with a
unique name and drops it at the end; each test gets a schema of its own in it,
reached by a URL whose ``search_path`` names that schema. Without a server the
PostgreSQL tests are skipped, unless ``STEAD_TEST_POSTGRES=require`` (set by
``scripts/test``, so CI) makes that a failure.

A test that opens the store at once (the ``store`` fixture) gets a schema that
an earlier test of the run left, emptied, instead of a new one: the seventy
statements that build stead's tables and indexes take PostgreSQL a tenth of a
second, emptying them a millisecond, and three hundred tests do it. A schema
goes back for reuse only when its tables and columns are still the ones the
migrations built.
"""

from __future__ import annotations

import base64
import os
import secrets
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import quote

import pytest
from sqlalchemy import Connection, Engine, create_engine, make_url

ADMIN_URL = os.environ.get(
    "STEAD_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/postgres"
)
CONNECT_TIMEOUT = 5
BACKENDS = ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]
"""Parameters of the ``database_url`` fixture: the store's conformance tests run on both."""
MEMORY = "memory"
"""The ``database_url`` of the in-memory store (``InMemoryStore``): no database at all."""
STORES = [*BACKENDS, MEMORY]
"""``BACKENDS`` and the in-memory store: the parameters of the store's conformance
tests. A test among them that reaches into SQL or the database's URL, or needs
transactions that run at once, is marked ``sql`` and runs on the databases only."""


def engine(url: str) -> Engine:
    """A plain engine on ``url``, for a test's own reads and writes (psycopg 3 for PostgreSQL)."""
    if url.startswith("postgresql"):
        from stead.store.postgres import engine_url

        parsed = engine_url(url)
        options = parsed.query.get("options")
        args = {"connect_timeout": CONNECT_TIMEOUT}
        if options:
            args["options"] = options  # type: ignore[assignment]
        return create_engine(parsed.difference_update_query(["options"]), connect_args=args)
    return create_engine(url)


def _admin(database: str = "postgres") -> Engine:
    url = make_url(ADMIN_URL).set(drivername="postgresql+psycopg", database=database)
    return create_engine(
        url, isolation_level="AUTOCOMMIT", connect_args={"connect_timeout": CONNECT_TIMEOUT}
    )


@dataclass(frozen=True)
class PostgresRun:
    """The database of this test run."""

    name: str
    emptied: list[str] = field(default_factory=list)
    """Migrated schemas that no test uses now, empty (``migrated_schema``)."""
    built: list[tuple[str, str, str]] = field(default_factory=list)
    """The columns (table, column, type) of a schema the migrations built."""

    def url(self, schema: str | None = None) -> str:
        base = make_url(ADMIN_URL).set(database=self.name).render_as_string(hide_password=False)
        if schema is None:
            return base
        return f"{base}?options={quote(f'-csearch_path={schema}')}"

    def new_schema(self) -> str:
        schema = f"t_{secrets.token_hex(6)}"
        self._run(f"CREATE SCHEMA {schema}")
        return schema

    def drop_schema(self, schema: str) -> None:
        self._run(f"DROP SCHEMA {schema} CASCADE")

    def migrated_schema(self) -> str:
        """A schema at the migrations' head with no rows but those the migrations
        seed; ``give_back`` it after the test."""
        if self.emptied:
            return self.emptied.pop()
        from stead.store import migrate

        schema = self.new_schema()
        built = engine(self.url(schema))
        try:
            migrate.upgrade(built)
            with built.connect() as conn:
                columns = _columns(conn)
        finally:
            built.dispose()
        if not self.built:
            self.built.extend(columns)
        return schema

    def give_back(self, schema: str) -> None:
        """Empties a schema from ``migrated_schema`` for the next test, or drops
        it when the test changed its tables or left a lock on them."""
        from sqlalchemy import text

        from stead.store import migrate
        from stead.store.tables import metadata

        used = engine(self.url(schema))
        try:
            with used.begin() as conn:
                conn.execute(text("SET LOCAL lock_timeout = '2s'"))
                version = conn.execute(text("SELECT version_num FROM alembic_version")).all()
                if _columns(conn) != self.built or version != [(migrate.HEAD,)]:
                    raise ValueError(f"schema {schema} is not as the migrations built it")
                deletes = [f"DELETE FROM {t.name}" for t in reversed(metadata.sorted_tables)]
                conn.exec_driver_sql("; ".join(deletes))
                migrate.seed(conn)  # the next test starts as on a new database
                conn.execute(
                    text(
                        "SELECT setval(format('%I.%I', schemaname, sequencename), 1, false)"
                        " FROM pg_sequences WHERE schemaname = current_schema()"
                    )
                )
        except Exception:
            used.dispose()
            self.drop_schema(schema)
            return
        used.dispose()
        self.emptied.append(schema)

    def _run(self, sql: str) -> None:
        from sqlalchemy import text

        admin = _admin(self.name)
        try:
            with admin.connect() as conn:
                conn.execute(text(sql))
        finally:
            admin.dispose()


def _columns(conn: Connection) -> list[tuple[str, str, str]]:
    from sqlalchemy import text

    found = conn.execute(
        text(
            "SELECT table_name, column_name, data_type FROM information_schema.columns"
            " WHERE table_schema = current_schema() ORDER BY 1, 2"
        )
    )
    return [(str(t), str(c), str(d)) for t, c, d in found]


def serve_env(url: str) -> dict[str, str]:
    """What ``stead serve`` needs to run on the PostgreSQL ``url``: it refuses to
    start there without a sealing key shared by every process of the database."""
    key = base64.b64encode(secrets.token_bytes(32)).decode()
    return {"STEAD_DATABASE_URL": url, "STEAD_SECRET_KEY": key}


def start_postgres_run() -> PostgresRun | str:
    """A new database for this run, or why there is none."""
    from sqlalchemy import text

    name = f"stead_test_{os.getpid()}_{secrets.token_hex(4)}"
    admin = _admin()
    try:
        with admin.connect() as conn:
            conn.execute(text(f"CREATE DATABASE {name}"))
    except Exception as exc:
        return f"PostgreSQL at {ADMIN_URL} cannot be used: {str(exc).splitlines()[0]}"
    finally:
        admin.dispose()
    return PostgresRun(name)


def end_postgres_run(run: PostgresRun) -> None:
    from sqlalchemy import text

    admin = _admin()
    try:
        with admin.connect() as conn:
            conn.execute(text(f"DROP DATABASE IF EXISTS {run.name} WITH (FORCE)"))
    finally:
        admin.dispose()


def postgres_required() -> bool:
    return os.environ.get("STEAD_TEST_POSTGRES") == "require"


@pytest.fixture(scope="session")
def postgres_run() -> Iterator[PostgresRun]:
    found = start_postgres_run()
    if isinstance(found, str):
        if postgres_required():
            pytest.fail(found)
        pytest.skip(found)
    yield found
    end_postgres_run(found)


def sqlite_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'stead.db'}"


@pytest.fixture
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """An empty database: SQLite unless the test is parametrised with ``BACKENDS``."""
    backend = getattr(request, "param", "sqlite")
    if backend == MEMORY:
        yield MEMORY
        return
    if backend == "sqlite":
        yield sqlite_url(tmp_path)
        return
    run: PostgresRun = request.getfixturevalue("postgres_run")
    if "store" in request.fixturenames:
        reused = run.migrated_schema()
        yield run.url(reused)
        run.give_back(reused)
        return
    schema = run.new_schema()
    yield run.url(schema)
    run.drop_schema(schema)
