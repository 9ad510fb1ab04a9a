"""The baseline HTTP server: stead's HTTP stack with nothing behind it.

Run as ``python bench/_bare_server.py PORT [SQLITE_FILE]``. It is a raw ASGI app on uvicorn with
uvloop and httptools, configured as ``stead serve`` configures uvicorn, so any
difference against stead is stead's own work (auth, validation, the store, the
bus), not the HTTP stack's. Endpoints, all on loopback:

- ``GET /ping``: ``{}``.
- ``POST /events``: the body of a stead send (``{"events": [...]}``); gives each
  event an id and ``processed_at`` like stead does, fans the SSE frames out to
  every ``/stream`` reader in memory (no storage), and answers ``{"data": [...]}``.
- ``POST /durable-events``: as ``/events``, and before it answers, the echoes are
  inserted into ``SQLITE_FILE`` and committed as stead's store commits (WAL,
  ``synchronous=FULL``, ``BEGIN IMMEDIATE``), on the event loop itself: the
  least a send that is durable when it is answered can cost.
- ``GET /stream``: an SSE stream of those frames, framed as stead frames them.
- ``POST /turn``: as ``/events``, and the frames stored at ``/blobs/turn`` follow
  the echo on every stream (a turn's other events, as stead streamed them).
- ``PUT /blobs/<name>`` then ``GET /blobs/<name>``: stores bytes, serves them back as JSON;
  ``POST /blobs/<name>`` reads the request body and answers the same stored bytes
  (a canned answer to a create call).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sqlite3
import sys
from datetime import UTC, datetime
from typing import Any

import uvicorn
from starlette.types import Receive, Scope, Send

JSON_HEADERS = ((b"content-type", b"application/json"),)
SSE_HEADERS = (
    (b"content-type", b"text/event-stream; charset=utf-8"),
    (b"cache-control", b"no-cache"),
    (b"x-accel-buffering", b"no"),
)


async def read_body(receive: Receive) -> bytes:
    chunks: list[bytes] = []
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            break
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            break
    return b"".join(chunks)


async def respond(send: Send, body: bytes, status: int = 200) -> None:
    await send({"type": "http.response.start", "status": status, "headers": JSON_HEADERS})
    await send({"type": "http.response.body", "body": body})


def dumps(value: Any) -> bytes:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode()


DURABLE_TABLE = (
    "CREATE TABLE IF NOT EXISTS events (session_id TEXT NOT NULL, seq INTEGER NOT NULL,"
    " id TEXT NOT NULL UNIQUE, type TEXT NOT NULL, body TEXT NOT NULL,"
    " processed_at TEXT NOT NULL, PRIMARY KEY (session_id, seq))"
)


def durable_log(path: str) -> sqlite3.Connection:
    conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=FULL")
    conn.execute(DURABLE_TABLE)
    return conn


class BareApp:
    def __init__(self, log: sqlite3.Connection | None = None) -> None:
        self._readers: set[asyncio.Queue[bytes]] = set()
        self._next_id = 0
        self._blobs: dict[str, bytes] = {}
        self._log = log

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        method, path = scope["method"], scope["path"]
        if (method, path) == ("GET", "/ping"):
            await respond(send, b"{}")
        elif (method, path) == ("POST", "/events"):
            await self._send_events(receive, send)
        elif (method, path) == ("POST", "/durable-events") and self._log is not None:
            await self._send_events(receive, send, log=self._log)
        elif (method, path) == ("POST", "/turn"):
            await self._send_events(receive, send, then=self._blobs.get("/blobs/turn", b""))
        elif (method, path) == ("GET", "/stream"):
            await self._stream(receive, send)
        elif method == "PUT" and path.startswith("/blobs/"):
            self._blobs[path] = await read_body(receive)
            await respond(send, b"{}")
        elif method == "GET" and path in self._blobs:
            await respond(send, self._blobs[path])
        elif method == "POST" and path in self._blobs:
            await read_body(receive)
            await respond(send, self._blobs[path])
        else:
            await respond(send, b'{"error":"not found"}', status=404)

    async def _send_events(
        self, receive: Receive, send: Send, then: bytes = b"", log: sqlite3.Connection | None = None
    ) -> None:
        params = json.loads(await read_body(receive))
        now = datetime.now(UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")
        echoes = []
        for event in params["events"]:
            self._next_id += 1
            body = {k: v for k, v in event.items() if k != "type"}
            event_id = f"sevt_{self._next_id:024d}"
            echoes.append({"type": event["type"], "id": event_id, **body, "processed_at": now})
        frames = b"".join(
            f"event: {e['type']}\nid: {e['id']}\ndata: ".encode() + dumps(e) + b"\n\n"
            for e in echoes
        )
        if log is not None:
            log.execute("BEGIN IMMEDIATE")
            log.executemany(
                "INSERT INTO events VALUES ('bench', ?, ?, ?, ?, ?)",
                [
                    (int(e["id"][5:]), e["id"], e["type"], dumps(e).decode(), e["processed_at"])
                    for e in echoes
                ],
            )
            log.execute("COMMIT")
        frames += then
        for queue in self._readers:
            queue.put_nowait(frames)
        await respond(send, dumps({"data": echoes}))

    async def _stream(self, receive: Receive, send: Send) -> None:
        queue: asyncio.Queue[bytes] = asyncio.Queue()
        self._readers.add(queue)
        try:
            await send({"type": "http.response.start", "status": 200, "headers": SSE_HEADERS})
            await send(
                {"type": "http.response.body", "body": b": stream open\n\n", "more_body": True}
            )
            pump = asyncio.ensure_future(self._pump(queue, send))
            while (await receive())["type"] != "http.disconnect":
                pass
            pump.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await pump
        finally:
            self._readers.discard(queue)
        await send({"type": "http.response.body", "body": b"", "more_body": False})

    @staticmethod
    async def _pump(queue: asyncio.Queue[bytes], send: Send) -> None:
        while True:
            frames = await queue.get()
            await send({"type": "http.response.body", "body": frames, "more_body": True})


def main() -> None:
    port = int(sys.argv[1])
    log = durable_log(sys.argv[2]) if len(sys.argv) > 2 else None
    uvicorn.run(
        BareApp(log),
        host="127.0.0.1",
        port=port,
        loop="uvloop",
        http="httptools",
        log_level="warning",
        access_log=False,
        lifespan="off",
        timeout_graceful_shutdown=3,
    )


if __name__ == "__main__":
    main()
