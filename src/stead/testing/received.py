"""The requests a fake model received, kept for tests to inspect and wait on.

Requests are recorded on the server's loop thread and read from test threads or
from other event loops, so the log is guarded by a lock and wakes waiters of
either kind. Every wait is bounded.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class ReceivedRequest:
    """One HTTP request, as the fake saw it. ``ordinal`` counts from 0 per server."""

    ordinal: int
    method: str
    path: str
    query: str  # the raw query string, e.g. "beta=true"
    headers: Mapping[str, str]  # lower-cased names
    body: dict[str, Any]  # the JSON object sent, {} if there was none

    @property
    def idempotency_key(self) -> str | None:
        return self.headers.get("idempotency-key")

    @property
    def op_key(self) -> str | None:
        return self.headers.get("x-stead-op-key")

    @property
    def stream(self) -> bool:
        return self.body.get("stream") is True


class RequestLog:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._arrived = threading.Condition(self._lock)
        self._requests: list[ReceivedRequest] = []
        self._waiters: list[tuple[int, asyncio.AbstractEventLoop, asyncio.Future[None]]] = []

    def record(
        self,
        method: str,
        path: str,
        query: str,
        headers: Mapping[str, str],
        body: dict[str, Any] | None,
    ) -> ReceivedRequest:
        with self._lock:
            ordinal = len(self._requests)
            request = ReceivedRequest(ordinal, method, path, query, headers, body or {})
            self._requests.append(request)
            self._arrived.notify_all()
            ready = [w for w in self._waiters if w[0] <= len(self._requests)]
            self._waiters = [w for w in self._waiters if w[0] > len(self._requests)]
        for _, loop, future in ready:
            _wake(loop, future)
        return request

    def snapshot(self) -> list[ReceivedRequest]:
        with self._lock:
            return list(self._requests)

    def __len__(self) -> int:
        with self._lock:
            return len(self._requests)

    def wait_for(self, count: int, timeout: float) -> list[ReceivedRequest]:
        """Blocks until ``count`` requests arrived; TimeoutError after ``timeout`` s."""
        with self._arrived:
            if not self._arrived.wait_for(lambda: len(self._requests) >= count, timeout):
                raise TimeoutError(f"{len(self._requests)} of {count} requests arrived")
            return list(self._requests)

    async def wait_for_async(self, count: int) -> list[ReceivedRequest]:
        """As ``wait_for``, without blocking the caller's event loop; the caller
        bounds it (``anyio.fail_after``)."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[None] = loop.create_future()
        with self._lock:
            if len(self._requests) >= count:
                return list(self._requests)
            self._waiters.append((count, loop, future))
        try:
            await future
        finally:
            with self._lock:
                self._waiters = [w for w in self._waiters if w[2] is not future]
        return self.snapshot()


def _wake(loop: asyncio.AbstractEventLoop, future: asyncio.Future[None]) -> None:
    def settle() -> None:
        if not future.done():  # the waiter may have timed out already
            future.set_result(None)

    with contextlib.suppress(RuntimeError):  # a closed loop has nobody waiting any more
        loop.call_soon_threadsafe(settle)
