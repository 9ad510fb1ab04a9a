"""Faults the fake model injects, and the book that decides which request gets which.

A ``FaultRule`` says what goes wrong (one fault), for which requests (from an
ordinal on, and/or matching a predicate) and how many times. Every rule that
matches a request applies to it, except that a request has at most one
*ending* (an HTTP error, an error event, a disconnect or a stall): a second
matching ending rule is left for a later request and keeps its count.
Every wait a fault causes is bounded by ``MAX_FAULT_SECONDS``.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TypeAlias

from stead.testing.received import ReceivedRequest

MAX_FAULT_SECONDS = 300.0


def _check_seconds(seconds: float) -> None:
    if not 0 <= seconds <= MAX_FAULT_SECONDS:
        raise ValueError(f"fault seconds must be within 0..{MAX_FAULT_SECONDS}, not {seconds}")


def _check_chunks(after_chunks: int) -> None:
    if after_chunks < 0:
        raise ValueError(f"after_chunks must be >= 0, not {after_chunks}")


@dataclass(frozen=True)
class HttpError:
    """Answer with this status and the dialect's error body instead of a reply.

    ``error_type`` defaults from the status (529 ``overloaded_error``, 429
    ``rate_limit_error``, 500 ``api_error`` …). A 429 always carries
    ``retry-after`` (``retry_after`` seconds, 1 if unset).
    """

    status: int = 529
    message: str | None = None
    error_type: str | None = None
    retry_after: float | None = None
    headers: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not 400 <= self.status <= 599:
            raise ValueError(f"an HTTP error status is 4xx or 5xx, not {self.status}")


@dataclass(frozen=True)
class StreamError:
    """An ``event: error`` after ``after_chunks`` stream chunks, then the stream ends.

    On a non-streaming request it becomes the HTTP error of the same type.
    """

    after_chunks: int = 1
    error_type: str = "overloaded_error"
    message: str = "Overloaded"

    def __post_init__(self) -> None:
        _check_chunks(self.after_chunks)


@dataclass(frozen=True)
class Disconnect:
    """Close the connection after ``after_chunks`` chunks, without finishing.

    A non-streaming reply is cut inside its body (``after_chunks`` is ignored).
    """

    after_chunks: int = 2

    def __post_init__(self) -> None:
        _check_chunks(self.after_chunks)


@dataclass(frozen=True)
class Stall:
    """Send headers and ``after_chunks`` chunks, then nothing for ``seconds``,
    then close the connection; a non-streaming reply stalls right after its
    headers. Ends early when the server stops or the client leaves."""

    after_chunks: int = 0
    seconds: float = MAX_FAULT_SECONDS

    def __post_init__(self) -> None:
        _check_chunks(self.after_chunks)
        _check_seconds(self.seconds)


@dataclass(frozen=True)
class Delay:
    """Wait ``seconds`` before answering (before the response headers)."""

    seconds: float

    def __post_init__(self) -> None:
        _check_seconds(self.seconds)


@dataclass(frozen=True)
class ChunkDelay:
    """Wait ``seconds`` before each stream chunk after the first."""

    seconds: float

    def __post_init__(self) -> None:
        _check_seconds(self.seconds)


Ending: TypeAlias = HttpError | StreamError | Disconnect | Stall
Fault: TypeAlias = Ending | Delay | ChunkDelay


@dataclass(frozen=True)
class FaultRule:
    """Apply ``fault`` to ``times`` matching requests (``None``: to all of them).

    A request matches if its ordinal is at least ``from_request`` (0 = the
    first request the server received) and ``when`` (if given) returns true.
    """

    fault: Fault
    times: int | None = 1
    from_request: int = 0
    when: Callable[[ReceivedRequest], bool] | None = None

    def __post_init__(self) -> None:
        if self.times is not None and self.times < 1:
            raise ValueError(f"times must be at least 1 (or None for always), not {self.times}")
        if self.from_request < 0:
            raise ValueError(f"from_request must be >= 0, not {self.from_request}")

    def matches(self, request: ReceivedRequest) -> bool:
        if request.ordinal < self.from_request:
            return False
        return self.when is None or self.when(request)


@dataclass(frozen=True)
class Plan:
    """What goes wrong with one request."""

    delay: float = 0.0
    chunk_delay: float = 0.0
    ending: Ending | None = None


@dataclass
class _Entry:
    rule: FaultRule
    remaining: int | None


class FaultBook:
    """The rules and their remaining counts; rules are added from test threads
    and consumed on the server's loop, so every access holds the lock."""

    def __init__(self, rules: Sequence[FaultRule] = ()) -> None:
        self._lock = threading.Lock()
        self._entries: list[_Entry] = []
        for rule in rules:
            self.add(rule)

    def add(self, rule: FaultRule) -> None:
        with self._lock:
            self._entries.append(_Entry(rule, rule.times))

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()

    def plan_for(self, request: ReceivedRequest) -> Plan:
        """The faults for ``request``, using up one of each applied rule's times."""
        delay, chunk_delay, ending = 0.0, 0.0, None
        with self._lock:
            for entry in self._entries:
                fault = entry.rule.fault
                if entry.remaining == 0 or not entry.rule.matches(request):
                    continue
                if isinstance(fault, Delay):
                    delay += fault.seconds
                elif isinstance(fault, ChunkDelay):
                    chunk_delay = max(chunk_delay, fault.seconds)
                elif ending is None:
                    ending = fault
                else:
                    continue  # one ending per request; this rule waits for the next one
                if entry.remaining is not None:
                    entry.remaining -= 1
        return Plan(min(delay, MAX_FAULT_SECONDS), chunk_delay, ending)
