"""Streamed uploads to S3 over a slow link: the blob timeout bounds the time one
part takes to move, not the time a call (whose parts share the link) takes, and
a link that stops dead still fails the upload. The S3 server (SeaweedFS on
loopback) sits behind a relay, also on loopback, that forwards at most
``TICK_BYTES`` towards the server per ``TICK`` and can be stopped. Parts are the
smallest S3 takes (SeaweedFS refuses smaller ones, as AWS does) and the timeout
is shrunk to match, so a run lasts seconds."""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator
from urllib.parse import urlsplit

import anyio
import anyio.abc
import pytest

from stead.blobs import BlobStore, BlobUnavailable, open_blob_store
from stead.blobs import store as blob_store
from stead.testing.seaweed import S3Server
from tests.conftest import s3_config

pytestmark = pytest.mark.anyio

PART = 5 * 1024 * 1024
TIMEOUT = 1.0
TICK = 0.1
TICK_BYTES = PART // 4
"""One part moves in 0.4 s: alone, well inside the timeout; with
``UPLOAD_CONCURRENCY`` parts sharing the link, each takes 1.6 s."""
UPLOAD_BYTES = 6 * PART + 1234
WAIT = 60.0
"""Hang guard for a call that must give up on its own; never a performance bound."""


class SlowLink:
    """A TCP relay on loopback to ``target``: bytes towards the server share one
    budget of ``TICK_BYTES`` per ``TICK``; answers pass as they come. After
    ``stop`` nothing moves either way."""

    def __init__(self, target: str) -> None:
        parts = urlsplit(target)
        self._host, self._port = parts.hostname or "127.0.0.1", parts.port or 80
        self._budget = 0
        self._refill = anyio.Lock()
        self._stopped = anyio.Event()
        self.forwarded = 0

    def stop(self) -> None:
        self._stopped.set()

    async def serve(self, task_status: anyio.abc.TaskStatus[str]) -> None:
        async with await anyio.create_tcp_listener(local_host="127.0.0.1") as listener:
            port = listener.extra(anyio.abc.SocketAttribute.local_port)
            task_status.started(f"http://127.0.0.1:{port}")
            await listener.serve(self._relay)

    async def _relay(self, client: anyio.abc.SocketStream) -> None:
        async with (
            client,
            await anyio.connect_tcp(self._host, self._port) as server,
            anyio.create_task_group() as tg,
        ):
            tg.start_soon(self._pump, client, server, True, tg.cancel_scope)
            tg.start_soon(self._pump, server, client, False, tg.cancel_scope)

    async def _pump(
        self,
        source: anyio.abc.SocketStream,
        sink: anyio.abc.SocketStream,
        throttled: bool,
        scope: anyio.CancelScope,
    ) -> None:
        try:
            while True:
                data = await source.receive(TICK_BYTES if throttled else 65536)
                while data:
                    allowed = await self._take(len(data)) if throttled else len(data)
                    if self._stopped.is_set():
                        await anyio.sleep_forever()
                    await sink.send(data[:allowed])
                    data = data[allowed:]
        except (anyio.EndOfStream, anyio.BrokenResourceError, anyio.ClosedResourceError):
            scope.cancel()

    async def _take(self, wanted: int) -> int:
        """Up to ``wanted`` bytes of this tick's budget, waiting for the next
        tick when it is spent."""
        async with self._refill:
            while self._budget == 0:
                await anyio.sleep(TICK)
                self._budget = TICK_BYTES
            granted = min(wanted, self._budget)
            self._budget -= granted
            self.forwarded += granted
            return granted


@pytest.fixture
async def slow_link(s3_server: S3Server) -> AsyncIterator[tuple[SlowLink, S3Server]]:
    link = SlowLink(s3_server.endpoint)
    async with anyio.create_task_group() as tg:
        endpoint = await tg.start(link.serve)
        yield link, S3Server(endpoint=endpoint, bucket=s3_server.bucket)
        tg.cancel_scope.cancel()


@pytest.fixture
def slow_blobs(slow_link: tuple[SlowLink, S3Server], monkeypatch: pytest.MonkeyPatch) -> BlobStore:
    monkeypatch.setattr(blob_store, "PART_BYTES", PART)
    _, server = slow_link
    url = server.url(f"slow-{uuid.uuid4().hex}")
    return open_blob_store(s3_config(server, url, timeout_seconds=TIMEOUT))


async def chunks_of(data: bytes, size: int) -> AsyncIterator[bytes]:
    for start in range(0, len(data), size):
        yield data[start : start + size]


async def test_an_upload_that_keeps_moving_succeeds(
    slow_blobs: BlobStore, slow_link: tuple[SlowLink, S3Server]
) -> None:
    data = os.urandom(UPLOAD_BYTES)
    with anyio.fail_after(WAIT):
        info = await slow_blobs.put_stream("slow/one", chunks_of(data, 2 * PART - 7))
    assert info.size == len(data)
    assert slow_link[0].forwarded > UPLOAD_BYTES
    assert await slow_blobs.get_bytes("slow/one") == data


async def test_an_upload_whose_link_stops_is_unavailable(
    slow_blobs: BlobStore, slow_link: tuple[SlowLink, S3Server]
) -> None:
    link, _ = slow_link

    async def stops_midway() -> AsyncIterator[bytes]:
        for index in range(UPLOAD_BYTES // PART):
            if index == 3:
                link.stop()
            yield os.urandom(PART)

    with anyio.fail_after(WAIT), pytest.raises(BlobUnavailable) as caught:
        await slow_blobs.put_stream("slow/stopped", stops_midway())
    assert caught.value.retryable
