"""``Terminal``: an exec or a PTY in a session's sandbox, over stead's
WebSocket (DESIGN §5), that survives disconnects (rule 10).

On an abnormal close it redials with exponential backoff and jitter,
reattaching to the same terminal id from the offset of the last byte it
delivered, so every byte is delivered once however often the line drops. A
flap breaker ends it with ``TerminalError`` when the connection keeps
dropping (more than ``flap_limit`` redials within ``flap_window`` seconds);
a refusal (bad key, unknown session, no sandbox) ends it at once. A client
that fell too far behind redials like any other and skips what the server's
scrollback dropped meanwhile.
"""

from __future__ import annotations

import contextlib
import json
import random
import struct
import time
import urllib.parse
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from types import TracebackType

import anyio
import websockets
from websockets.asyncio.client import ClientConnection

STDIN, STDOUT, STDERR, EXIT, REPLAYED = 0, 1, 2, 3, 4
TOO_SLOW = 4408
REFUSALS = frozenset(range(4400, 4500)) - {TOO_SLOW}
"""Close codes the server uses for "this will not work by trying again". A
client dropped as too slow is not refused: it redials from its offset, and the
server says where output resumes if the scrollback no longer reaches back."""
CONNECT_SECONDS = 10.0


class TerminalError(Exception):
    """The terminal cannot go on; the message says why."""


@dataclass(frozen=True, slots=True)
class Output:
    channel: int
    """1 stdout (all of a PTY's output), 2 stderr."""
    data: bytes


class Terminal:
    def __init__(
        self,
        base_url: str,
        api_key: str,
        session_id: str,
        *,
        kind: str = "pty",
        command: str | None = None,
        terminal_id: str | None = None,
        rows: int = 24,
        cols: int = 80,
        keepalive_seconds: float = 30.0,
        backoff_initial: float = 0.2,
        backoff_max: float = 5.0,
        flap_limit: int = 3,
        flap_window: float = 60.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if kind not in ("pty", "exec"):
            raise ValueError("kind must be 'pty' or 'exec'")
        self._url = base_url.rstrip("/").replace("http", "ws", 1)
        self._api_key = api_key
        self._session_id = session_id
        self.kind = kind
        self._command = command
        self.terminal_id = terminal_id
        self._size = (rows, cols)
        self._keepalive = keepalive_seconds
        self._backoff = (backoff_initial, backoff_max)
        self._flap = (flap_limit, flap_window)
        self._clock = clock
        self._socket: ClientConnection | None = None
        self._attached = False
        """Whether a dial was ever answered (its terminal exists)."""
        self._input_closed = False
        self._offset = 0
        """Absolute offset of the next output byte this client has not delivered."""
        self._redials: list[float] = []
        self.exit_code: int | None = None
        self.redial_count = 0
        self.skipped_bytes = 0
        """Output lost across redials: produced and dropped from the server's
        scrollback while this client was away or too slow."""

    async def __aenter__(self) -> Terminal:
        await self._connect()
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    def _address(self) -> str:
        query: dict[str, str | int] = {"offset": self._offset}
        query["rows"], query["cols"] = self._size
        if self.terminal_id is not None:
            query["id"] = self.terminal_id
        if self._command is not None and not self._attached:
            # The first dial only (a new exec under an id of the caller's
            # choosing too: sent without its command, it was refused): a
            # redial to an exec that went with its sandbox must not run it twice.
            query["command"] = self._command
        path = f"/v1/sessions/{self._session_id}/sandbox/{self.kind}"
        return f"{self._url}{path}?{urllib.parse.urlencode(query)}"

    async def _connect(self) -> None:
        try:
            with anyio.fail_after(CONNECT_SECONDS):
                socket = await websockets.connect(
                    self._address(),
                    additional_headers={"x-api-key": self._api_key},
                    ping_interval=None,  # stead's own keepalive: empty frames
                    max_size=None,
                )
                hello = json.loads(await socket.recv())
        except websockets.ConnectionClosed as closed:
            raise self._refusal(closed.rcvd) from None
        self.terminal_id = hello["id"]
        self._socket = socket
        self._attached = True
        if self._input_closed:  # again on every dial: one sent as the line dropped is lost
            with contextlib.suppress(websockets.ConnectionClosed):
                await socket.send(bytes([STDIN]))

    @staticmethod
    def _refusal(frame: object) -> Exception:
        code = getattr(frame, "code", None)
        reason = getattr(frame, "reason", "")
        if code in REFUSALS:
            return TerminalError(f"the server refused the terminal ({code}): {reason}")
        return OSError(f"the terminal connection closed ({code}): {reason}")

    async def output(self) -> AsyncIterator[Output]:
        """Every output byte once, in order, across redials; ends after the
        process exited (``exit_code``) or ``close``."""
        while self._socket is not None:
            try:
                async for item in self._read(self._socket):
                    yield item
                return
            except websockets.ConnectionClosed as closed:
                if self._socket is None:
                    return  # closed by us
                if closed.rcvd is not None and closed.rcvd.code in REFUSALS:
                    raise self._refusal(closed.rcvd) from None
            except OSError:
                pass
            await self._redial()

    async def _read(self, socket: ClientConnection) -> AsyncIterator[Output]:
        while True:
            # Reading and keeping alive in one loop: no task outlives a yield.
            message: str | bytes | None = None
            with anyio.move_on_after(self._keepalive):
                message = await socket.recv()
            if message is None:
                await socket.send(b"")
                continue
            if isinstance(message, str):
                control = json.loads(message)
                if control.get("type") in ("offset", "replayed"):
                    offset = int(control["offset"])
                    if self.redial_count and offset > self._offset:
                        # The scrollback dropped these while the line was down.
                        self.skipped_bytes += offset - self._offset
                    self._offset = offset
                continue
            if not message:
                continue  # the server's keepalive
            channel, data = message[0], message[1:]
            if channel in (STDOUT, STDERR):
                self._offset += len(data)
                yield Output(channel, bytes(data))
            elif channel == EXIT and len(data) == 4:
                (self.exit_code,) = struct.unpack(">i", data)
                with contextlib.suppress(websockets.ConnectionClosed):
                    await socket.recv()  # the close that follows
                self._socket = None
                return

    async def _redial(self) -> None:
        limit, window = self._flap
        now = self._clock()
        self._redials = [t for t in self._redials if now - t < window] + [now]
        if len(self._redials) > limit:
            raise TerminalError(
                f"the terminal connection keeps dropping: {len(self._redials)} redials "
                f"within {window:g} s; giving up"
            )
        initial, most = self._backoff
        attempt = 0
        while True:
            delay = min(most, initial * 2**attempt) * random.uniform(0.5, 1.5)
            await anyio.sleep(delay)
            try:
                await self._connect()
                self.redial_count += 1
                return
            except (OSError, TimeoutError, websockets.InvalidHandshake):
                attempt += 1
                if self._clock() - now > window:
                    raise TerminalError("the terminal could not be reached again") from None

    async def send(self, data: bytes) -> None:
        """Input (keystrokes, or an exec's stdin); lost if the line is down."""
        if self._socket is not None:
            with contextlib.suppress(websockets.ConnectionClosed):
                await self._socket.send(bytes([STDIN]) + data)

    async def close_input(self) -> None:
        """Ends an exec's input: its stdin closes (end of file)."""
        self._input_closed = True
        if self._socket is not None:
            with contextlib.suppress(websockets.ConnectionClosed):
                await self._socket.send(bytes([STDIN]))

    async def resize(self, rows: int, cols: int) -> None:
        self._size = (rows, cols)
        if self._socket is not None:
            with contextlib.suppress(websockets.ConnectionClosed):
                await self._socket.send(json.dumps({"type": "resize", "rows": rows, "cols": cols}))

    async def close(self) -> None:
        """Leaves the terminal; its process goes on in the sandbox."""
        socket, self._socket = self._socket, None
        if socket is not None:
            with anyio.CancelScope(shield=True), contextlib.suppress(Exception):
                await socket.close()
