"""Workspace snapshot and restore of a 200 MB workspace, against tar and zstd.

What is measured: the wall time of ``take_snapshot`` (walk, tar, zstd level 1,
upload to a ``file://`` blob store, then the read-back that verifies size and
sha256) and of ``restore_snapshot`` (download, hash as it streams, extract into
a staging directory with ownership applied, rename into place) for a generated
workspace: many small source-like files, some large compressible log-like
files and some incompressible ones. Throughput is the workspace's bytes over
the time; the restore time is the wake time of DESIGN rule 6, whose budget is
1.5 s. The baseline, same tree, same run: ``tar -cf - . | zstd -1`` into a file
and ``zstd -dc | tar -xf -`` back (``cp -a`` both ways if there is no zstd
CLI). It hashes, verifies and checks nothing, so the ratio is what stead's
verification and safe extraction cost. Runs alternate which side goes first;
the median of ``BENCH_SNAPSHOT_RUNS`` runs (default 3) is reported.
"""

from __future__ import annotations

import os
import random
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import anyio

from stead.blobs import BlobConfig, BlobStore, open_blob_store
from stead.sandbox_host.snapshots import restore_snapshot, take_snapshot

# isort: split
from _common import median, size, verdict

RUNS = size("SNAPSHOT_RUNS", 3, 1)
WORKSPACE_MB = size("SNAPSHOT_MB", 200, 4)
WORK_DIR = os.environ.get("BENCH_SNAPSHOT_DIR") or None
"""Where the trees and blobs go (default: the system's temporary directory).
A tmpfs such as /dev/shm takes the disk out of the comparison."""
WAKE_BUDGET_S = 1.5
OWNER = (2_000_123, 2_000_123)
MB = 1024 * 1024


def make_workspace(root: Path, total_mb: int) -> int:
    """A quarter small source files, the rest large compressible and random
    files in equal parts. Returns the bytes written."""
    rng = random.Random(7)
    words = [
        "def", "return", "self", "import", "class", "value", "result", "for", "in", "if",
        "else", "None", "True", "config", "request", "response", "items", "index", "=",
        "(", ")", ":", "\n    ", "\n        ", "\n", "#", "error", "count", "name", "path",
    ]  # fmt: skip
    corpus = " ".join(rng.choices(words, k=1_500_000)).encode()
    written = 0
    small_budget = total_mb * MB // 4
    index = 0
    while written < small_budget:
        folder = root / "src" / f"pkg{index % 40}" / f"mod{index % 7}"
        folder.mkdir(parents=True, exist_ok=True)
        size = int(rng.lognormvariate(8.2, 1.0)) + 64
        start = rng.randrange(len(corpus) - size)
        data = f"# file {index}\n".encode() + corpus[start : start + size]
        (folder / f"file{index}.py").write_bytes(data)
        written += len(data)
        index += 1
    large = (total_mb * MB - written) // 2
    for n in range(5):
        logs = root / "logs" / f"run{n}.log"
        logs.parent.mkdir(exist_ok=True)
        lines = (f"{n:03d}-{i:09d} level=info step={i % 97}" for i in range(large // 5 // 30))
        data = "\n".join(lines).encode()[: large // 5]
        logs.write_bytes(data)
        written += len(data)
    for n in range(5):
        blob = root / "data" / f"weights{n}.bin"
        blob.parent.mkdir(exist_ok=True)
        blob.write_bytes(rng.randbytes(large // 5))
        written += large // 5
    return written


def tree_bytes(root: Path) -> int:
    return sum((Path(d) / f).lstat().st_size for d, _, files in os.walk(root) for f in files)


async def stead_round(
    blobs: BlobStore, workspace: Path, target: Path, run: int
) -> tuple[float, float, int]:
    start = time.perf_counter()
    info = await take_snapshot(workspace, blobs, f"bench/snap{run}.tar.zst")
    took = time.perf_counter() - start
    start = time.perf_counter()
    await restore_snapshot(blobs, info, target, owner=OWNER)
    restored = time.perf_counter() - start
    return took, restored, info.size


def baseline_round(workspace: Path, archive: Path, target: Path) -> tuple[float, float]:
    zstd = shutil.which("zstd")
    start = time.perf_counter()
    if zstd:
        subprocess.run(
            f"tar -cf - -C {workspace} . | {zstd} -1 -q -f -o {archive}", shell=True, check=True
        )
    else:
        subprocess.run(["cp", "-a", str(workspace), str(archive)], check=True)
    took = time.perf_counter() - start
    target.mkdir()
    start = time.perf_counter()
    if zstd:
        subprocess.run(f"{zstd} -dc -q {archive} | tar -xf - -C {target}", shell=True, check=True)
    else:
        subprocess.run(["cp", "-a", f"{archive}/.", str(target)], check=True)
    restored = time.perf_counter() - start
    return took, restored


def clear(*paths: Path) -> None:
    for path in paths:
        if path.is_dir():
            shutil.rmtree(path)
        elif path.exists():
            path.unlink()


async def measure(tmp: Path) -> str:
    workspace = tmp / "ws"
    workspace.mkdir()
    size = make_workspace(workspace, WORKSPACE_MB)
    if tree_bytes(workspace) != size:
        raise RuntimeError("workspace size does not add up")
    blobs = open_blob_store(BlobConfig(url=f"file://{tmp / 'blobs'}"))
    target, archive, bare_target = tmp / "restored", tmp / "bare.tar.zst", tmp / "bare"
    stead_take: list[float] = []
    stead_restore: list[float] = []
    bare_take: list[float] = []
    bare_restore: list[float] = []
    compressed = 0
    for run in range(RUNS):
        clear(target, archive, bare_target)
        if run % 2:
            took, restored = baseline_round(workspace, archive, bare_target)
        took_s, restored_s, compressed = await stead_round(blobs, workspace, target, run)
        if not run % 2:
            took, restored = baseline_round(workspace, archive, bare_target)
        if tree_bytes(target) != size:
            raise RuntimeError("the restored workspace differs in size")
        stead_take.append(took_s)
        stead_restore.append(restored_s)
        bare_take.append(took)
        bare_restore.append(restored)
        await blobs.delete(f"bench/snap{run}.tar.zst")
    mb = size / MB
    wake = median(stead_restore)
    tool = "tar|zstd -1" if shutil.which("zstd") else "cp -a"
    return (
        f"snapshot: stead snapshot {mb / median(stead_take):.0f} MB/s,"
        f" restore {mb / wake:.0f} MB/s"
        f" | {tool} {mb / median(bare_take):.0f} MB/s, restore {mb / median(bare_restore):.0f} MB/s"
        f" | ratio snapshot {median(stead_take) / median(bare_take):.2f}x,"
        f" restore {wake / median(bare_restore):.2f}x"
        f" | wake {wake:.2f}s (budget <= {WAKE_BUDGET_S}s, {verdict(wake <= WAKE_BUDGET_S)})"
        f" | {mb:.0f} MB -> {compressed / MB:.0f} MB stored, n={RUNS}"
    )


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="stead-bench-", dir=WORK_DIR) as tmp:
        print(anyio.run(measure, Path(tmp)), flush=True)


if __name__ == "__main__":
    main()
