"""``WebhookCourier``: delivers the webhook outbox, owned by the server's task group.

Each round reads whether anything is due (an idle server commits nothing),
claims the oldest pending delivery of each endpoint, signs it and POSTs it
through the egress rules, and records the attempt. A claim is a lease: a
delivery whose process died (SIGKILL between the claim and the answer) is
claimed again once its lease ends, so nothing committed is lost; a receiver
may see a delivery twice and tells by its ``webhook-id``. Several processes on
one PostgreSQL database share the outbox (``FOR UPDATE SKIP LOCKED``).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import anyio
from anyio.abc import TaskStatus
from anyio.streams.memory import MemoryObjectSendStream

from stead.config import Settings
from stead.egress_policy import UpstreamTls
from stead.failpoints import FailPoints
from stead.runtime.clock import Clock, SystemClock
from stead.runtime.rounds import survived
from stead.runtime.webhook_signing import open_secret, signed_headers
from stead.runtime.webhook_targets import WebhookEgress
from stead.store import AttemptResult, DatabaseBusy, DueDelivery, RetryTerms, WebhookStore
from stead.vault import SealError, SecretBox

log = logging.getLogger("stead.webhooks")
BATCH = 16
"""Deliveries claimed per round; each is its endpoint's oldest pending one."""
LEASE_MARGIN_SECONDS = 1.0


@dataclass(frozen=True, slots=True)
class CourierTerms:
    poll_seconds: float
    retry: RetryTerms


class WebhookCourier:
    def __init__(
        self,
        store: WebhookStore,
        box: SecretBox,
        egress: WebhookEgress,
        terms: CourierTerms,
        failpoints: FailPoints | None = None,
        clock: Clock | None = None,
    ) -> None:
        self._store = store
        self._box = box
        self._egress = egress
        self._terms = terms
        self._failpoints = failpoints or FailPoints(None)
        self._clock = clock or SystemClock()
        # Longer than one exchange can take, so a live claim is never taken over.
        self._lease_seconds = 2 * egress.timeout_seconds + LEASE_MARGIN_SECONDS

    async def serve(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Delivers what is due every ``poll_seconds`` until cancelled, the first
        round at once (what a previous process left). A round the database cannot
        serve is skipped (a claim it made runs out, and the delivery is made again
        later), as is one that fails (``rounds``)."""
        task_status.started()
        while True:
            await survived("webhook deliveries", self.deliver_due)
            await self._clock.sleep(self._terms.poll_seconds)

    async def deliver_due(self) -> int:
        """Delivers until nothing is due and nothing is in flight; returns the
        attempts made. Up to ``BATCH`` go at once, each endpoint's one at a time
        (a claimed delivery is its endpoint's oldest, and holds the rest back),
        and a slot is filled as soon as one frees: a slow receiver holds up only
        its own endpoint's deliveries."""
        made = in_flight = 0
        done, finished = anyio.create_memory_object_stream[None](BATCH)
        # The streams close after the group has waited for its deliveries.
        async with done, finished, anyio.create_task_group() as group:
            while True:
                claimed: list[DueDelivery] = []
                try:
                    if in_flight < BATCH and await self._store.webhook_deliveries_due():
                        claimed = await self._store.claim_webhook_deliveries(
                            BATCH - in_flight, self._lease_seconds
                        )
                except DatabaseBusy:
                    if not in_flight:
                        raise
                    # Deliveries under way finish and are recorded; a later
                    # round claims what is due (cancelling them would send
                    # each one again once its claim ran out).
                    log.warning("webhook deliveries: no new claims while the database is busy")
                for delivery in claimed:
                    group.start_soon(self._deliver, delivery, done.clone())
                made += len(claimed)
                in_flight += len(claimed)
                if claimed:
                    continue  # more may be due, for endpoints not claimed yet
                if not in_flight:
                    break  # nothing due, or what is due held by another process
                # A delivery made due meanwhile waits at most one poll.
                with anyio.move_on_after(self._terms.poll_seconds):
                    await finished.receive()
                    in_flight -= 1
                while True:
                    try:
                        finished.receive_nowait()
                    except anyio.WouldBlock:
                        break
                    in_flight -= 1
        return made

    async def _deliver(self, delivery: DueDelivery, done: MemoryObjectSendStream[None]) -> None:
        async with done:
            try:
                result = await self._attempt(delivery)
            except Exception as exc:  # one endpoint's failure never ends the courier
                log.exception("webhook delivery %s failed in stead", delivery.id)
                result = AttemptResult(None, f"stead could not make the attempt: {exc!r}")
            if not result.delivered:
                log.warning(
                    "webhook delivery %s to endpoint %s, attempt %d: %s",
                    delivery.id,
                    delivery.endpoint_id,
                    delivery.attempt,
                    result.error,
                )
            with anyio.CancelScope(shield=True):  # an attempt made is an attempt recorded
                await self._store.finish_webhook_delivery(delivery, result, self._terms.retry)
            done.send_nowait(None)

    async def _attempt(self, delivery: DueDelivery) -> AttemptResult:
        try:
            secret = open_secret(self._box, delivery.endpoint_id, delivery.sealed_secret)
        except SealError as exc:
            return AttemptResult(None, f"the signing secret cannot be opened: {exc}")
        timestamp = int(self._clock.now().timestamp())
        headers = signed_headers(secret, delivery.id, timestamp, delivery.payload)
        self._failpoints.hit("webhook.before_send")
        result = await self._egress.post(delivery.url, headers, delivery.payload)
        self._failpoints.hit("webhook.after_send")
        return result


def webhook_parts(settings: Settings) -> tuple[WebhookEgress, CourierTerms]:
    """The egress rules and the courier's terms ``settings`` name."""
    egress = WebhookEgress(
        pinned=dict(settings.egress_hosts),
        tls=UpstreamTls(settings.egress_extra_ca_file),
        timeout_seconds=settings.webhook_timeout_seconds,
    )
    retry = RetryTerms(
        base_seconds=settings.webhook_retry_base_seconds,
        max_seconds=settings.webhook_retry_max_seconds,
        give_up_seconds=settings.webhook_retry_for_seconds,
        keep_seconds=settings.webhook_keep_seconds,
    )
    return egress, CourierTerms(poll_seconds=settings.webhook_poll_seconds, retry=retry)
