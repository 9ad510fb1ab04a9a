"""/v1/sessions/{id}/sandbox/exec and /pty: terminals over WebSocket (rule 10).

The exec or PTY lives in the sandbox host under a stable id (``?id=``, made
up and announced when absent); this gateway only relays, so a client that
lost its connection, or a restarted ``stead serve``, attaches again and
nothing ran twice. Wire format (DESIGN §5): binary frames whose first byte is
the channel, ``0x00`` stdin (alone: end of an exec's input), ``0x01``
stdout, ``0x02`` stderr, ``0x03`` + int32 exit code (once, on a real exit,
then close 1000), ``0x04`` end of the scrollback replay; text frames are
JSON control messages (``resize``, ``ping``; the server sends ``attached``,
then ``offset`` (the absolute offset of the next output byte) before the
first output and ``replayed`` with the offset at the end of the replay, so a
client that counts bytes and reattaches with ``?offset=`` sees each byte
once). Empty frames are keepalives, both ways, every 30 s.
"""

from __future__ import annotations

import contextlib
import json
import logging
import secrets
import struct
from collections.abc import Awaitable, Callable
from functools import partial

import anyio
from fastapi import APIRouter, WebSocket
from starlette.websockets import WebSocketDisconnect

from stead.api.deps import REAUTHENTICATE_SECONDS, authenticate, refusal, services
from stead.api.errors import ApiError
from stead.jsonvalues import JsonValueError, loads
from stead.runtime import keep_renewing
from stead.sandbox import (
    NoSandbox,
    SandboxError,
    Terminal,
    TerminalEnded,
    TerminalExited,
    TerminalKind,
    TerminalOutput,
    TerminalReplayed,
    TerminalRequest,
)
from stead.store import NotFound

router = APIRouter(prefix="/v1/sessions/{session_id}/sandbox", tags=["terminals"])
log = logging.getLogger("stead.api.terminals")

STDIN, EXIT, REPLAYED = 0x00, 0x03, 0x04
CLOSE_NORMAL = 1000
CLOSE_GOING_AWAY = 1001
"""The sandbox host connection ended under us: redial."""
CLOSE_TRY_AGAIN = 1013
CLOSE_UNAUTHORIZED = 4401
CLOSE_NOT_FOUND = 4404
CLOSE_BAD_REQUEST = 4400
CLOSE_TOO_SLOW = 4408
"""This client fell more than the scrollback behind and was dropped."""
CLOSE_NO_SANDBOX = 4503
CLIENT_GONE = (WebSocketDisconnect, RuntimeError, OSError)
"""What a send or receive raises once the connection is closed: the client
left, or uvicorn closed it (a stop of the server, a keepalive ping timeout)."""
MAX_OFFSET = 2**62
"""Larger than any terminal's output; a signed 64-bit integer on the host protocol."""


@router.websocket("/exec")
async def exec_terminal(websocket: WebSocket, session_id: str) -> None:
    await _serve(websocket, session_id, "exec")


@router.websocket("/pty")
async def pty_terminal(websocket: WebSocket, session_id: str) -> None:
    await _serve(websocket, session_id, "pty")


class Refused(Exception):
    def __init__(self, code: int, reason: str) -> None:
        self.code = code
        self.reason = reason


async def _serve(websocket: WebSocket, session_id: str, kind: TerminalKind) -> None:
    await websocket.accept()
    try:
        terminal, terminal_id = await _open(websocket, session_id, kind)
    except Refused as refused:
        await websocket.close(refused.code, refused.reason[:120])
        return
    except WebSocketDisconnect:
        return  # the client left before its terminal opened
    code: int | None = None
    reason = ""
    try:
        with contextlib.suppress(*CLIENT_GONE):
            await websocket.send_text(
                json.dumps({"type": "attached", "id": terminal_id, "kind": kind})
            )
            code, reason = await _relay(websocket, session_id, terminal)
    finally:
        with anyio.CancelScope(shield=True):
            await terminal.aclose()
    if code is not None:
        with contextlib.suppress(*CLIENT_GONE):
            await websocket.close(code, reason)


async def _open(websocket: WebSocket, session_id: str, kind: TerminalKind) -> tuple[Terminal, str]:
    try:
        who = await authenticate(websocket)
    except ApiError as exc:
        raise Refused(CLOSE_UNAUTHORIZED, str(exc)) from None
    app = services(websocket)
    try:
        session = await app.store.get_session(who.workspace_id, session_id)
    except NotFound:
        raise Refused(CLOSE_NOT_FOUND, f"no session {session_id}") from None
    if await app.runtime.work.self_hosted(session):
        # Its tools run on the environment's workers; a stead sandbox opened
        # here would be another machine than the one its agent works in.
        raise Refused(CLOSE_NO_SANDBOX, "a self_hosted environment's session has no sandbox")
    query = websocket.query_params
    terminal_id = query.get("id") or f"{kind}_{secrets.token_hex(8)}"
    try:
        offset, rows, cols = (
            int(query.get(k, d)) for k, d in (("offset", 0), ("rows", 24), ("cols", 80))
        )
    except ValueError:
        raise Refused(CLOSE_BAD_REQUEST, "offset, rows and cols must be integers") from None
    if not 0 <= offset <= MAX_OFFSET:
        raise Refused(CLOSE_BAD_REQUEST, f"offset must be between 0 and {MAX_OFFSET}")
    command = query.get("command")
    if kind == "exec" and command is None and "id" not in query:
        command = await _first_command(websocket)
    try:
        request = TerminalRequest(terminal_id, kind, command, rows, cols, offset)
        terminal = await app.sandboxes.terminal(session_id, request)
    except NoSandbox as exc:
        raise Refused(CLOSE_NO_SANDBOX, str(exc)) from None
    except SandboxError as exc:
        raise Refused(CLOSE_TRY_AGAIN if exc.retryable else CLOSE_BAD_REQUEST, str(exc)) from None
    return terminal, terminal_id


async def _first_command(websocket: WebSocket) -> str:
    """An exec's command from its first control message, when not in the query."""
    with anyio.move_on_after(services(websocket).settings.keepalive_seconds):
        message = await websocket.receive()
        if message["type"] == "websocket.disconnect":
            raise WebSocketDisconnect(message.get("code", CLOSE_NORMAL))
        try:
            start = loads(message.get("text") or "", root="message")
        except JsonValueError:
            start = None
        if isinstance(start, dict) and isinstance(start.get("command"), str):
            return str(start["command"])
        raise Refused(CLOSE_BAD_REQUEST, 'send {"type": "start", "command": "..."} first')
    raise Refused(CLOSE_BAD_REQUEST, "no command arrived")


async def _relay(
    websocket: WebSocket, session_id: str, terminal: Terminal
) -> tuple[int | None, str]:
    """The close code and reason the relay ended with; None when the
    connection is already closed. A send or receive that fails because the
    connection closed (the client left, or uvicorn closed it: the server
    stopping, a keepalive ping unanswered) ends the relay quietly: raised in a
    task, it reached the server as an exception group, which no ``except``
    of one type catches, and was logged as an error with its traceback."""
    ended: tuple[int | None, str] = (CLOSE_GOING_AWAY, "the sandbox host connection ended")
    async with anyio.create_task_group() as tasks:

        async def run(part: Callable[[], Awaitable[tuple[int | None, str]]]) -> None:
            nonlocal ended
            try:
                ended = await part()
            except CLIENT_GONE:
                ended = None, ""
            tasks.cancel_scope.cancel()

        tasks.start_soon(run, partial(_send_output, websocket, terminal))
        tasks.start_soon(run, partial(_take_input, websocket, terminal))
        tasks.start_soon(run, partial(_until_refused, websocket))
        tasks.start_soon(run, partial(_keep_leased, websocket, session_id))
        seconds = services(websocket).settings.keepalive_seconds
        tasks.start_soon(run, partial(_keepalive, websocket, seconds))
    return ended


async def _keep_leased(websocket: WebSocket, session_id: str) -> tuple[int | None, str]:
    """Renews the session's sandbox lease while the terminal is attached
    (``keep_renewing``); a sandbox whose lease ended is destroyed by the
    sweeper, which ends the terminal."""
    toolbox = services(websocket).sandboxes
    every = toolbox.lease_renewal_seconds
    if every is not None:
        await keep_renewing(partial(toolbox.renew, session_id), every)
    await anyio.sleep_forever()  # no leases (unsafe_local)
    return None, ""


async def _until_refused(websocket: WebSocket) -> tuple[int | None, str]:
    """Returns once the caller that opened the terminal is refused (the close
    code and reason), asked every ``REAUTHENTICATE_SECONDS``."""
    while True:
        await anyio.sleep(REAUTHENTICATE_SECONDS)
        refused = await refusal(websocket)
        if refused is not None:
            return CLOSE_UNAUTHORIZED, str(refused)[:120]


async def _send_output(websocket: WebSocket, terminal: Terminal) -> tuple[int | None, str]:
    announced = False
    while True:
        event = await terminal.receive()
        if isinstance(event, TerminalOutput):
            if not announced:  # where the bytes that follow start: the client counts on
                await websocket.send_text(json.dumps({"type": "offset", "offset": event.offset}))
                announced = True
            await websocket.send_bytes(bytes([event.channel]) + event.data)
        elif isinstance(event, TerminalReplayed):
            await websocket.send_text(json.dumps({"type": "replayed", "offset": event.offset}))
            await websocket.send_bytes(bytes([REPLAYED]))
        elif isinstance(event, TerminalExited):
            await websocket.send_bytes(bytes([EXIT]) + struct.pack(">i", event.exit_code))
        elif isinstance(event, TerminalEnded):
            if event.reason == "exited":
                return CLOSE_NORMAL, "exited"
            if event.reason == "too_slow":
                return CLOSE_TOO_SLOW, "fell behind the scrollback"
            if event.reason == "error":
                return CLOSE_BAD_REQUEST, (event.error or "refused")[:120]
            return CLOSE_GOING_AWAY, "the sandbox host connection ended"


async def _take_input(websocket: WebSocket, terminal: Terminal) -> tuple[int | None, str]:
    """Returns once the client left (no close code: nothing left to close)."""
    while True:
        message = await websocket.receive()
        if message["type"] == "websocket.disconnect":
            return None, ""
        data = message.get("bytes")
        if data:
            if data[0] == STDIN:  # the channel alone: an exec's end of input
                await terminal.send_input(data[1:])
            continue
        text = message.get("text")
        if text:
            await _control(websocket, terminal, text)


async def _control(websocket: WebSocket, terminal: Terminal, text: str) -> None:
    try:
        control = loads(text, root="message")
    except JsonValueError:
        control = None
    if not isinstance(control, dict):
        await websocket.send_text(json.dumps({"type": "error", "message": "not a JSON object"}))
        return
    if control.get("type") == "resize":
        rows, cols = control.get("rows"), control.get("cols")
        # Not a bool (an int to isinstance, refused by the host protocol: it
        # crashed the relay), and a size the host protocol can carry.
        if type(rows) is int and type(cols) is int and 0 < rows < 2**31 and 0 < cols < 2**31:
            await terminal.resize(rows, cols)
            return
        message = "resize: rows and cols must be positive integers"
        await websocket.send_text(json.dumps({"type": "error", "message": message}))
    elif control.get("type") == "ping":
        await websocket.send_text(json.dumps({"type": "pong"}))


async def _keepalive(websocket: WebSocket, seconds: float) -> tuple[int | None, str]:
    while True:
        await anyio.sleep(seconds)
        await websocket.send_bytes(b"")
