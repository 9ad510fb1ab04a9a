"""Time for the runtime, injectable so tests of leases and backoff run fast."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Protocol

import anyio


class Clock(Protocol):
    def now(self) -> datetime: ...
    async def sleep(self, seconds: float) -> None: ...


class SystemClock:
    def now(self) -> datetime:
        return datetime.now(UTC)

    async def sleep(self, seconds: float) -> None:
        await anyio.sleep(seconds)
