"""``BlobStore``: named immutable objects in a local directory or an S3 bucket.

One class over obstore serves every backend (``file://``, ``s3://`` and, for
tests, ``memory://``); the URL picks the backend in ``open_blob_store``. Every
call is bounded by the configured timeout, and obstore's exceptions become the
``BlobError`` family in ``map_store_errors`` only.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterable, AsyncIterator, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import unquote, urlsplit

import anyio
import obstore
from obstore.exceptions import (
    BaseError,
    GenericError,
    InvalidPathError,
    NotFoundError,
    PermissionDeniedError,
    UnauthenticatedError,
)
from obstore.store import LocalStore, MemoryStore, S3Store

from stead.blobs.config import BlobConfig, check_blob_url, check_s3_endpoint, check_s3_keys
from stead.blobs.errors import (
    BlobAccessDenied,
    BlobError,
    BlobNotFound,
    BlobUnavailable,
    InvalidBlobKey,
)
from stead.blobs.unfinished import (
    UPLOAD_SUFFIX,
    UnfinishedUpload,
    local_parts,
    remove_local_part,
    remove_parts,
)

if TYPE_CHECKING:
    from obstore import AsyncWritableFile, BytesStream, ObjectMeta
    from obstore.store import ClientConfig, ObjectStore, RetryConfig, S3Config

PART_BYTES = 8 * 1024 * 1024
"""Size of one part of a streamed upload (S3 needs at least 5 MiB per part)."""
UPLOAD_CONCURRENCY = 4
"""Parts of one streamed upload in flight at once while it is written (closing
it sends the last part beside them)."""
STREAM_CHUNK_BYTES = 1024 * 1024
"""Smallest chunk a streamed download yields (the last one may be shorter)."""
RANGE_CHUNK_BYTES = 8 * 1024 * 1024
"""One ranged read of a local object's download."""
REQUEST_CEILING = timedelta(hours=1)
"""Longest one HTTP request may last in total, a whole streamed download
included; progress within it is bounded by ``timeout_seconds``."""
MAX_RETRIES = 2
"""Retries of a failed request (transient errors only) inside one call."""
WALK_TIMEOUTS = 4
"""Timeouts a search of the local directory for unfinished uploads may take."""
MAX_KEY_LENGTH = 1024
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
# The local backend keeps an upload in progress at ``<key>#<n>`` and refuses
# such names, while S3 accepts them: banned everywhere (``UPLOAD_SUFFIX``) so a
# key means the same on every backend.
REFUSED = re.compile(r"status code: 40[13]\b")
"""How obstore's generic error (a listing's, a streamed upload's) says the
server answered 401 or 403: the only sign of a refusal it gives there."""


@dataclass(frozen=True, slots=True)
class BlobInfo:
    """What the store says about one object."""

    key: str
    size: int
    last_modified: datetime


def open_blob_store(config: BlobConfig) -> BlobStore:
    """A ``BlobStore`` for ``config.url``. Raises ``ValueError`` for a URL or option
    it cannot use. Opens no connection: a wrong endpoint shows on the first call."""
    if config.timeout_seconds <= 0:
        raise ValueError("timeout_seconds must be positive")
    parts = urlsplit(check_blob_url(config.url))
    if parts.scheme == "file":
        # The path is percent-encoded in the URL (``file:///srv/my%20blobs``).
        root = unquote(parts.path)
        store: ObjectStore = LocalStore(prefix=root, mkdir=True, automatic_cleanup=True)
    elif parts.scheme == "s3":
        store = _s3_store(config, parts.netloc, parts.path.strip("/"))
    else:
        store = MemoryStore()
    return BlobStore(store, timeout_seconds=config.timeout_seconds)


def _s3_store(config: BlobConfig, bucket: str, prefix: str) -> S3Store:
    check_s3_keys(config.s3_access_key_id, config.s3_secret_access_key)
    timeout = timedelta(seconds=config.timeout_seconds)
    # The read timeout runs from a request's start to its answer, so it bounds
    # the whole upload of one part, which shares the link with every other part
    # in flight: one timeout for each. Other calls are bounded more tightly by
    # ``BlobStore`` itself.
    part_timeout = timeout * (UPLOAD_CONCURRENCY + 1)
    client: ClientConfig = {
        "connect_timeout": timeout,
        "read_timeout": part_timeout,
        "timeout": max(REQUEST_CEILING, part_timeout),
    }
    retry: RetryConfig = {
        "max_retries": MAX_RETRIES,
        "retry_timeout": timeout,
        "backoff": {"init_backoff": timedelta(milliseconds=100), "max_backoff": timeout},
    }
    options: S3Config = {}
    if config.s3_endpoint is not None:
        if urlsplit(check_s3_endpoint(config.s3_endpoint)).scheme == "http":
            client["allow_http"] = True
        options["endpoint"] = config.s3_endpoint
    if config.s3_region is not None:
        options["region"] = config.s3_region
    if config.s3_access_key_id is not None and config.s3_secret_access_key is not None:
        options["access_key_id"] = config.s3_access_key_id
        options["secret_access_key"] = config.s3_secret_access_key
    return S3Store(
        bucket,
        prefix=prefix or None,
        config=options,
        client_options=client,
        retry_config=retry,
    )


class BlobStore:
    """Async access to one store. Keys are ``/``-separated relative paths
    (``snapshots/sbx_1/abc.tar.zst``); writing a key replaces its object whole,
    and no reader ever sees a partly written object.

    Every method raises the ``BlobError`` family: ``BlobUnavailable`` when the
    store does not answer within ``timeout_seconds`` (or fails). If the awaiting
    task is cancelled the request is dropped; an upload that did not finish
    leaves no object behind.
    """

    def __init__(self, store: ObjectStore, *, timeout_seconds: float) -> None:
        self._store = store
        self._timeout = timeout_seconds

    @property
    def timeout_seconds(self) -> float:
        return self._timeout

    async def put_stream(self, key: str, chunks: AsyncIterable[bytes]) -> BlobInfo:
        """Uploads the chunks as one object (multipart for large ones), holding at
        most ``UPLOAD_CONCURRENCY`` parts in memory. The store must move one part
        (``PART_BYTES``) per timeout, however many share the link; producing the
        chunks is the caller's time. If ``chunks`` raises, or the call fails or
        is cancelled, the upload is aborted (what it wrote is freed, as far as
        the store answers within the timeout) and the error propagates
        unchanged. A process killed mid-upload leaves its parts: see
        ``unfinished_uploads``."""
        _check_key(key)
        writer = obstore.open_writer_async(
            self._store, key, buffer_size=PART_BYTES, max_concurrency=UPLOAD_CONCURRENCY
        )
        try:
            await self._write(writer, key, chunks)
        except BaseException as exc:
            await self._abort(writer, exc)
            raise
        return await self._head_required(key)

    async def _write(
        self, writer: AsyncWritableFile, key: str, chunks: AsyncIterable[bytes]
    ) -> None:
        # A write waits, while UPLOAD_CONCURRENCY parts are in flight, for the
        # first of them to land; closing waits for them, the last part and the
        # request that completes the upload. The parts share the link, so each
        # call gets a timeout per part (or request) it may wait on.
        write_bound = self._timeout * UPLOAD_CONCURRENCY
        close_bound = self._timeout * (UPLOAD_CONCURRENCY + 2)
        async for chunk in chunks:
            view = memoryview(chunk)
            # A write of at most one part starts at most one, so no more than
            # UPLOAD_CONCURRENCY are ever in flight before the close.
            for start in range(0, len(view), PART_BYTES):
                with map_store_errors(key), anyio.fail_after(write_bound):
                    await writer.write(view[start : start + PART_BYTES])
        # Only a closed writer commits the object.
        with map_store_errors(key), anyio.fail_after(close_bound):
            await writer.close()

    async def _abort(self, writer: AsyncWritableFile, cause: BaseException) -> None:
        """Aborts the writer's upload in parts, if it began one: S3 keeps the
        parts of an upload neither completed nor aborted, and the local backend
        removes its part only once the writer is freed, which a traceback can
        put off. obstore aborts only as it leaves an ``async with`` on an
        error, so that exit is made here: the close above needs its own
        timeout, which that block's exit would not give. A writer whose close
        failed refuses (the upload aborted itself, or the close timed out); an
        abort that fails leaves the upload to the bucket's lifecycle rule
        (README)."""
        shielded = anyio.CancelScope(shield=True)
        with shielded, anyio.move_on_after(self._timeout), suppress(BaseError, OSError):
            await writer.__aexit__(type(cause), cause, cause.__traceback__)

    async def get_stream(self, key: str) -> AsyncIterator[bytes]:
        """The object's bytes in chunks of at least ``STREAM_CHUNK_BYTES``. Raises
        ``BlobNotFound`` here, before the first chunk; each chunk is bounded by
        the timeout. Stopping early is fine: the request ends when the iterator
        is dropped."""
        _check_key(key)
        if isinstance(self._store, LocalStore):
            # obstore streams a local file about ten times slower than it reads
            # ranges of it, and a wake waits for this download.
            size = (await self._head_required(key)).size
            return _Ranges(self._store, key, size, self._timeout)
        with map_store_errors(key), anyio.fail_after(self._timeout):
            result = await obstore.get_async(self._store, key)
        return _Chunks(key, result.stream(min_chunk_size=STREAM_CHUNK_BYTES), self._timeout)

    async def put_bytes(self, key: str, data: bytes) -> BlobInfo:
        """Stores ``data`` as one object. For payloads that move within the
        timeout; stream anything larger with ``put_stream``."""
        _check_key(key)
        with map_store_errors(key), anyio.fail_after(self._timeout):
            await obstore.put_async(self._store, key, data)
        return await self._head_required(key)

    async def get_bytes(self, key: str) -> bytes:
        """The whole object, read within the timeout. ``BlobNotFound`` if missing."""
        _check_key(key)
        with map_store_errors(key), anyio.fail_after(self._timeout):
            result = await obstore.get_async(self._store, key)
            return bytes(await result.bytes_async())

    async def head(self, key: str) -> BlobInfo | None:
        """The object's size and modification time, or None if there is none."""
        _check_key(key)
        try:
            return await self._head_required(key)
        except BlobNotFound:
            return None

    async def delete(self, key: str) -> None:
        """Removes the object; a missing one is not an error. On the local
        backend what an upload to ``key`` left when its process was killed
        goes too: no listing shows it, so nothing else would remove it."""
        _check_key(key)
        if self._local_root is not None:
            staged = self._local_root / key
            with map_store_errors(key), anyio.fail_after(self._timeout):
                await anyio.to_thread.run_sync(remove_parts, staged)
        try:
            with map_store_errors(key), anyio.fail_after(self._timeout):
                await obstore.delete_async(self._store, key)
        except BlobNotFound:
            pass

    async def unfinished_uploads(self, prefix: str = "") -> list[UnfinishedUpload]:
        """The local backend's uploads under ``prefix`` (as ``list`` matches it)
        that began and never finished (their process was killed): it keeps what
        they wrote, and no listing shows it. One still under way is among them:
        abort only what no process can be writing. Only the local backend's are
        found; on S3 this is always empty: obstore cannot list multipart uploads,
        and the bucket's lifecycle rule ``AbortIncompleteMultipartUpload``
        frees those (README)."""
        if prefix:
            _check_key(prefix)
        root = self._local_root
        if root is None:
            return []
        with map_store_errors(prefix), anyio.fail_after(self._timeout * WALK_TIMEOUTS):
            return await anyio.to_thread.run_sync(local_parts, root, prefix, abandon_on_cancel=True)

    async def abort_upload(self, upload: UnfinishedUpload) -> None:
        """Frees what the upload wrote (``unfinished_uploads`` found it); one
        gone already is no error. Only the local backend finds any: on another
        there is nothing to free."""
        _check_key(upload.key)
        root = self._local_root
        if root is None:
            return
        with map_store_errors(upload.key), anyio.fail_after(self._timeout):
            await anyio.to_thread.run_sync(remove_local_part, root, upload, abandon_on_cancel=True)

    @property
    def _local_root(self) -> Path | None:
        if isinstance(self._store, LocalStore):
            return self._store.prefix
        return None

    async def list(self, prefix: str = "") -> list[BlobInfo]:
        """Every object under ``prefix``, matched segment by segment: ``a/b`` holds
        ``a/b/c`` but not ``a/bc``. ``""`` lists everything. Order is unspecified."""
        if prefix:
            _check_key(prefix)
        with map_store_errors(prefix), anyio.fail_after(self._timeout):
            found = await obstore.list(self._store, prefix or None).collect_async()
        return [_info(meta) for meta in found]

    async def _head_required(self, key: str) -> BlobInfo:
        with map_store_errors(key), anyio.fail_after(self._timeout):
            return _info(await obstore.head_async(self._store, key))


class _Chunks:
    """An object's bytes as an async iterator, each chunk bounded in time."""

    def __init__(self, key: str, stream: BytesStream, timeout: float) -> None:
        self._key = key
        self._stream = stream
        self._timeout = timeout

    def __aiter__(self) -> _Chunks:
        return self

    async def __anext__(self) -> bytes:
        with map_store_errors(self._key), anyio.fail_after(self._timeout):
            return await self._stream.__anext__()


class _Ranges:
    """An object's bytes as an async iterator of ranged reads of
    ``RANGE_CHUNK_BYTES``, each bounded in time. A read that comes back short
    (the object changed underneath) ends the iteration there: the caller's
    size and hash checks notice."""

    def __init__(self, store: ObjectStore, key: str, size: int, timeout: float) -> None:
        self._store = store
        self._key = key
        self._size = size
        self._timeout = timeout
        self._position = 0

    def __aiter__(self) -> _Ranges:
        return self

    async def __anext__(self) -> bytes:
        if self._position >= self._size:
            raise StopAsyncIteration
        end = min(self._position + RANGE_CHUNK_BYTES, self._size)
        with map_store_errors(self._key), anyio.fail_after(self._timeout):
            chunk = await obstore.get_range_async(
                self._store, self._key, start=self._position, end=end
            )
        if len(chunk) < end - self._position:
            self._position = self._size
        else:
            self._position = end
        if not len(chunk):
            raise StopAsyncIteration
        return bytes(chunk)


@contextmanager
def map_store_errors(key: str) -> Iterator[None]:
    """The one place obstore's exceptions and the room's timeouts become
    ``BlobError``s. Only the first line of obstore's message is kept: the rest
    is a debug dump that can run to pages."""
    try:
        yield
    except TimeoutError as exc:
        raise BlobUnavailable(f"blob store did not answer in time ({key!r})") from exc
    except (FileNotFoundError, NotFoundError) as exc:
        # obstore raises the builtin FileNotFoundError for a missing object.
        raise BlobNotFound(key) from exc
    except InvalidPathError as exc:
        raise InvalidBlobKey(key, _first_line(exc)) from exc
    except (PermissionError, PermissionDeniedError, UnauthenticatedError) as exc:
        raise BlobAccessDenied(f"blob store refused access to {key!r}: {_first_line(exc)}") from exc
    except (GenericError, OSError) as exc:
        if REFUSED.search(_first_line(exc)):
            # A listing's or a streamed upload's refusal comes without a type of
            # its own: the status says it (a wrong secret, a missing grant).
            raise BlobAccessDenied(
                f"blob store refused access to {key!r}: {_first_line(exc)}"
            ) from exc
        raise BlobUnavailable(f"blob store failed on {key!r}: {_first_line(exc)}") from exc
    except BaseError as exc:
        raise BlobError(f"blob store error on {key!r}: {_first_line(exc)}") from exc


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _check_key(key: str) -> None:
    if not key:
        raise InvalidBlobKey(key, "empty")
    if len(key) > MAX_KEY_LENGTH:
        raise InvalidBlobKey(key, f"longer than {MAX_KEY_LENGTH} characters")
    if _CONTROL.search(key):
        raise InvalidBlobKey(key, "control character")
    if "\\" in key:
        # S3-compatible servers differ: SeaweedFS reads it as '/', AWS keeps it.
        raise InvalidBlobKey(key, "backslash")
    segments = key.split("/")
    if any(segment in ("", ".", "..") for segment in segments):
        raise InvalidBlobKey(key, "empty, '.' or '..' segment (or a leading or trailing '/')")
    if any(UPLOAD_SUFFIX.search(segment) for segment in segments):
        raise InvalidBlobKey(key, "a segment ends in '#' and digits")


def _info(meta: ObjectMeta) -> BlobInfo:
    return BlobInfo(key=meta["path"], size=meta["size"], last_modified=meta["last_modified"])
