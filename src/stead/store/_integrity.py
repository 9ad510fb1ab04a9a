"""Integrity of a stored database: what ``stead db check`` reports and repairs.

Beyond the engine's own checks, it looks for JSON values that stead versions
before the strict body parser could store but no read can render (a number that
overflowed to infinity, an unpaired surrogate; see ``stead.jsonvalues``) and
rewrites them renderable. The ``0004`` migration runs the same repair, so a data
directory heals on upgrade.

Only SQLite can hold such values: its JSON columns are text. PostgreSQL's
``jsonb`` refuses them on write, so there is nothing to scan there.
"""

from __future__ import annotations

import json

from sqlalchemy import Connection, text

from stead.jsonvalues import INT_MAX, dumps_checked, problem, repaired
from stead.store.base import IntegrityFinding as Finding

JsonColumns = tuple[tuple[str, tuple[str, ...], tuple[str, ...]], ...]
"""(table, primary key, JSON columns) of tables that store JSON."""
JSON_COLUMNS: JsonColumns = (
    ("agent_versions", ("agent_id", "version"), ("definition",)),
    ("environments", ("id",), ("config", "metadata")),
    ("sessions", ("id",), ("agent", "metadata", "vault_ids", "budget", "resources", "usage")),
    ("events", ("session_id", "seq"), ("body",)),
    ("pending", ("session_id", "id"), ("body",)),
    ("ops", ("op_key",), ("result",)),
)
"""(table, primary key, JSON columns) of every table that stores JSON."""
SUSPECT = ("%Infinity%", "%NaN%", "%\\ud%")
"""What the text of an unrenderable value contains (json.dumps escapes surrogates as \\udXXX);
a cheap filter in SQL before each candidate is parsed."""
LONG_NUMBER = "*" + "[0-9]" * len(str(INT_MAX)) + "*"
"""A run of as many digits as the largest 64-bit integer has (GLOB): what the text of
an integer outside the 64-bit range contains, and what the ``LIKE`` patterns miss."""


def engine_findings(conn: Connection) -> list[Finding]:
    """The engine's own integrity and foreign-key checks; reads only, so a
    reader's snapshot serves (none on PostgreSQL)."""
    if conn.dialect.name != "sqlite":
        return []
    return _engine_findings(conn)


def json_findings(
    conn: Connection, *, repair: bool, tables: JsonColumns = JSON_COLUMNS
) -> list[Finding]:
    """The unrenderable JSON values only (what the ``0004`` migration repairs, in
    the ``tables`` of its own schema)."""
    if conn.dialect.name != "sqlite":
        return []
    findings = []
    for table, key, columns in tables:
        for column in columns:
            findings += _column_findings(conn, table, key, column, repair=repair)
    return findings


def _engine_findings(conn: Connection) -> list[Finding]:
    findings = []
    for (line,) in conn.execute(text("PRAGMA integrity_check")):
        if line != "ok":
            findings.append(Finding("database", str(line)))
    for row in conn.execute(text("PRAGMA foreign_key_check")):
        findings.append(Finding(f"{row[0]} row {row[1]}", f"no {row[2]} row it refers to"))
    return findings


def _column_findings(
    conn: Connection, table: str, key: tuple[str, ...], column: str, *, repair: bool
) -> list[Finding]:
    suspect = " OR ".join(f"{column} LIKE :p{i}" for i in range(len(SUSPECT)))
    rows = conn.execute(
        text(f"SELECT {', '.join(key)}, {column} FROM {table} WHERE {suspect} OR {column} GLOB :n"),
        {"n": LONG_NUMBER, **{f"p{i}": pattern for i, pattern in enumerate(SUSPECT)}},
    ).all()
    findings = []
    for row in rows:
        *ident, stored = row
        value = json.loads(stored)  # Python's reader accepts NaN and Infinity
        found = problem(value, root=column)
        if found is None:
            continue
        where = f"{table} {'/'.join(str(v) for v in ident)}"
        if repair:
            match = " AND ".join(f"{k} = :k{i}" for i, k in enumerate(key))
            healed = dumps_checked(repaired(value))
            conn.execute(
                text(f"UPDATE {table} SET {column} = :v WHERE {match}"),
                {"v": healed, **{f"k{i}": v for i, v in enumerate(ident)}},
            )
        findings.append(Finding(where, f"{found[0]}: {found[1]}", repaired=repair))
    return findings
