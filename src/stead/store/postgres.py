"""PostgreSQL connection setup: psycopg 3, bounded pools, a timeout on every wait.

Imported only for a ``postgresql://`` URL, so a SQLite server never loads the
driver or the dialect. Write transactions run at READ COMMITTED on several
workers and in several processes at once; the query modules keep their
invariants with row locks (``_locks.py``). Reads run at REPEATABLE READ, one
snapshot per transaction, as a SQLite read does; a read of one statement runs
without a transaction (``ConnectionWorkers.run``'s ``single``), its own snapshot.

JSON is stored as ``jsonb``, which cannot hold the character U+0000 in a string:
the serialiser writes U+FFFD in its place (a NUL in a tool's output must not
fail the turn that reports it). SQLite keeps U+0000 as it is.
"""

from __future__ import annotations

import re
from typing import Any

from sqlalchemy import URL, Engine, create_engine, make_url

from stead.jsonvalues import dumps_checked
from stead.store.errors import StoreUnavailable

CONNECT_TIMEOUT_SECONDS = 10
"""Longest wait for the server to accept a connection."""
POOL_TIMEOUT_SECONDS = 10.0
"""Longest wait for a free connection of the pool."""
LOCK_TIMEOUT_MS = 10_000
"""Longest wait for a row lock, as long as SQLite's busy timeout."""
DRIVERS = ("postgresql", "postgres", "postgresql+psycopg")
_NUL = re.compile(r"(?<!\\)((?:\\\\)*)\\u0000")
"""An escaped U+0000 in JSON text (after an even number of backslashes, so not
the text ``\\u0000`` itself)."""


def is_postgres(url: str) -> bool:
    return url.split("://", 1)[0] in DRIVERS


def engine_url(url: str) -> URL:
    """``url`` on the psycopg 3 driver (SQLAlchemy's default would be psycopg2)."""
    try:
        parsed = make_url(url)
    except Exception as exc:  # SQLAlchemy's ArgumentError, and ValueError from a bad port
        raise StoreUnavailable(f"database URL is not a valid URL: {exc}") from None
    return parsed.set(drivername="postgresql+psycopg")


def dumps_jsonb(value: Any) -> str:
    """``dumps_checked``, with U+0000 in strings written as U+FFFD (module docstring)."""
    text = dumps_checked(value)
    return _NUL.sub(r"\1\\ufffd", text) if "\\u0000" in text else text


def _engine(url: URL, pool_size: int, isolation: str) -> Engine:
    # The URL's own server options (``?options=-c...``) are kept, after ours, and
    # its ``connect_timeout`` (seconds) replaces ours.
    given = url.query.get("options", "")
    options = " ".join([f"-c lock_timeout={LOCK_TIMEOUT_MS}", *_strings(given)])
    connect_timeout = _connect_timeout(url.query.get("connect_timeout"))
    return create_engine(
        url.difference_update_query(["options", "connect_timeout"]),
        pool_size=pool_size,
        max_overflow=0,
        pool_timeout=POOL_TIMEOUT_SECONDS,
        pool_pre_ping=True,
        isolation_level=isolation,
        json_serializer=dumps_jsonb,
        connect_args={
            "connect_timeout": connect_timeout,
            "options": options,
            "application_name": "stead",
        },
    )


def _connect_timeout(given: str | tuple[str, ...] | None) -> int:
    """The URL's ``connect_timeout``, else ours; never none (0 waits forever)."""
    if given is None:
        return CONNECT_TIMEOUT_SECONDS
    text = given if isinstance(given, str) else given[-1]
    if not (text.isascii() and text.isdigit()) or int(text) < 1:
        raise StoreUnavailable(
            f"connect_timeout={text!r} in the database URL: give whole seconds, 1 or more"
        )
    return int(text)


def _strings(value: str | tuple[str, ...]) -> tuple[str, ...]:
    return (value,) if isinstance(value, str) else value


def postgres_engines(url: str, writers: int, readers: int) -> tuple[Engine, Engine]:
    """(writer, reader) engines on one database."""
    parsed = engine_url(url)
    writer = _engine(parsed, writers, "READ COMMITTED")
    reader = _engine(parsed, readers, "REPEATABLE READ")
    return writer, reader


SECRET_PARAMETERS = frozenset({"password", "sslpassword"})
"""libpq's connection parameters that a URL's query may carry and that are secret."""


def shown(url: str) -> str:
    """``url`` as it may be printed: without its password, whether in its user
    part or, as libpq also takes it, in its query."""
    try:
        parsed = make_url(url)
        query = {
            k: "REDACTED" if k.lower() in SECRET_PARAMETERS else v for k, v in parsed.query.items()
        }
        return parsed.set(query=query).render_as_string(hide_password=True)
    except Exception:
        return "(an unparsable URL)"
