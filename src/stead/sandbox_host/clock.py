"""Time for the sandbox host, injected so tests of idle sleep, snapshot expiry
and record pruning advance it instead of sleeping. Kernel waits (a cgroup
freezing, a process dying) keep real time: they bound real work."""

from __future__ import annotations

import time
from typing import Protocol

import anyio


class HostClock(Protocol):
    def time(self) -> float:
        """Seconds since the epoch: what the catalogue stores."""
        ...

    def monotonic(self) -> float:
        """For durations: idleness, active seconds."""
        ...

    async def sleep(self, seconds: float) -> None: ...


class SystemClock:
    def time(self) -> float:
        return time.time()

    def monotonic(self) -> float:
        return time.monotonic()

    async def sleep(self, seconds: float) -> None:
        await anyio.sleep(seconds)


class ManualClock:
    """A clock that moves only when told to (tests): ``advance`` wakes every
    sleeper whose time has come."""

    def __init__(self, start: float = 1_800_000_000.0) -> None:
        self._now = start
        self._moved = anyio.Event()

    def time(self) -> float:
        return self._now

    def monotonic(self) -> float:
        return self._now

    async def sleep(self, seconds: float) -> None:
        until = self._now + seconds
        while self._now < until:
            await self._moved.wait()

    def advance(self, seconds: float) -> None:
        self._now += seconds
        moved, self._moved = self._moved, anyio.Event()
        moved.set()
