"""The blob store's behaviour, the same on a local directory, in memory and on a real
S3 server (SeaweedFS on loopback, started once per session)."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import signal
import socket
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path

import anyio
import pytest

from stead.blobs import (
    BlobAccessDenied,
    BlobConfig,
    BlobNotFound,
    BlobStore,
    BlobUnavailable,
    InvalidBlobKey,
    open_blob_store,
)
from stead.blobs.store import PART_BYTES, STREAM_CHUNK_BYTES
from stead.testing import free_port
from stead.testing.seaweed import S3Server, multipart_uploads
from tests.conftest import s3_config

pytestmark = pytest.mark.anyio

WAIT = 10.0
"""Hang guard for calls that must give up on their own; never a performance bound."""
UNREACHABLE_TIMEOUT = 0.5


class Boom(Exception):
    pass


@pytest.fixture(params=["file", "memory", "s3"])
def blobs(request: pytest.FixtureRequest, tmp_path: Path) -> BlobStore:
    """An empty store of each kind; on S3 a fresh prefix of the shared bucket."""
    if request.param == "file":
        return open_blob_store(BlobConfig(url=f"file://{tmp_path / 'blobs'}"))
    if request.param == "memory":
        return open_blob_store(BlobConfig(url="memory://"))
    server: S3Server = request.getfixturevalue("s3_server")
    return open_blob_store(s3_config(server, server.url(f"test-{uuid.uuid4().hex}")))


async def chunks_of(data: bytes, size: int) -> AsyncIterator[bytes]:
    for start in range(0, len(data), size):
        yield data[start : start + size]


async def read_all(blobs: BlobStore, key: str) -> tuple[bytes, list[int]]:
    """The object's bytes and the size of each chunk the stream yielded."""
    parts = [chunk async for chunk in await blobs.get_stream(key)]
    return b"".join(parts), [len(part) for part in parts]


async def test_bytes_round_trip(blobs: BlobStore) -> None:
    info = await blobs.put_bytes("snapshots/sbx_1/a.bin", b"hello blobs")
    assert (info.key, info.size) == ("snapshots/sbx_1/a.bin", 11)
    assert await blobs.get_bytes("snapshots/sbx_1/a.bin") == b"hello blobs"
    head = await blobs.head("snapshots/sbx_1/a.bin")
    assert head is not None and head.size == 11


async def test_put_replaces_the_whole_object(blobs: BlobStore) -> None:
    await blobs.put_bytes("k", b"a much longer first version")
    await blobs.put_bytes("k", b"short")
    assert await blobs.get_bytes("k") == b"short"


async def test_multi_megabyte_stream_round_trip(blobs: BlobStore) -> None:
    # More than two upload parts, in chunks that do not divide the part size.
    data = os.urandom(19 * 1024 * 1024 + 12345)
    info = await blobs.put_stream("big/one", chunks_of(data, 1024 * 1024 - 7))
    assert info.size == len(data)
    head = await blobs.head("big/one")
    assert head is not None and head.size == len(data)
    read, sizes = await read_all(blobs, "big/one")
    assert hashlib.sha256(read).digest() == hashlib.sha256(data).digest()
    assert all(size >= STREAM_CHUNK_BYTES for size in sizes[:-1])


async def test_an_empty_stream_stores_an_empty_object(blobs: BlobStore) -> None:
    info = await blobs.put_stream("empty", chunks_of(b"", 1))
    assert info.size == 0
    assert await blobs.get_bytes("empty") == b""


async def test_a_failing_source_abandons_the_upload(blobs: BlobStore) -> None:
    await blobs.put_bytes("kept", b"first version")

    async def failing() -> AsyncIterator[bytes]:
        for _ in range(10):
            yield os.urandom(1024 * 1024)
        raise Boom

    with pytest.raises(Boom):
        await blobs.put_stream("kept", failing())
    with pytest.raises(Boom):
        await blobs.put_stream("never", failing())
    assert await blobs.get_bytes("kept") == b"first version"
    assert await blobs.head("never") is None


async def test_a_cancelled_upload_leaves_no_object(blobs: BlobStore) -> None:
    sent_some = anyio.Event()

    async def stalls() -> AsyncIterator[bytes]:
        for _ in range(10):
            yield os.urandom(1024 * 1024)
        sent_some.set()
        await anyio.sleep_forever()
        yield b""  # pragma: no cover - never reached

    async with anyio.create_task_group() as tg:
        tg.start_soon(blobs.put_stream, "cancelled", stalls())
        with anyio.fail_after(WAIT):
            await sent_some.wait()
        tg.cancel_scope.cancel()
    assert await blobs.head("cancelled") is None
    assert [info.key for info in await blobs.list()] == []


@pytest.mark.parametrize("cut", ["failed", "cancelled"])
@pytest.mark.parametrize("kind", ["file", "s3"])
async def test_an_upload_in_parts_cut_short_leaves_none_of_its_parts(
    kind: str, cut: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    """S3 keeps the parts of a multipart upload that was neither completed nor
    aborted, billed and shown by no listing; the local backend keeps
    ``<key>#1``. An upload whose source fails, or whose caller is cancelled,
    once its upload in parts has begun aborts it. Before, S3 kept it."""
    if kind == "file":
        root = tmp_path / "blobs"
        blobs = open_blob_store(BlobConfig(url=f"file://{root}"))

        def parts() -> list[str]:
            return sorted(path.relative_to(root).as_posix() for path in root.rglob("*#*"))

        begun = ["a/k#1"]
    else:
        server: S3Server = request.getfixturevalue("s3_server")
        prefix = f"test-{uuid.uuid4().hex}"
        blobs = open_blob_store(s3_config(server, server.url(prefix)))

        def parts() -> list[str]:
            return multipart_uploads(server, f"{prefix}/")

        begun = [f"{prefix}/a/k"]
    seen = anyio.Event()

    async def cut_short() -> AsyncIterator[bytes]:
        yield os.urandom(PART_BYTES + 1)
        # Writing more than a part's bytes began the upload in parts.
        assert await anyio.to_thread.run_sync(parts) == begun
        seen.set()
        if cut == "failed":
            raise Boom
        await anyio.sleep_forever()

    if cut == "failed":
        with pytest.raises(Boom):
            await blobs.put_stream("a/k", cut_short())
    else:
        async with anyio.create_task_group() as tg:
            tg.start_soon(blobs.put_stream, "a/k", cut_short())
            with anyio.fail_after(WAIT):
                await seen.wait()
            tg.cancel_scope.cancel()
    assert seen.is_set()
    assert await anyio.to_thread.run_sync(parts) == []
    assert await blobs.head("a/k") is None


async def test_missing_key(blobs: BlobStore) -> None:
    assert await blobs.head("no/such") is None
    with pytest.raises(BlobNotFound) as caught:
        await blobs.get_bytes("no/such")
    assert caught.value.key == "no/such"
    with pytest.raises(BlobNotFound):
        await blobs.get_stream("no/such")
    assert not BlobNotFound.retryable


async def test_delete_is_idempotent(blobs: BlobStore) -> None:
    await blobs.put_bytes("gone", b"x")
    await blobs.delete("gone")
    await blobs.delete("gone")
    await blobs.delete("never/was")
    assert await blobs.head("gone") is None


async def test_list_matches_prefix_segment_by_segment(blobs: BlobStore) -> None:
    for key in ("a/b/x", "a/b/y/z", "a/bc", "other"):
        await blobs.put_bytes(key, key.encode())
    assert sorted(info.key for info in await blobs.list("a/b")) == ["a/b/x", "a/b/y/z"]
    assert sorted(info.key for info in await blobs.list()) == ["a/b/x", "a/b/y/z", "a/bc", "other"]
    assert await blobs.list("nothing/here") == []
    sizes = {info.key: info.size for info in await blobs.list("a")}
    assert sizes == {"a/b/x": 5, "a/b/y/z": 7, "a/bc": 4}


BAD_KEYS = [
    "",
    "/absolute",
    "trailing/",
    "a//b",
    "a/./b",
    "a/../b",
    "..",
    "nul\x00byte",
    "new\nline",
    "back\\slash",
    "upload#1",
    "dir#22/file",
    "x" * 1025,
]


@pytest.mark.parametrize("key", BAD_KEYS)
async def test_invalid_keys_are_refused_by_every_call(blobs: BlobStore, key: str) -> None:
    calls: list[Callable[[], Awaitable[object]]] = [
        lambda: blobs.put_bytes(key, b"x"),
        lambda: blobs.put_stream(key, chunks_of(b"x", 1)),
        lambda: blobs.get_bytes(key),
        lambda: blobs.get_stream(key),
        lambda: blobs.head(key),
        lambda: blobs.delete(key),
    ]
    if key:  # "" is the whole store for list
        calls.append(lambda: blobs.list(key))
    for call in calls:
        with pytest.raises(InvalidBlobKey):
            await call()
    assert await blobs.list() == []


async def test_keys_that_look_special_elsewhere_are_plain_keys(blobs: BlobStore) -> None:
    keys = ["with space", "ümlaut/ß", "pct%2Fencoded", "hash#tag", "a#1b", "x.tar.zst"]
    for key in keys:
        await blobs.put_bytes(key, key.encode())
    for key in keys:
        assert await blobs.get_bytes(key) == key.encode()
    assert sorted(info.key for info in await blobs.list()) == sorted(keys)


@pytest.fixture
def silent_port() -> Iterator[int]:
    """A loopback port that accepts connections and never answers: the kernel
    completes the handshake from the backlog, nobody reads the request."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(64)
        yield int(sock.getsockname()[1])


def unreachable_calls(blobs: BlobStore) -> list[Callable[[], Awaitable[object]]]:
    return [
        lambda: blobs.put_bytes("k", b"x"),
        lambda: blobs.put_stream("k", chunks_of(b"x" * 100, 10)),
        lambda: blobs.get_bytes("k"),
        lambda: blobs.get_stream("k"),
        lambda: blobs.head("k"),
        lambda: blobs.delete("k"),
        lambda: blobs.list("k"),
    ]


@pytest.mark.parametrize("endpoint", ["closed", "silent"])
async def test_unreachable_s3_is_unavailable(
    endpoint: str, request: pytest.FixtureRequest, s3_server: S3Server
) -> None:
    port = request.getfixturevalue("silent_port") if endpoint == "silent" else free_port()
    server = S3Server(endpoint=f"http://127.0.0.1:{port}", bucket="nowhere")
    blobs = open_blob_store(s3_config(server, server.url(), timeout_seconds=UNREACHABLE_TIMEOUT))
    assert blobs.timeout_seconds == UNREACHABLE_TIMEOUT
    for call in unreachable_calls(blobs):
        with anyio.fail_after(WAIT), pytest.raises(BlobUnavailable) as caught:
            await call()
        assert caught.value.retryable


async def test_a_wrong_s3_secret_is_access_denied_on_every_call(s3_server: S3Server) -> None:
    """Not a store that is away for a moment: retrying cannot help. Before, a
    listing's refusal (obstore's generic error) was BlobUnavailable, retryable."""
    given = s3_config(s3_server, s3_server.url(f"test-{uuid.uuid4().hex}"))
    await open_blob_store(given).put_bytes("k", b"x")
    blobs = open_blob_store(dataclasses.replace(given, s3_secret_access_key="not-the-secret"))
    for call in unreachable_calls(blobs):
        with anyio.fail_after(WAIT), pytest.raises(BlobAccessDenied) as caught:
            await call()
        assert not caught.value.retryable and "not-the-secret" not in str(caught.value)


def test_config_errors(tmp_path: Path) -> None:
    for url in ("file://relative/dir", "ftp://x/y", "s3://", "file://host/dir"):
        with pytest.raises(ValueError):
            open_blob_store(BlobConfig(url=url))
    with pytest.raises(ValueError):
        open_blob_store(BlobConfig(url="memory://", timeout_seconds=0))
    with pytest.raises(ValueError, match="loopback"):
        open_blob_store(BlobConfig(url="s3://b", s3_endpoint="http://example.com:9000"))
    with pytest.raises(ValueError, match="together"):
        open_blob_store(BlobConfig(url="s3://b", s3_access_key_id="only-the-id"))


async def test_file_url_path_is_percent_decoded(tmp_path: Path) -> None:
    blobs = open_blob_store(BlobConfig(url=f"file://{tmp_path}/my%20blobs"))
    await blobs.put_bytes("k", b"v")
    assert (tmp_path / "my blobs" / "k").read_bytes() == b"v"


KILLED_UPLOAD = """
import asyncio, os, signal, sys
from stead.blobs import BlobConfig, open_blob_store
from stead.blobs.store import PART_BYTES

async def chunks():
    yield os.urandom(PART_BYTES + 1)
    # The write of the bytes above began the upload in parts: killed in it.
    os.kill(os.getpid(), signal.SIGKILL)
    yield b""

config = BlobConfig(**__import__("json").loads(sys.argv[1]))
asyncio.run(open_blob_store(config).put_stream(sys.argv[2], chunks()))
"""


def kill_during_upload(config: BlobConfig, key: str) -> None:
    """Uploads to ``key`` in a process SIGKILLed once the upload has begun."""
    given = json.dumps(dataclasses.asdict(config))
    argv = [sys.executable, "-c", KILLED_UPLOAD, given, key]
    done = subprocess.run(argv, capture_output=True, timeout=60, check=False)
    assert done.returncode == -signal.SIGKILL, done.stderr.decode()


async def test_an_upload_killed_midway_is_found_and_freed(tmp_path: Path) -> None:
    """The local backend's part (``<key>#1``) stays when the uploading process
    is killed, and no listing shows it."""
    config = BlobConfig(url=f"file://{tmp_path / 'blobs'}")
    blobs = open_blob_store(config)
    await blobs.put_bytes("sandboxes/sx/kept", b"kept")
    kill_during_upload(config, "sandboxes/s/snap.tar.zst")
    kill_during_upload(config, "sandboxes/sx/snap.tar.zst")
    assert sorted(info.key for info in await blobs.list()) == ["sandboxes/sx/kept"]
    found = await blobs.unfinished_uploads("sandboxes")
    assert sorted(u.key for u in found) == ["sandboxes/s/snap.tar.zst", "sandboxes/sx/snap.tar.zst"]
    [upload] = await blobs.unfinished_uploads("sandboxes/s")
    assert (upload.key, upload.part) == ("sandboxes/s/snap.tar.zst", "sandboxes/s/snap.tar.zst#1")
    assert (tmp_path / "blobs" / upload.part).is_file()
    await blobs.abort_upload(upload)
    await blobs.abort_upload(upload)  # gone already: no error
    assert [u.key for u in await blobs.unfinished_uploads()] == ["sandboxes/sx/snap.tar.zst"]
    assert not (tmp_path / "blobs" / upload.part).exists()
    assert await blobs.get_bytes("sandboxes/sx/kept") == b"kept"


async def test_a_store_without_parts_has_no_unfinished_uploads() -> None:
    blobs = open_blob_store(BlobConfig(url="memory://"))
    assert await blobs.unfinished_uploads("sandboxes") == []
