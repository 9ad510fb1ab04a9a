"""Shared set-up of the sandbox benchmarks: a real sandbox host in a temporary
directory, its client, and the sandbox config they use.

Not a benchmark itself. The benchmarks run as root, as the sandbox host must.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from stead.sandbox import HostAddress, HostClient, SandboxConfig
from stead.testing import HostProcess


def require_root() -> None:
    if os.geteuid() != 0 or shutil.which("bwrap") is None:
        raise SystemExit("the sandbox benchmarks need root and bubblewrap (./scripts/setup)")


@contextmanager
def sandbox_host() -> Iterator[HostProcess]:
    require_root()
    root = Path(tempfile.mkdtemp(prefix="stead-bench-"))
    process = HostProcess(root / "state").start()
    try:
        yield process
    finally:
        process.stop()
        shutil.rmtree(root, ignore_errors=True)


def client_of(process: HostProcess) -> HostClient:
    return HostClient(HostAddress(unix_path=process.socket_path))


def bench_config() -> SandboxConfig:
    return SandboxConfig.from_json({"memory_bytes": 256 * 1024**2, "pids": 128})
