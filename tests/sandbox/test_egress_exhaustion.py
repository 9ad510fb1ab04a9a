"""One sandbox cannot spend the sandbox host's open files: a real host started
with a low soft limit on open files (as a service manager's default of 1024
is), one sandbox holding as many egress tunnels as its proxy allows, and
another sandbox that must still start and reach the network."""

from __future__ import annotations

import json
import resource
import socket
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest

from stead.sandbox import HostAddress, HostClient, HostSandbox
from stead.testing import HostProcess
from tests.sandbox.conftest import WAIT, config, new_id, requires_isolation

pytestmark = [pytest.mark.anyio, requires_isolation]

OPEN_FILES = 512
"""The host's soft limit at start: fewer than one sandbox's tunnels take."""
TUNNELS = 240

HOG = f"""
import socket, sys, time
held, port = [], int(sys.argv[1])
for _ in range({TUNNELS}):
    s = socket.create_connection(("127.0.0.1", 3128))
    s.sendall(b"CONNECT hold.test:%d HTTP/1.1\\r\\nHost: hold.test\\r\\n\\r\\n" % port)
    held.append(s)
opened = sum(s.recv(64).startswith(b"HTTP/1.1 200") for s in held)
print("tunnels", opened, flush=True)
time.sleep(600)
"""

PROBE = (
    'import socket, sys; s = socket.create_connection(("127.0.0.1", 3128)); '
    's.sendall(b"CONNECT hold.test:%s HTTP/1.1\\r\\nHost: hold.test\\r\\n\\r\\n" '
    "% sys.argv[1].encode()); print(s.recv(64).decode().splitlines()[0])"
)


@pytest.fixture
def holder() -> Iterator[int]:
    """A port on loopback that takes connections (in its backlog) and never answers."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(TUNNELS + 16)
        yield listener.getsockname()[1]


@pytest.fixture
def host(tmp_path: Path) -> Iterator[HostProcess]:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < 8 * OPEN_FILES:
        pytest.skip(f"the hard limit on open files ({hard}) is too low to raise")
    env = {"STEAD_EGRESS_HOSTS": json.dumps({"hold.test": "127.0.0.1"})}
    # Started in a fresh interpreter (no forker), which inherits this limit.
    resource.setrlimit(resource.RLIMIT_NOFILE, (OPEN_FILES, hard))
    try:
        started = HostProcess(tmp_path / "state", env=env).start()
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    yield started
    started.stop()


async def _tunnels(sandbox: HostSandbox, process_id: str) -> int:
    with anyio.fail_after(WAIT):
        while True:
            output, _ = await sandbox.read_process(process_id)
            if b"tunnels" in output or b"Error" in output:
                return int(output.split()[-1]) if b"tunnels" in output else -1
            await anyio.sleep(0.1)


async def test_a_sandbox_holding_every_tunnel_it_may_leaves_others_working(
    host: HostProcess, holder: int
) -> None:
    networking = {
        "type": "limited",
        "allowed_hosts": ["hold.test"],
        "allow_mcp_servers": False,
        "allow_package_managers": False,
    }
    client = HostClient(HostAddress(unix_path=host.socket_path))
    hog = HostSandbox(client, new_id(), config(pids=1024, networking=networking))
    other = HostSandbox(client, new_id(), config(networking=networking))
    try:
        # The sandbox's processes keep the limit the host was started with.
        limit = await hog.exec("ulimit -Sn", op_key=new_id(), timeout=WAIT)
        assert limit.output.strip() == str(OPEN_FILES)
        await hog.write_file("hog.py", HOG.encode())
        started = await hog.start_process(f"python3 hog.py {holder}")
        assert await _tunnels(hog, started["id"]) == TUNNELS

        result = await other.exec(
            f"echo alive; python3 -c '{PROBE}' {holder}", op_key=new_id(), timeout=WAIT
        )
        assert result.output.splitlines() == ["alive", "HTTP/1.1 200 Connection Established"]
    finally:
        for sandbox in (hog, other):
            await client.destroy(sandbox.sandbox_id)
        await client.aclose()
