"""Files API throughput: an upload and a download through the official SDK
against a real ``stead serve``, against the blob store alone.

What is measured: the wall time of ``files.upload`` (multipart, ``SIZE_MB`` of
random bytes) and of ``files.download`` read to its end, through HTTP on
loopback to ``stead serve`` with its default local blob directory. The baseline
writes and reads the same bytes with stead's own ``BlobStore`` on a directory
of the same file system, in this process: the store's cost without HTTP,
multipart parsing, the file's row or the checks on the way. Each figure is a
median over ``ROUNDS`` alternating rounds after a warm-up, printed as MB/s and
as the ratio of stead's time to the baseline's.
"""

from __future__ import annotations

import io
import os
import tempfile
import time
from collections.abc import AsyncIterator
from pathlib import Path

import anthropic
import anyio

from stead.blobs import BlobConfig, open_blob_store
from stead.testing import ServerProcess

# isort: split
# The shared helpers sit next to this script (sys.path[0] when it is run).
from _common import percentile, size

SIZE_MB = size("SIZE_MB", 64, 2)
ROUNDS = size("ROUNDS", 7, 1)
WARMUP = size("WARMUP", 1, 1)
CHUNK = 1024 * 1024


def rate(megabytes: float, seconds: float) -> str:
    return f"{megabytes / seconds:,.0f} MB/s"


async def direct(root: Path, data: bytes, round_: int) -> tuple[float, float]:
    """(write, read) seconds of the bytes through the blob store alone."""
    store = open_blob_store(BlobConfig(url=f"file://{root}"))

    async def chunks() -> AsyncIterator[bytes]:
        for start in range(0, len(data), CHUNK):
            yield data[start : start + CHUNK]

    start = time.perf_counter()
    await store.put_stream(f"bench/{round_}", chunks())
    wrote = time.perf_counter() - start
    start = time.perf_counter()
    read = 0
    async for chunk in await store.get_stream(f"bench/{round_}"):
        read += len(chunk)
    assert read == len(data)
    return wrote, time.perf_counter() - start


def through_stead(client: anthropic.Anthropic, data: bytes, round_: int) -> tuple[float, float]:
    start = time.perf_counter()
    made = client.beta.files.upload(
        file=(f"bench-{round_}.bin", io.BytesIO(data), "application/octet-stream")
    )
    wrote = time.perf_counter() - start
    start = time.perf_counter()
    got = client.beta.files.download(made.id).read()
    assert len(got) == len(data)
    read = time.perf_counter() - start
    client.beta.files.delete(made.id)
    return wrote, read


def run() -> str:
    data = os.urandom(SIZE_MB * 1024 * 1024)
    with tempfile.TemporaryDirectory(prefix="stead-bench-") as tmp:
        server = ServerProcess(
            Path(tmp) / "data",
            env={"STEAD_SANDBOX": "off"},
        ).start()
        try:
            assert server.first_key
            client = anthropic.Anthropic(
                base_url=server.url, api_key=server.first_key, max_retries=0, timeout=120.0
            )
            samples: dict[str, list[float]] = {k: [] for k in ("up", "down", "put", "get")}
            for round_ in range(WARMUP + ROUNDS):
                order = ("stead", "direct") if round_ % 2 == 0 else ("direct", "stead")
                for side in order:
                    if side == "stead":
                        up, down = through_stead(client, data, round_)
                    else:
                        up, down = anyio.run(direct, Path(tmp) / "direct", data, round_)
                    if round_ >= WARMUP:
                        samples["up" if side == "stead" else "put"].append(up)
                        samples["down" if side == "stead" else "get"].append(down)
        finally:
            server.stop()
    up, down = percentile(samples["up"], 50), percentile(samples["down"], 50)
    put, get = percentile(samples["put"], 50), percentile(samples["get"], 50)
    return (
        f"file_transfer: {SIZE_MB} MB upload {rate(SIZE_MB, up)} vs blob store {rate(SIZE_MB, put)}"
        f" = {up / put:.2f}x the time | download {rate(SIZE_MB, down)} vs blob store"
        f" {rate(SIZE_MB, get)} = {down / get:.2f}x the time | n={ROUNDS}"
    )


def main() -> None:
    print(run(), flush=True)


if __name__ == "__main__":
    main()
