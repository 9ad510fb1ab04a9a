"""Shared helpers for the benchmarks: percentiles, formatting, the bare baseline server.

Not a benchmark itself; ``run.py`` does not run it. The benchmark scripts import it
as ``_common`` (their own directory is first on ``sys.path`` when run as scripts).
"""

from __future__ import annotations

import math
import os
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType

import httpx2

from stead.testing import ServerProcess, client_tls

BENCH_DIR = Path(__file__).resolve().parent
START_TIMEOUT_S = 30.0


def size(name: str, default: int, smoke: int) -> int:
    """A benchmark's size: ``BENCH_<NAME>`` when set; else ``smoke`` under
    ``BENCH_SMOKE=1`` (the test suite runs every benchmark that small, only to
    prove it still works); else ``default``."""
    given = os.environ.get(f"BENCH_{name}")
    if given is not None:
        return int(given)
    return smoke if os.environ.get("BENCH_SMOKE") == "1" else default


def percentile(samples: Sequence[float], pct: float) -> float:
    """Nearest-rank percentile (``pct`` in 0..100) of a non-empty sample."""
    if not samples:
        raise ValueError("no samples")
    ordered = sorted(samples)
    rank = max(1, math.ceil(pct / 100 * len(ordered)))
    return ordered[rank - 1]


def median(samples: Sequence[float]) -> float:
    return percentile(samples, 50)


def us(seconds: float) -> str:
    """Seconds as whole microseconds, e.g. ``183us``."""
    return f"{seconds * 1e6:.0f}us"


def ms(seconds: float, digits: int = 2) -> str:
    return f"{seconds * 1e3:.{digits}f}ms"


def cpu_seconds(pid: int) -> float:
    """The process's CPU time so far (user and system, all threads), from /proc:
    a machine busy with other work stretches wall time far more than this."""
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def rss_mb(pid: int) -> float:
    """The process's resident memory now, in MiB."""
    status = Path(f"/proc/{pid}/status").read_text()
    return int(status.split("VmRSS:")[1].split()[0]) / 1024


def verdict(met: bool) -> str:
    return "met" if met else "MISSED"


def stead_session(server: ServerProcess) -> tuple[str, str]:
    """(API key, session id): an agent, an environment and a session made over HTTP.

    Plain httpx2 rather than the anthropic SDK: importing the SDK takes seconds."""
    key = server.first_key
    if key is None:
        raise RuntimeError(f"stead serve printed no first API key:\n{server.log_text()}")
    with httpx2.Client(
        verify=client_tls(), base_url=server.url, headers={"x-api-key": key}, timeout=30
    ) as client:

        def create(path: str, body: dict[str, object]) -> str:
            response = client.post(path, json=body)
            if response.status_code != 200:
                raise RuntimeError(f"POST {path}: {response.status_code} {response.text}")
            return str(response.json()["id"])

        agent_id = create("/v1/agents", {"name": "bench", "model": "claude-sonnet-4-6"})
        env_id = create("/v1/environments", {"name": "bench"})
        session_id = create("/v1/sessions", {"agent": agent_id, "environment_id": env_id})
    return key, session_id


def user_message(text: str) -> dict[str, object]:
    return {"type": "user.message", "content": [{"type": "text", "text": text}]}


class BareServer:
    """``_bare_server.py`` in a subprocess: the same uvicorn + uvloop + httptools stack
    stead serves on, with none of stead behind it. Use as a context manager."""

    def __init__(self, port: int, durable_log: Path | None = None) -> None:
        """``durable_log``: the SQLite file ``POST /durable-events`` commits to."""
        self.port = port
        self.url = f"http://127.0.0.1:{port}"
        self._durable_log = durable_log
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def pid(self) -> int:
        assert self._process is not None
        return self._process.pid

    def __enter__(self) -> BareServer:
        log = [] if self._durable_log is None else [str(self._durable_log)]
        self._process = subprocess.Popen(
            [sys.executable, str(BENCH_DIR / "_bare_server.py"), str(self.port), *log],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                err = self._process.stderr.read().decode() if self._process.stderr else ""
                raise RuntimeError(f"bare server exited early:\n{err}")
            try:
                httpx2.get(f"{self.url}/ping", timeout=1.0, verify=client_tls())
                return self
            except httpx2.TransportError:
                time.sleep(0.05)
        self._stop()
        raise RuntimeError(f"bare server did not answer within {START_TIMEOUT_S}s")

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._stop()

    def _stop(self) -> None:
        process = self._process
        if process is None:
            return
        if process.poll() is None:
            process.terminate()
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=10)
        if process.stderr is not None:
            process.stderr.close()
        self._process = None
