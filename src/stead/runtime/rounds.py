"""One round of a background loop (the reaper, the lease sweeper, the purgers,
the webhook courier), run so that its failure never ends the loop.

A loop whose round raised would end, and with it the server's lifespan that
owns every loop: the store closed, every route answered 503, and the process
stayed up, so nothing restarted it. A stead error in one workspace's webhook
delivery did that to every workspace. So a failed round is logged (a warning
while the database is away, the traceback for anything else) and the loop's
next round tries again.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

from stead.store import DatabaseBusy

log = logging.getLogger("stead.runtime.rounds")


async def survived(what: str, round_: Callable[[], Awaitable[object]]) -> None:
    """``round_()``, whose failure is logged as ``what``'s, never raised.
    Cancellation passes (it is no ``Exception``)."""
    try:
        await round_()
    except* DatabaseBusy as busy:  # the database is away
        log.warning("%s skipped: %s", what, busy.exceptions[0])
    except* Exception:
        log.exception("%s failed; the next round tries again", what)
