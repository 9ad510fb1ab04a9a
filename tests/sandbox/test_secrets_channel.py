"""The secrets channel (rule 8): credentials reach a sandbox's egress proxy,
which adds them to the sandbox's requests, and nowhere else: not the sandbox,
not the host's state directory, catalogue, snapshots or log. A host that
restarts holds none, and the brain sends them again on its next call."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from stead.sandbox import EgressCredential, HostAddress, HostSandbox
from stead.sandbox.providers.host import HostProvider
from stead.testing import HostProcess, ServeForker
from tests.sandbox.conftest import config, files_holding, held_in, new_id, requires_isolation

pytestmark = [pytest.mark.anyio, requires_isolation]

FETCH = (
    '/usr/bin/python3 -I -c "import urllib.request as u, sys; '
    "r = u.Request(sys.argv[1], headers={'Authorization': 'Bearer placeholder'}); "
    'print(u.urlopen(r, timeout=10).read().decode())"'
)


@pytest.fixture(scope="module")
def echo() -> Iterator[tuple[int, list[str]]]:
    """A loopback HTTP server that records the Authorization header it got (and
    never echoes it: a reply would carry the secret into the sandbox)."""
    seen: list[str] = []

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            header = self.headers.get("Authorization") or "none"
            seen.append(header)
            body = b"answered"
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server.server_address[1], seen
    server.shutdown()
    server.server_close()


def _allowing_loopback() -> dict[str, object]:
    return {
        "type": "limited",
        "allowed_hosts": ["127.0.0.1"],
        "allow_mcp_servers": False,
        "allow_package_managers": False,
    }


def _files_holding(root: Path, secret: bytes) -> list[Path]:
    return [
        path
        for path in root.rglob("*")
        if path.is_file() and not path.is_socket() and secret in path.read_bytes()
    ]


async def test_a_credential_is_injected_by_the_proxy_and_written_nowhere(
    tmp_path: Path, echo: tuple[int, list[str]], forker: ServeForker
) -> None:
    port, seen = echo
    made = time.time()
    secret = f"dummy-secret-{uuid.uuid4().hex}"
    process = HostProcess(
        tmp_path / "state", env={"STEAD_LOG_LEVEL": "debug"}, forker=forker
    ).start()
    provider = HostProvider(HostAddress(unix_path=process.socket_path))
    sandbox_id = new_id()
    wanted = config(networking=_allowing_loopback())
    try:
        sandbox = await provider.acquire(sandbox_id, wanted)
        assert isinstance(sandbox, HostSandbox)
        credential = EgressCredential("127.0.0.1", "Authorization", f"Bearer {secret}")
        await provider.set_secrets(sandbox_id, wanted, [credential])

        # The sandbox's own placeholder header is replaced, never passed on.
        fetched = await sandbox.exec(
            f"{FETCH} http://127.0.0.1:{port}/", op_key=new_id(), timeout=30
        )
        assert (fetched.exit_code, fetched.output.strip()) == (0, "answered")
        assert seen[-1] == f"Bearer {secret}"

        # Inside, nothing holds it: not the environment, not any file. The
        # command names it in two halves, so that its own record cannot hold it.
        half = len(secret) // 2
        search = await sandbox.exec(
            f"a={secret[:half]}; b={secret[half:]}; env; "
            + files_holding('-e "$a$b"', since=made)
            + "; echo searched",
            op_key=new_id(),
            timeout=120,
        )
        assert search.output.count(secret) == 0
        assert held_in(search.output) == []
        assert search.output.endswith("searched\n")

        await sandbox.snapshot()
        assert not _files_holding(process.work_dir, secret.encode())
        process.kill()
        assert not _files_holding(process.state_dir, secret.encode())
        assert not _files_holding(tmp_path / "blobs", secret.encode())
        assert secret not in process.log_text()

        # A restarted host holds no credentials; the next call sends them again.
        process = HostProcess(tmp_path / "state", work_dir=process.work_dir, forker=forker).start()
        again = await sandbox.exec(f"{FETCH} http://127.0.0.1:{port}/", op_key=new_id(), timeout=30)
        assert again.output.strip() == "answered"
        assert seen[-1] == f"Bearer {secret}"
        assert await provider.release(sandbox_id) is not None
    finally:
        await provider.aclose()
        process.stop()
    assert secret not in process.log_text()


async def test_without_credentials_the_sandboxs_request_goes_out_unchanged(
    tmp_path: Path, echo: tuple[int, list[str]], forker: ServeForker
) -> None:
    port, seen = echo
    process = HostProcess(tmp_path / "state", forker=forker).start()
    provider = HostProvider(HostAddress(unix_path=process.socket_path))
    sandbox_id = new_id()
    try:
        sandbox = await provider.acquire(sandbox_id, config(networking=_allowing_loopback()))
        fetched = await sandbox.exec(
            f"{FETCH} http://127.0.0.1:{port}/", op_key=new_id(), timeout=30
        )
        assert fetched.output.strip() == "answered"
        assert seen[-1] == "Bearer placeholder"
    finally:
        await provider.release(sandbox_id)
        await provider.aclose()
        process.stop()
