"""Self-hosted environments from the brain's side: the work queue a session's
built-in tool calls go to, and how their answers come back.

A session on a ``self_hosted`` environment gets a work item when a turn starts
(``ensure``); a worker claims it, follows the session's events and answers each
``agent.tool_use`` with a ``user.tool_result`` (spec §2.3, §5.3). The turn
waits for that answer (``answer``) instead of running the tool here. When a
worker's lease lapses, the calls it may have started are settled before a new
worker is handed the item (``settle``): read-only tools are left for the next
worker, any other gets a ``user.tool_result`` saying it may have run — the
rule the ledger keeps for a call in doubt after a crash.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Protocol

import anyio

from stead import tools
from stead.config import Settings
from stead.events import EventType
from stead.failpoints import FailPoints
from stead.harness import unresolved_tool_uses
from stead.ids import new_id
from stead.jsonvalues import Json
from stead.runtime.bounded import Bounded
from stead.runtime.bus import Bus
from stead.runtime.logcache import LogCache
from stead.store import (
    Conflict,
    EnvironmentStore,
    EventLog,
    EventsAccepted,
    NewEvent,
    NotFound,
    SessionRecord,
    SessionStore,
    WorkItem,
    WorkState,
    WorkStore,
)

log = logging.getLogger("stead.runtime.work")

WORKER_TOOLS = frozenset({"bash", "read", "write", "edit", "glob", "grep"})
"""The tools a worker runs (the SDK worker's default toolset); web tools and MCP
stay in the brain."""
RECHECK_SECONDS = 5.0
"""How often a waiting turn reads the log itself, in case it missed a notice."""
ENVIRONMENTS_KEPT = 4096
"""Environments whose type and pollers are remembered, the most recently used:
one forgotten is read again, or counts its workers again from their next poll."""


def in_doubt_result(use_id: str, message: str) -> NewEvent:
    """stead's own answer to a worker's tool call. A ``user.tool_result``: the
    worker treats only those as answers, so a new worker will not run it again."""
    body: Json = {
        "tool_use_id": use_id,
        "content": [{"type": "text", "text": message}],
        "is_error": True,
        "_internal": {"answered_by": "stead"},
    }
    return NewEvent(id=new_id("event"), type=EventType.USER_TOOL_RESULT, body=body)


def _answer_in(events: Sequence[Json], use_id: str) -> Json | None:
    for event in events:
        if (
            event["type"] in (EventType.USER_TOOL_RESULT, EventType.AGENT_TOOL_RESULT)
            and event.get("tool_use_id") == use_id
        ):
            return event
    return None


class WorkQueueStore(WorkStore, EventLog, EnvironmentStore, SessionStore, Protocol):
    """What handing tool calls to environment workers uses: the work queue,
    the session (its log, its environment's config, whether it is archived)."""


class WorkQueue:
    def __init__(
        self,
        settings: Settings,
        store: WorkQueueStore,
        bus: Bus,
        logs: LogCache,
        failpoints: FailPoints | None = None,
    ) -> None:
        self._settings = settings
        self._store = store
        self._bus = bus
        self._logs = logs
        self._failpoints = failpoints or FailPoints(None)
        self._self_hosted: Bounded[str, bool] = Bounded(ENVIRONMENTS_KEPT)
        """Environment id -> self-hosted; a config never changes type (spec §2.2)."""
        self._arrivals: dict[str, anyio.Event] = {}
        """Environment id -> set when an item is queued there (long polls wait on
        it); held while a poll waits."""
        self._pollers: Bounded[str, dict[str, float]] = Bounded(ENVIRONMENTS_KEPT)
        """Environment id -> worker id -> when it last polled (for ``stats``)."""

    async def self_hosted(self, session: SessionRecord) -> bool:
        env_id = session.environment_id
        known = self._self_hosted.use(env_id)
        if known is not None:
            return known
        try:
            env = await self._store.get_environment(session.workspace_id, env_id)
        except NotFound:
            return False
        known = env.config.get("type") == "self_hosted"
        self._self_hosted.put(env_id, known)
        return known

    async def ensure(self, session: SessionRecord) -> WorkItem | None:
        """The session's live work item, queued now if it has none. If its
        newest item stopped and the calls its worker may have started were not
        answered (the process that stopped it died first, and the turn was
        retaken), they are answered as in doubt before a new item is queued:
        else the new item's worker would run them again."""
        for _ in range(2):
            item = await self._store.ensure_work_item(
                session.workspace_id,
                session.environment_id,
                session.id,
                self._settings.work_lease_seconds,
            )
            if item is None or item.state != WorkState.STOPPED:
                break
            await self.stopped(item)
        if item is not None and item.state == WorkState.QUEUED:
            self.notify(item.environment_id)
        return item

    def notify(self, environment_id: str) -> None:
        arrived = self._arrivals.pop(environment_id, None)
        if arrived is not None:
            arrived.set()

    async def wait_for_work(self, environment_id: str, seconds: float) -> None:
        """Returns when an item is queued in the environment, or after ``seconds``."""
        arrived = self._arrivals.setdefault(environment_id, anyio.Event())
        try:
            with anyio.move_on_after(seconds):
                await arrived.wait()
        finally:
            # notify() takes the event it sets; one that timed out goes with its last waiter.
            unwaited = arrived.statistics().tasks_waiting == 0
            if unwaited and self._arrivals.get(environment_id) is arrived:
                del self._arrivals[environment_id]

    def polled(self, environment_id: str, worker_id: str | None) -> None:
        seen = self._pollers.use(environment_id)
        if seen is None:
            seen = {}
            self._pollers.put(environment_id, seen)
        seen[worker_id or "anonymous"] = anyio.current_time()
        horizon = anyio.current_time() - self._settings.work_lease_seconds
        for worker, at in list(seen.items()):
            if at < horizon:
                del seen[worker]

    def workers_polling(self, environment_id: str) -> int:
        horizon = anyio.current_time() - self._settings.work_lease_seconds
        seen = self._pollers.get(environment_id) or {}
        return sum(1 for at in seen.values() if at >= horizon)

    async def settle(self, item: WorkItem) -> EventsAccepted | None:
        """After a worker lost the item: answers the calls it may have started,
        before anyone else is handed the item. Idempotent (results are recorded once)."""
        if not item.in_doubt:
            return None
        accepted = None
        if item.session_id is not None:
            waiting = await self._worker_calls(item.session_id)
            accepted, _ = await self._answer_in_doubt(item, waiting)
        await self._store.settled_work(item.id, item.epoch)
        return accepted

    async def stopped(self, item: WorkItem) -> EventsAccepted | None:
        """After ``item`` stopped (its worker leaving, an operator's stop) while
        its session's turn may wait on it: the calls a worker that held it may
        have started are answered as in doubt (it answers nothing more: its
        token is revoked), and calls still waiting for a worker get a new item.
        Before, such a turn waited out the answer timeout with no worker able
        to take its calls. Once answered, the item is settled (``in_doubt``
        cleared): until then ``ensure`` does this before queueing a new item."""
        if item.state != WorkState.STOPPED or item.session_id is None:
            return None
        self._failpoints.hit("work.after_stop")
        accepted, waiting = None, await self._worker_calls(item.session_id)
        if item.in_doubt:  # a worker held it, and its calls are not answered yet
            accepted, waiting = await self._answer_in_doubt(item, waiting)
            # Answered (recorded once): the session's next item may be queued.
            await self._store.settled_work(item.id, item.epoch)
        if waiting:
            try:
                session = await self._store.get_session(item.workspace_id, item.session_id)
            except NotFound:
                return accepted
            if session.archived_at is None and session.terminated_at is None:
                await self.ensure(session)
        return accepted

    async def _worker_calls(self, session_id: str) -> list[Json]:
        """The session's tool uses a worker runs that have no result yet."""
        return [
            use
            for use in unresolved_tool_uses(await self._logs.read(session_id))
            if use["type"] == EventType.AGENT_TOOL_USE and use["name"] in WORKER_TOOLS
        ]

    async def _answer_in_doubt(
        self, item: WorkItem, calls: Sequence[Json]
    ) -> tuple[EventsAccepted | None, list[Json]]:
        """Answers those of ``calls`` a lost worker may have run (all but the
        read-only ones); what they answered, and the calls left for a worker."""
        assert item.session_id is not None
        doubtful = [use for use in calls if use["name"] not in tools.IDEMPOTENT_TOOLS]
        left = [use for use in calls if use["name"] in tools.IDEMPOTENT_TOOLS]
        if not doubtful:
            return None, left
        answers = [in_doubt_result(use["id"], _lost_worker_message()) for use in doubtful]
        return await self.record(item.workspace_id, item.session_id, answers), left

    async def record(
        self, workspace_id: str, session_id: str, answers: Sequence[NewEvent]
    ) -> EventsAccepted | None:
        """Logs stead's answers as a client's would be (recorded once), and
        tells stream readers. None when the session takes no more events."""
        try:
            accepted = await self._store.accept_user_events(
                workspace_id, session_id, answers, lambda _session, _lookup: None, None
            )
        except (Conflict, NotFound) as exc:
            log.info("session %s: in-doubt answers not recorded: %s", session_id, exc)
            return None
        self._bus.publish(session_id, accepted.published)
        return accepted

    async def answer(self, session_id: str, use_id: str, seconds: float) -> Json | None:
        """Waits for the result of tool use ``use_id``; None after ``seconds``."""
        with anyio.move_on_after(seconds), self._bus.subscribe(session_id) as subscription:
            while True:
                found = _answer_in(await self._logs.read(session_id), use_id)
                if found is not None:
                    return found
                # Any notice (or none for a while): read the log again.
                with anyio.move_on_after(RECHECK_SECONDS) as quiet:
                    await subscription.take()
                if quiet.cancelled_caught:
                    await self._follow_up_lost_stop(session_id)
        return None

    async def _follow_up_lost_stop(self, session_id: str) -> None:
        """The session's newest item stopped and none replaced it: the process
        that stopped it may have died before its follow-up (``stopped``), which
        answers what its worker may have started and queues the rest. Done here
        then (idempotent: answers are recorded once, one item is queued), or the
        call waits out the answer timeout with no worker able to take it."""
        latest = await self._store.latest_work(session_id)
        if latest is not None and latest.state == WorkState.STOPPED:
            await self.stopped(latest)


def _lost_worker_message() -> str:
    return (
        "This call may have run: the worker running it stopped answering and lost "
        "its claim, so running it again could repeat its effect. Verify its effect "
        "before retrying."
    )
