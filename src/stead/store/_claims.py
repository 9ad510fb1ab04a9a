"""Taking a run, and reading in the same transaction what its first step needs.

A claim logs the run's opening events and returns the session and the log after
the caller's ``since``, so the agent loop starts a run with no read of its own.
It is used alone (the loop picking up queued work) and inside the transaction
that accepts user events (the run their message queued, taken before the ack).
A run's write makes the turn's next one with it in the same way (``write``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from datetime import datetime

from sqlalchemy import Connection

from stead.store import _events, _leases, _limits, _locks, _runs, _sessions
from stead.store.base import (
    ClaimTerms,
    EventRecord,
    RunClaim,
    RunStart,
    RunWrite,
    SessionRecord,
    WriteResult,
)
from stead.store.errors import LimitReached, SandboxLeaseEnded


def claim(
    conn: Connection,
    now: datetime,
    run_id: str,
    terms: ClaimTerms,
    session: SessionRecord | None = None,
    appended: Sequence[EventRecord] = (),
    *,
    session_id: str | None = None,
) -> RunStart | None:
    """``session``: the run's session as this transaction already read it;
    ``appended``: the events it appended to the session's log (last, in order);
    ``session_id``: the run's session, when the caller knows it."""
    # The session before its run (``_locks`` order), by id when it is known: a
    # lock this transaction holds already costs nothing then.
    known = session.id if session is not None else session_id
    if known is None:
        _locks.run_session(conn, run_id)
    else:
        _locks.session(conn, known)
    taken = _runs.claim(conn, now, run_id, terms.owner, terms.lease_seconds)
    if taken is None:
        return None
    opened = _events.append_log(conn, now, taken.session_id, terms.opening(taken.attempts))
    if session is None:
        session = _sessions.snapshot(conn, taken.session_id)
    session = replace(session, status="running")
    log = _events.log_after(conn, taken.session_id, terms.since, [*appended, *opened])
    first = None
    if terms.plan is not None and _limits.allows_model_request(conn, now, session.workspace_id):
        first = terms.plan(taken, session, log)
    if first is not None:
        # Taken in this transaction: no fence to check, and the log is the one
        # just read followed by what the first step appends.
        done = _runs.write_claimed(conn, now, taken, replace(first, since=None))
        opened += done.logged
        log = [*log, *done.logged]
    # Read here so a turn without a sandbox ends with no read of its own (``capture_outputs``).
    lease = _leases.get(conn, taken.session_id)
    return RunStart(taken, opened, session, terms.since, log, lease)


def claim_next(
    conn: Connection, now: datetime, session_id: str, terms: ClaimTerms
) -> RunStart | None:
    _locks.session(conn, session_id)
    run_id = _runs.oldest_queued(conn, session_id)
    return None if run_id is None else claim(conn, now, run_id, terms, session_id=session_id)


def write(conn: Connection, now: datetime, claim: RunClaim, change: RunWrite) -> WriteResult:
    """``_runs.write``, then the write ``change.then`` works out from it, in the
    same transaction (``RunWrite.then``)."""
    done = _runs.write(conn, now, claim, replace(change, then=None))
    return followed(
        claim,
        change,
        done,
        lambda: _sessions.snapshot(conn, claim.session_id),
        lambda workspace_id: _limits.allows_model_request(conn, now, workspace_id),
        lambda planned: _runs.write_claimed(conn, now, claim, planned),
    )


def followed(
    claim: RunClaim,
    change: RunWrite,
    done: WriteResult,
    session: Callable[[], SessionRecord],
    allows_model_request: Callable[[str], bool],
    write: Callable[[RunWrite], WriteResult],
) -> WriteResult:
    """``done`` (``change`` written) and the write ``change.then`` works out from
    it, made by ``write`` when the workspace's limits allow a model request and
    the plan returns one. The in-memory store's run writes call it too."""
    if change.then is None or done.log is None:
        return done
    current = session()
    if not allows_model_request(current.workspace_id):
        return done
    planned = change.then(claim, current, done.log)
    if planned is None:
        return done
    planned = replace(planned, since=None, then=None)
    try:
        more = write(planned)
    except (SandboxLeaseEnded, LimitReached):
        if planned.lease is None:
            raise
        # Raised before the lease wrote anything: the rest is written without
        # it, as a tool call's own start is (the call then finds out for itself).
        more = write(replace(planned, lease=None))
    return replace(
        done,
        logged=done.logged + more.logged,
        log=done.log + more.logged,
        started={**done.started, **more.started},
        lease=more.lease if more.lease is not None else done.lease,
    )
