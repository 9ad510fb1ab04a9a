"""A fake upstream model: a real HTTP server on 127.0.0.1 that answers the
Anthropic Messages API and OpenAI chat completions from a script.

It runs uvicorn on its own event loop in a background thread, so tests in the
same process can read what it received and change its faults while it runs.
It owns the thread, the listening socket and the server; ``stop`` ends them all
promptly, stalled streams included. Usage::

    with FakeModel([Turn([ToolCall("bash", {"command": "ls"})]), Turn([Text("ok")])]) as fake:
        client = anthropic.AsyncAnthropic(base_url=fake.url, api_key="x")
"""

from __future__ import annotations

import enum
import socket
import threading
from collections.abc import Sequence
from types import TracebackType

import anyio.to_thread
import uvicorn

from stead.testing._fake_app import FakeModelApp
from stead.testing.faults import FaultBook, FaultRule
from stead.testing.received import ReceivedRequest, RequestLog
from stead.testing.scripts import Script, call_every_tool

START_TIMEOUT = 10.0
STOP_TIMEOUT = 10.0
WAIT_TIMEOUT = 10.0
# Requests still running this long after stop (none should: stop ends every
# wait) are cancelled by uvicorn.
_GRACEFUL_SHUTDOWN_SECONDS = 1


class _State(enum.Enum):
    NEW = "new"
    RUNNING = "running"
    STOPPED = "stopped"


class FakeModel:
    """Answers ``POST /v1/messages`` (and ``/count_tokens``) and
    ``POST /v1/chat/completions`` from ``script``, applying ``faults``.

    ``script`` is a list of turns (the turn for a request is the one at the
    number of assistant messages it carries; ``Text("done")`` past the end) or
    a rule from request body to turn. A rule runs on the server's loop: it must
    be quick and must not block. ``chunk_chars`` is the size of streamed text
    pieces. ``context_window``: the most tokens of a prompt it takes, counted
    as its usage counts them (about four characters of JSON a token, media
    bytes included); a longer one gets the 400 the dialect's API answers one
    with (``prompt is too long: N tokens > W maximum``). ``max_request_bytes``:
    the largest body it takes (the Messages API's is 32 MB); a larger one gets
    the API's 413 ``request_too_large``. Start it once; after ``stop`` it
    cannot be started again.
    """

    def __init__(
        self,
        script: Script = call_every_tool,
        *,
        faults: Sequence[FaultRule] = (),
        chunk_chars: int = 16,
        context_window: int | None = None,
        max_request_bytes: int | None = None,
    ) -> None:
        if chunk_chars < 1:
            raise ValueError("chunk_chars must be at least 1")
        if context_window is not None and context_window < 1:
            raise ValueError("context_window must be at least 1")
        if max_request_bytes is not None and max_request_bytes < 1:
            raise ValueError("max_request_bytes must be at least 1")
        self._faults = FaultBook(faults)
        self._log = RequestLog()
        self._settled = threading.Event()  # the server is up, or its thread ended
        self._app = FakeModelApp(
            script,
            self._faults,
            self._log,
            chunk_chars,
            self._settled.set,
            context_window,
            max_request_bytes,
        )
        self._state = _State.NEW
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None
        self.port = 0

    @property
    def url(self) -> str:
        """The base URL for the anthropic SDK (``base_url=fake.url``)."""
        if self._state is _State.NEW:
            raise RuntimeError("the fake model is not started")
        return f"http://127.0.0.1:{self.port}"

    @property
    def openai_url(self) -> str:
        """The base URL for OpenAI-compatible clients, which expect ``/v1`` in it."""
        return f"{self.url}/v1"

    def start(self) -> FakeModel:
        """Binds a free loopback port and serves; returns once requests are answered."""
        if self._state is not _State.NEW:
            raise RuntimeError(f"the fake model is {self._state.value}; start it only once")
        sock = _listening_socket()
        self.port = int(sock.getsockname()[1])
        config = uvicorn.Config(
            self._app,
            lifespan="on",
            # Leave the host process's logging alone: a log_config or access_log=False
            # would reconfigure uvicorn's loggers for every server in the process.
            log_config=None,
            timeout_graceful_shutdown=_GRACEFUL_SHUTDOWN_SECONDS,
        )
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(
            target=self._run, args=(sock,), name=f"stead-fake-model-{self.port}", daemon=True
        )
        self._state = _State.RUNNING
        self._thread.start()
        if not self._settled.wait(START_TIMEOUT) or not self._app.ready:
            self.stop()
            raise RuntimeError(f"the fake model did not start within {START_TIMEOUT}s")
        return self

    def stop(self) -> None:
        """Ends every open request and the server thread, within a fraction of a
        second: a delayed answer not yet begun gets a 503, a stalled or slowed
        stream is cut off (the client sees the connection close)."""
        if self._state is not _State.RUNNING:
            self._state = _State.STOPPED
            return
        self._state = _State.STOPPED
        assert self._server is not None and self._thread is not None
        self._app.release_waits()
        self._server.should_exit = True
        self._thread.join(STOP_TIMEOUT)
        if self._thread.is_alive():
            raise RuntimeError(f"the fake model did not stop within {STOP_TIMEOUT}s")

    def _run(self, sock: socket.socket) -> None:
        assert self._server is not None
        try:
            self._server.run(sockets=[sock])  # closes the socket on shutdown
        finally:
            sock.close()
            self._settled.set()

    @property
    def requests(self) -> list[ReceivedRequest]:
        """Every request received so far, in arrival order."""
        return self._log.snapshot()

    @property
    def request_count(self) -> int:
        return len(self._log)

    @property
    def script_errors(self) -> list[Exception]:
        """Exceptions the script raised (each was answered with a 500 ``api_error``)."""
        return list(self._app.script_errors)

    def wait_for_requests(self, count: int, timeout: float = WAIT_TIMEOUT) -> list[ReceivedRequest]:
        """Blocks until ``count`` requests arrived (TimeoutError after ``timeout`` s)."""
        return self._log.wait_for(count, timeout)

    async def wait_for_requests_async(self, count: int) -> list[ReceivedRequest]:
        """As ``wait_for_requests`` for async callers, who bound the wait with
        ``anyio.fail_after`` (it raises TimeoutError)."""
        return await self._log.wait_for_async(count)

    def add_fault(self, rule: FaultRule) -> None:
        """Adds a rule for requests that arrive from now on (thread-safe)."""
        self._faults.add(rule)

    def clear_faults(self) -> None:
        self._faults.clear()

    def __enter__(self) -> FakeModel:
        return self.start()

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    async def __aenter__(self) -> FakeModel:
        return await anyio.to_thread.run_sync(self.start)

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await anyio.to_thread.run_sync(self.stop)


def _listening_socket() -> socket.socket:
    """A socket listening on a free loopback port: clients may connect at once,
    and nothing else can take the port between choosing and serving it."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", 0))
        sock.listen(128)
    except OSError:
        sock.close()
        raise
    return sock
