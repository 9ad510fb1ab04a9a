"""The sandbox host's own durable records: sandboxes, their snapshots, exec results.

The host sleeps and wakes sandboxes on its own, also while no brain is
running, so it keeps what it needs for that here rather than in the brain's
store: which uid and config each sandbox has, which snapshot is its latest,
and each exec's result under its op key (DESIGN rule 5). A host's catalogue
serves that host only.

SQLite in WAL mode with ``synchronous=NORMAL``: a commit survives the host
process being killed, not a power cut. That is enough here: a power cut kills
every sandbox and its commands too, and an op key the host no longer knows is
reported ``unknown``, which the brain treats as in doubt, never as "run it".
One connection, used from one worker thread at a time.
"""

from __future__ import annotations

import json
import sqlite3
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import anyio
from anyio import to_thread

from stead.sandbox_host.uids import UidRange

T = TypeVar("T")

SCHEMA_VERSION = 3
SCHEMA = """
CREATE TABLE IF NOT EXISTS sandboxes (
    id TEXT PRIMARY KEY,
    uid INTEGER NOT NULL UNIQUE,
    config TEXT NOT NULL,
    created_at REAL NOT NULL,
    active_seconds REAL NOT NULL DEFAULT 0,
    destroyed_at REAL,
    placement INTEGER
);
CREATE TABLE IF NOT EXISTS snapshots (
    id TEXT PRIMARY KEY,
    sandbox_id TEXT NOT NULL,
    blob_key TEXT NOT NULL,
    size INTEGER NOT NULL,
    sha256 TEXT NOT NULL,
    created_at REAL NOT NULL,
    expires_at REAL NOT NULL,
    deleted_at REAL
);
CREATE INDEX IF NOT EXISTS snapshots_by_sandbox ON snapshots (sandbox_id, created_at);
CREATE INDEX IF NOT EXISTS snapshots_by_expiry ON snapshots (expires_at) WHERE deleted_at IS NULL;
CREATE TABLE IF NOT EXISTS execs (
    sandbox_id TEXT NOT NULL,
    op_key TEXT NOT NULL,
    state TEXT NOT NULL,
    result TEXT,
    updated_at REAL NOT NULL DEFAULT 0,
    PRIMARY KEY (sandbox_id, op_key)
);
CREATE INDEX IF NOT EXISTS execs_by_age ON execs (updated_at);
"""
MIGRATIONS = {
    # version 1 -> 2: exec records get an age, so old ones can be pruned;
    # existing ones count from the upgrade.
    2: [
        "ALTER TABLE execs ADD COLUMN updated_at REAL NOT NULL DEFAULT 0",
        "UPDATE execs SET updated_at = strftime('%s', 'now')",
    ],
    # version 2 -> 3: the placement each sandbox's copy here belongs to
    # (``placements.py``); none for those made before.
    3: ["ALTER TABLE sandboxes ADD COLUMN placement INTEGER"],
}


class CatalogueTooNew(Exception):
    """The catalogue was made by a newer stead: this host refuses it, writing nothing."""


@dataclass(frozen=True, slots=True)
class SandboxRow:
    id: str
    uid: int
    config: dict[str, Any]
    active_seconds: float
    destroyed_at: float | None
    placement: int | None = None
    """The placement this host's copy belongs to; None: never placed (made
    before placements, or by an unleased caller)."""


@dataclass(frozen=True, slots=True)
class SnapshotRow:
    id: str
    sandbox_id: str
    blob_key: str
    size: int
    sha256: str
    created_at: float
    expires_at: float
    deleted_at: float | None


class Catalogue:
    def __init__(self, connection: sqlite3.Connection) -> None:
        self._db = connection
        self._lock = threading.Lock()
        self._limiter = anyio.CapacityLimiter(1)

    @classmethod
    def open(cls, path: Path) -> Catalogue:
        path.parent.mkdir(parents=True, exist_ok=True)
        db = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA synchronous=NORMAL")
        db.execute("PRAGMA busy_timeout=5000")
        _migrate(db)
        return cls(db)

    def close(self) -> None:
        with self._lock:
            self._db.close()

    async def _run(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        def locked() -> T:
            with self._lock:
                return fn(self._db)

        return await to_thread.run_sync(locked, limiter=self._limiter)

    # -- sandboxes --------------------------------------------------------------

    async def sandbox(self, sandbox_id: str) -> SandboxRow | None:
        def read(db: sqlite3.Connection) -> SandboxRow | None:
            row = db.execute(
                f"SELECT {SANDBOX_COLUMNS} FROM sandboxes WHERE id=?",
                (sandbox_id,),
            ).fetchone()
            return _sandbox(row) if row else None

        return await self._run(read)

    async def create_sandbox(
        self, sandbox_id: str, config: dict[str, Any], *, uids: UidRange, now: float
    ) -> SandboxRow:
        """The sandbox's row, created with the next free uid of ``uids`` if
        missing (``IsolationUnavailable`` when none is left); a destroyed
        sandbox comes back with its uid and the new config."""

        def create(db: sqlite3.Connection) -> SandboxRow:
            db.execute("BEGIN IMMEDIATE")
            try:
                row = db.execute(
                    f"SELECT {SANDBOX_COLUMNS} FROM sandboxes WHERE id=?",
                    (sandbox_id,),
                ).fetchone()
                if row is None:
                    (top,) = db.execute(
                        "SELECT MAX(uid) FROM sandboxes WHERE uid BETWEEN ? AND ?",
                        (uids.base, uids.last),
                    ).fetchone()
                    uid = uids.sandbox_uid_after(top)
                    db.execute(
                        "INSERT INTO sandboxes (id, uid, config, created_at) VALUES (?,?,?,?)",
                        (sandbox_id, uid, json.dumps(config), now),
                    )
                else:
                    db.execute(
                        "UPDATE sandboxes SET config=?, destroyed_at=NULL WHERE id=?",
                        (json.dumps(config), sandbox_id),
                    )
                db.execute("COMMIT")
            except BaseException:
                db.execute("ROLLBACK")
                raise
            found = db.execute(
                f"SELECT {SANDBOX_COLUMNS} FROM sandboxes WHERE id=?",
                (sandbox_id,),
            ).fetchone()
            return _sandbox(found)

        return await self._run(create)

    async def uid_span(self) -> tuple[int, int] | None:
        """The lowest and highest uid any sandbox ever had here; None for none."""

        def read(db: sqlite3.Connection) -> tuple[int, int] | None:
            low, high = db.execute("SELECT MIN(uid), MAX(uid) FROM sandboxes").fetchone()
            return (low, high) if low is not None else None

        return await self._run(read)

    async def set_config(self, sandbox_id: str, config: dict[str, Any]) -> None:
        await self._run(
            lambda db: db.execute(
                "UPDATE sandboxes SET config=? WHERE id=?", (json.dumps(config), sandbox_id)
            )
        )

    async def take_placement(
        self, sandbox_id: str, placement: int, *, latest: SnapshotRow | None, keep_local: bool
    ) -> list[SnapshotRow]:
        """Records that the sandbox's copy here belongs to ``placement``. Unless
        ``keep_local``, its snapshots here are replaced by ``latest`` (the
        placement's workspace; None: empty): the others are forgotten and
        returned, for their blobs to be deleted."""

        def take(db: sqlite3.Connection) -> list[SnapshotRow]:
            db.execute("BEGIN IMMEDIATE")
            try:
                db.execute("UPDATE sandboxes SET placement=? WHERE id=?", (placement, sandbox_id))
                dropped: list[SnapshotRow] = []
                if not keep_local:
                    rows = db.execute(
                        f"SELECT {SNAPSHOT_COLUMNS} FROM snapshots WHERE sandbox_id=?",
                        (sandbox_id,),
                    ).fetchall()
                    kept = latest.id if latest is not None else None
                    dropped = [SnapshotRow(*row) for row in rows if row[0] != kept]
                    db.execute(
                        "DELETE FROM snapshots WHERE sandbox_id=? AND id IS NOT ?",
                        (sandbox_id, kept),
                    )
                    if latest is not None:
                        db.execute(
                            f"INSERT OR REPLACE INTO snapshots ({SNAPSHOT_COLUMNS}) "
                            "VALUES (?,?,?,?,?,?,?,?)",
                            (
                                latest.id,
                                sandbox_id,
                                latest.blob_key,
                                latest.size,
                                latest.sha256,
                                latest.created_at,
                                latest.expires_at,
                                latest.deleted_at,
                            ),
                        )
                db.execute("COMMIT")
            except BaseException:
                db.execute("ROLLBACK")
                raise
            return dropped

        return await self._run(take)

    async def add_active_seconds(self, sandbox_id: str, seconds: float) -> None:
        await self._run(
            lambda db: db.execute(
                "UPDATE sandboxes SET active_seconds = active_seconds + ? WHERE id=?",
                (seconds, sandbox_id),
            )
        )

    async def mark_destroyed(self, sandbox_id: str, *, now: float) -> None:
        def mark(db: sqlite3.Connection) -> None:
            db.execute("UPDATE sandboxes SET destroyed_at=? WHERE id=?", (now, sandbox_id))
            db.execute("DELETE FROM execs WHERE sandbox_id=?", (sandbox_id,))

        await self._run(mark)

    async def live_sandboxes(self) -> list[SandboxRow]:
        def read(db: sqlite3.Connection) -> list[SandboxRow]:
            rows = db.execute(
                f"SELECT {SANDBOX_COLUMNS} FROM sandboxes WHERE destroyed_at IS NULL"
            ).fetchall()
            return [_sandbox(row) for row in rows]

        return await self._run(read)

    # -- snapshots --------------------------------------------------------------

    async def add_snapshot(self, snapshot: SnapshotRow) -> None:
        await self._run(
            lambda db: db.execute(
                "INSERT INTO snapshots (id, sandbox_id, blob_key, size, sha256, created_at, "
                "expires_at) VALUES (?,?,?,?,?,?,?)",
                (
                    snapshot.id,
                    snapshot.sandbox_id,
                    snapshot.blob_key,
                    snapshot.size,
                    snapshot.sha256,
                    snapshot.created_at,
                    snapshot.expires_at,
                ),
            )
        )

    async def latest_snapshot(self, sandbox_id: str) -> SnapshotRow | None:
        """The newest snapshot, deleted (expired) or not: a deleted latest one
        means the workspace is gone, which the caller must report."""

        def read(db: sqlite3.Connection) -> SnapshotRow | None:
            row = db.execute(
                f"SELECT {SNAPSHOT_COLUMNS} FROM snapshots WHERE sandbox_id=? "
                "ORDER BY created_at DESC, rowid DESC LIMIT 1",
                (sandbox_id,),
            ).fetchone()
            return SnapshotRow(*row) if row else None

        return await self._run(read)

    async def snapshots(self, sandbox_id: str) -> list[SnapshotRow]:
        def read(db: sqlite3.Connection) -> list[SnapshotRow]:
            rows = db.execute(
                f"SELECT {SNAPSHOT_COLUMNS} FROM snapshots WHERE sandbox_id=? "
                "ORDER BY created_at, rowid",
                (sandbox_id,),
            ).fetchall()
            return [SnapshotRow(*row) for row in rows]

        return await self._run(read)

    async def replaceable_snapshots(self, sandbox_id: str, keep: str) -> list[SnapshotRow]:
        """Live snapshots older than ``keep`` (a verified newer one)."""

        def read(db: sqlite3.Connection) -> list[SnapshotRow]:
            rows = db.execute(
                f"SELECT {SNAPSHOT_COLUMNS} FROM snapshots WHERE sandbox_id=? AND id<>? "
                "AND deleted_at IS NULL",
                (sandbox_id, keep),
            ).fetchall()
            return [SnapshotRow(*row) for row in rows]

        return await self._run(read)

    async def expired_snapshots(self, *, now: float) -> list[SnapshotRow]:
        def read(db: sqlite3.Connection) -> list[SnapshotRow]:
            rows = db.execute(
                f"SELECT {SNAPSHOT_COLUMNS} FROM snapshots WHERE deleted_at IS NULL "
                "AND expires_at <= ?",
                (now,),
            ).fetchall()
            return [SnapshotRow(*row) for row in rows]

        return await self._run(read)

    async def mark_snapshot_deleted(self, snapshot_id: str, *, now: float) -> None:
        await self._run(
            lambda db: db.execute(
                "UPDATE snapshots SET deleted_at=? WHERE id=?", (now, snapshot_id)
            )
        )

    async def drop_snapshots(self, sandbox_id: str) -> None:
        """Forgets every snapshot of the sandbox (their blobs are deleted): its
        next wake starts from an empty workspace."""
        await self._run(
            lambda db: db.execute("DELETE FROM snapshots WHERE sandbox_id=?", (sandbox_id,))
        )

    # -- exec results -----------------------------------------------------------

    async def exec_record(self, sandbox_id: str, op_key: str) -> tuple[str, str | None] | None:
        def read(db: sqlite3.Connection) -> tuple[str, str | None] | None:
            row = db.execute(
                "SELECT state, result FROM execs WHERE sandbox_id=? AND op_key=?",
                (sandbox_id, op_key),
            ).fetchone()
            return (row[0], row[1]) if row else None

        return await self._run(read)

    async def put_exec(
        self, sandbox_id: str, op_key: str, state: str, result: str | None, *, now: float
    ) -> None:
        await self._run(
            lambda db: db.execute(
                "INSERT INTO execs (sandbox_id, op_key, state, result, updated_at) "
                "VALUES (?,?,?,?,?) ON CONFLICT (sandbox_id, op_key) DO UPDATE SET "
                "state=excluded.state, result=excluded.result, updated_at=excluded.updated_at",
                (sandbox_id, op_key, state, result, now),
            )
        )

    async def prune_execs(self, *, before: float, keep: set[tuple[str, str]]) -> int:
        """Deletes exec records last written before ``before``, except the
        ``(sandbox_id, op_key)`` pairs in ``keep`` (execs still running)."""

        def prune(db: sqlite3.Connection) -> int:
            rows = db.execute(
                "SELECT sandbox_id, op_key FROM execs WHERE updated_at < ?", (before,)
            ).fetchall()
            stale = [(row[0], row[1]) for row in rows if (row[0], row[1]) not in keep]
            db.executemany("DELETE FROM execs WHERE sandbox_id=? AND op_key=?", stale)
            return len(stale)

        return await self._run(prune)


def _migrate(db: sqlite3.Connection) -> None:
    """Brings a catalogue of any earlier version to ``SCHEMA_VERSION``; a new one
    is made at the newest."""
    version = db.execute("PRAGMA user_version").fetchone()[0]
    fresh = not db.execute("SELECT 1 FROM sqlite_master WHERE name='sandboxes'").fetchone()
    if version > SCHEMA_VERSION:
        raise CatalogueTooNew(
            f"the sandbox catalogue is at version {version}, newer than this stead "
            f"({SCHEMA_VERSION}): upgrade stead or use another STEAD_SANDBOX_HOST_STATE_DIR"
        )
    db.execute("BEGIN IMMEDIATE")
    try:
        if not fresh:
            for step in range(max(version, 1) + 1, SCHEMA_VERSION + 1):
                for statement in MIGRATIONS[step]:
                    db.execute(statement)
        for statement in SCHEMA.split(";"):
            if statement.strip():
                db.execute(statement)
        db.execute(f"PRAGMA user_version={SCHEMA_VERSION}")
        db.execute("COMMIT")
    except BaseException:
        db.execute("ROLLBACK")
        raise


SNAPSHOT_COLUMNS = "id, sandbox_id, blob_key, size, sha256, created_at, expires_at, deleted_at"
SANDBOX_COLUMNS = "id, uid, config, active_seconds, destroyed_at, placement"


def _sandbox(row: tuple[Any, ...]) -> SandboxRow:
    return SandboxRow(row[0], row[1], json.loads(row[2]), row[3], row[4], row[5])
