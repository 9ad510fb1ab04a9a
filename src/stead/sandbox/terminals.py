"""Terminals (rule 10): what a provider's terminal attachment yields and takes."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Protocol

TerminalKind = Literal["pty", "exec"]


@dataclass(frozen=True, slots=True)
class TerminalRequest:
    terminal_id: str
    kind: TerminalKind = "pty"
    command: str | None = None
    """The exec's command; a PTY runs a login shell."""
    rows: int = 24
    cols: int = 80
    offset: int = 0
    """Replay the scrollback from this absolute output offset."""


@dataclass(frozen=True, slots=True)
class TerminalOutput:
    channel: int
    """1 stdout (all of a PTY's output), 2 stderr."""
    offset: int
    """Absolute offset of ``data``'s first byte in the terminal's output."""
    data: bytes


@dataclass(frozen=True, slots=True)
class TerminalReplayed:
    """The scrollback replay ended; what follows is live."""

    offset: int


@dataclass(frozen=True, slots=True)
class TerminalExited:
    exit_code: int


@dataclass(frozen=True, slots=True)
class TerminalEnded:
    """The host ended the attachment: ``reason`` is ``exited``, ``detached``,
    ``too_slow`` or ``gone``, or the error it sent."""

    reason: str
    error: str | None = None


TerminalEvent = TerminalOutput | TerminalReplayed | TerminalExited | TerminalEnded


class Terminal(Protocol):
    """One attachment to a terminal; many may attach to the same terminal."""

    async def receive(self) -> TerminalEvent:
        """The next event; ``TerminalEnded`` last."""
        ...

    async def send_input(self, data: bytes) -> None: ...

    async def resize(self, rows: int, cols: int) -> None: ...

    async def detach(self) -> None: ...

    async def aclose(self) -> None: ...
