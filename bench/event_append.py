"""Event append: stead's ``Store.append_events`` against a bare sqlite3 insert.

What is measured: the wall time of appending one event to a session's log, one
event per transaction, as the agent loop does it. stead's side is
``await store.append_events(session_id, [NewEvent(...)])`` on a store from
``stead.store.open_store`` (SQLAlchemy Core, a worker-thread hop, ``seq`` bumped
on the session row, commit). The baseline is the least a durable append can do
in SQLite: a plain ``sqlite3`` connection to its own fresh file in the same
directory, with the pragmas stead sets (WAL, ``synchronous=FULL``,
``foreign_keys=ON``, ``busy_timeout``), inserting the same row (same session id,
event id, type, JSON body and timestamp format) into an ``events`` table created
from the very DDL stead's migration produced, inside ``BEGIN IMMEDIATE`` ...
``COMMIT``.

Why that is fair: both pay the same fsync per commit on the same filesystem and
the same index maintenance; the baseline also serialises the body to JSON and
formats the timestamp inside the timed region. What it leaves out (and stead
must do) is exactly the overhead under test: the thread hop, SQLAlchemy, and the
``UPDATE sessions ... RETURNING`` that makes ``seq`` gapless. The two are
interleaved one append at a time, alternating which goes first, after a warm-up,
so drift in disk or CPU speed hits both alike. DESIGN budget: stead's p50 at
most 2x the baseline's.
"""

from __future__ import annotations

import json
import sqlite3
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

import anyio

from stead.ids import new_id
from stead.store import NewEvent, SqlStore, open_store
from stead.store.sqlite import BUSY_TIMEOUT_MS

# isort: split
# The shared helpers sit next to this script (sys.path[0] when it is run).
from _common import percentile, size, us, verdict

APPENDS = size("APPENDS", 2000, 50)
WARMUP = size("WARMUP", 100, 5)
TIME_LIMIT_S = 30.0
"""Stop early (and report the smaller n) if a slow or busy disk makes fsyncs crawl."""
BUDGET_RATIO = 2.0


def new_events(n: int) -> list[NewEvent]:
    """``n`` user messages with fresh ids, made before the clock starts."""
    return [
        NewEvent(
            new_id("event"),
            "user.message",
            {"content": [{"type": "text", "text": f"benchmark event {i}: a short user message"}]},
        )
        for i in range(n)
    ]


async def stead_session(store: SqlStore) -> str:
    workspace = await store.create_workspace("bench")
    agent = await store.create_agent(
        workspace.id, {"name": "bench", "model": "claude-sonnet-4-6", "tools": []}
    )
    env = await store.create_environment(workspace.id, "bench", None, {"type": "cloud"}, {}, None)
    session, _ = await store.create_session(
        workspace.id,
        (agent.id, None),
        lambda rec: {"type": "agent", "id": rec.id, "version": rec.version, **rec.definition},
        env.id,
        {"title": "bench", "metadata": {}, "vault_ids": [], "budget": None, "resources": []},
        [],
    )
    return session.id


def bare_connection(path: Path, stead_db: Path) -> sqlite3.Connection:
    """A fresh database holding stead's ``sessions`` and ``events`` DDL and the session row."""
    conn = sqlite3.connect(path, isolation_level=None, timeout=BUSY_TIMEOUT_MS / 1000)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=FULL")
    conn.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
    conn.execute("ATTACH DATABASE ? AS stead", (str(stead_db),))
    ddl = conn.execute(
        "SELECT sql FROM stead.sqlite_master WHERE tbl_name IN ('sessions', 'events') "
        "AND sql IS NOT NULL ORDER BY type = 'index', name"
    ).fetchall()
    for (statement,) in ddl:
        conn.execute(statement)
    # The parent row for the events' foreign key; its own parents are not needed.
    conn.execute("INSERT INTO main.sessions SELECT * FROM stead.sessions")
    conn.execute("DETACH DATABASE stead")
    conn.execute("PRAGMA foreign_keys=ON")
    return conn


def bare_append(conn: sqlite3.Connection, session_id: str, seq: int, event: NewEvent) -> None:
    now = datetime.now(UTC).replace(tzinfo=None).isoformat(sep=" ", timespec="microseconds")
    conn.execute("BEGIN IMMEDIATE")
    try:
        conn.execute(
            "INSERT INTO events (session_id, seq, id, type, body, processed_at) "
            "VALUES (?, ?, ?, ?, ?, ?)",
            (session_id, seq, event.id, event.type, json.dumps(event.body), now),
        )
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")


async def measure(tmp: Path) -> tuple[list[float], list[float]]:
    stead_db = tmp / "stead.db"
    store = await open_store(f"sqlite:///{stead_db}")
    try:
        session_id = await stead_session(store)
        bare = bare_connection(tmp / "bare.db", stead_db)
        try:
            stead_times: list[float] = []
            bare_times: list[float] = []
            total = WARMUP + APPENDS
            events, bare_events = new_events(total), new_events(total)
            deadline = time.monotonic() + TIME_LIMIT_S
            appended = 0
            for i in range(total):
                if i > WARMUP and time.monotonic() > deadline:
                    break
                appended += 1
                for side in ("stead", "bare") if i % 2 == 0 else ("bare", "stead"):
                    start = time.perf_counter()
                    if side == "stead":
                        await store.append_events(session_id, [events[i]])
                    else:
                        bare_append(bare, session_id, i + 1, bare_events[i])
                    elapsed = time.perf_counter() - start
                    if i >= WARMUP:
                        (stead_times if side == "stead" else bare_times).append(elapsed)
            stored = bare.execute("SELECT count(*) FROM events").fetchone()[0]
            if stored != appended:
                raise RuntimeError(f"baseline stored {stored} events, expected {appended}")
        finally:
            bare.close()
    finally:
        await store.close()
    return stead_times, bare_times


def run() -> str:
    with tempfile.TemporaryDirectory(prefix="stead-bench-") as tmp:
        stead_times, bare_times = anyio.run(measure, Path(tmp))
    stead_p50, bare_p50 = percentile(stead_times, 50), percentile(bare_times, 50)
    ratio = stead_p50 / bare_p50
    return (
        f"event_append: stead p50 {us(stead_p50)} p99 {us(percentile(stead_times, 99))}"
        f" | sqlite3 p50 {us(bare_p50)} p99 {us(percentile(bare_times, 99))}"
        f" | ratio {ratio:.2f}x (budget <= {BUDGET_RATIO:g}x, {verdict(ratio <= BUDGET_RATIO)}),"
        f" stead adds {us(stead_p50 - bare_p50)} at p50 | n={len(stead_times)} each"
    )


def main() -> None:
    print(run(), flush=True)


if __name__ == "__main__":
    main()
