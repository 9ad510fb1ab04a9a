"""The escape suite (rule 7): each attempt fails inside a real bwrap sandbox
with real cgroups, and the host stays healthy afterwards."""

from __future__ import annotations

import os
import socket
from collections.abc import AsyncIterator

import pytest

from stead.sandbox import HostClient, HostSandbox
from stead.testing import HostProcess
from tests.sandbox.conftest import config, new_id, requires_isolation, workspace_on_host

pytestmark = [pytest.mark.anyio, requires_isolation]

PROBE = "/usr/bin/python3 -I -c"


async def run(sandbox: HostSandbox, command: str, limit: float = 30) -> tuple[int | None, str]:
    result = await sandbox.exec(command, op_key=new_id(), timeout=limit)
    return result.exit_code, result.output


async def assert_healthy(client: HostClient, sandbox: HostSandbox) -> None:
    assert (await client.ping())["isolation_problem"] is None
    assert (await run(sandbox, "echo alive")) == (0, "alive\n")


@pytest.fixture
async def limited(client: HostClient) -> AsyncIterator[HostSandbox]:
    """A sandbox with small limits and an allowlist of one loopback address."""
    opened = HostSandbox(
        client,
        new_id(),
        config(
            memory_bytes=96 * 1024**2,
            pids=64,
            networking={
                "type": "limited",
                "allowed_hosts": ["127.0.0.1"],
                "allow_mcp_servers": False,
                "allow_package_managers": False,
            },
        ),
    )
    yield opened
    await client.destroy(opened.sandbox_id)


async def test_host_secrets_are_unreadable(sandbox: HostSandbox, client: HostClient) -> None:
    code, output = await run(sandbox, "cat /etc/shadow")
    assert code != 0 and "Permission denied" in output
    code, _ = await run(sandbox, "ls /root")
    assert code != 0
    await assert_healthy(client, sandbox)


async def test_another_sandboxs_workspace_is_out_of_reach(
    sandbox: HostSandbox, client: HostClient, host: HostProcess
) -> None:
    other = HostSandbox(client, new_id(), config())
    # A name found nowhere else: searching every directory for it by name covers
    # the whole tree, where reading every file (grep -r /) takes minutes on a
    # cold cache.
    name = f"secret-{new_id()}.txt"
    try:
        await other.write_file(name, b"other's secret")
        path = workspace_on_host(host, other.sandbox_id)
        _, output = await run(
            sandbox,
            f"cat {path}/{name}; ls {host.state_dir}; "
            f"find / -path /proc -prune -o -path /sys -prune -o -name {name} -print 2>/dev/null;"
            " echo done",
            limit=120,
        )
        assert "other's secret" not in output
        assert name not in output.replace(f"{path}/{name}", "")
        assert output.endswith("done\n")
    finally:
        await client.destroy(other.sandbox_id)
    await assert_healthy(client, sandbox)


async def test_host_processes_are_invisible_and_unsignalable(
    sandbox: HostSandbox, client: HostClient, host: HostProcess
) -> None:
    _, output = await run(sandbox, "ls /proc | grep -E '^[0-9]+$' | wc -l")
    assert int(output) < 10  # the supervisor, the shell and this pipeline
    for pid in (host.pid, os.getpid()):
        code, _ = await run(sandbox, f"kill -9 {pid}")
        assert code != 0
    assert (await client.ping())["pid"] == host.pid
    await assert_healthy(client, sandbox)


async def test_host_loopback_ports_cannot_be_reached_directly(
    sandbox: HostSandbox, client: HostClient, web: int
) -> None:
    probe = (
        "import socket; s = socket.socket(); s.settimeout(5); "
        f"s.connect(('127.0.0.1', {web})); print('connected')"
    )
    code, output = await run(sandbox, f'{PROBE} "{probe}"')
    assert code != 0 and "connected" not in output
    await assert_healthy(client, sandbox)


async def test_names_do_not_resolve_inside(sandbox: HostSandbox, client: HostClient) -> None:
    probe = "import socket; print(socket.getaddrinfo('example.com', 443))"
    code, output = await run(sandbox, f'{PROBE} "{probe}"')
    assert code != 0 and "gaierror" in output


async def test_the_proxy_passes_only_allowed_hosts(
    limited: HostSandbox, client: HostClient, web: int
) -> None:
    fetch = (
        "import urllib.request, sys; "
        "print(urllib.request.urlopen(sys.argv[1], timeout=10).read().decode())"
    )
    code, output = await run(limited, f'{PROBE} "{fetch}" http://127.0.0.1:{web}/')
    assert (code, output.strip()) == (0, "reached")
    code, output = await run(limited, f'{PROBE} "{fetch}" http://localhost:{web}/')
    assert code != 0 and "403" in output
    code, output = await run(limited, f'{PROBE} "{fetch}" http://example.com/')
    assert code != 0 and "403" in output
    await assert_healthy(client, limited)


async def test_the_proxy_refuses_the_hosts_loopback_when_unrestricted(
    sandbox: HostSandbox, client: HostClient, web: int
) -> None:
    fetch = "import urllib.request; urllib.request.urlopen('http://127.0.0.1:%d/', timeout=10)"
    code, output = await run(sandbox, f'{PROBE} "{fetch % web}"')
    assert code != 0 and "403" in output


async def test_a_fork_bomb_hits_the_pids_limit(
    limited: HostSandbox, sandbox: HostSandbox, client: HostClient
) -> None:
    result = await limited.exec(
        "bomb() { bomb | bomb & }; bomb; sleep 3", op_key=new_id(), timeout=5
    )
    assert result.timed_out or result.exit_code is not None
    await assert_healthy(client, sandbox)  # the neighbour never noticed
    # The bomb may outlive its command as the shell's background jobs, as any
    # job would; restarting the shell (the bash tool's restart) ends them.
    await limited.restart_shell()
    await assert_healthy(client, limited)


async def test_a_memory_hog_is_oom_killed_and_reported(
    limited: HostSandbox, client: HostClient
) -> None:
    result = await limited.exec(
        f"{PROBE} 'x = bytearray(1024 ** 3); print(len(x))'", op_key=new_id(), timeout=60
    )
    assert result.exit_code != 0
    assert "ran out of memory" in result.output
    await assert_healthy(client, limited)


async def test_writes_outside_workspace_and_tmp_fail(
    sandbox: HostSandbox, client: HostClient
) -> None:
    for path in ("/usr/x", "/etc/x", "/x", "/opt/x", "/home/x", "/var/x", "/run/x", "/proc/x"):
        code, output = await run(sandbox, f"touch {path}")
        assert code != 0, f"{path} was writable: {output}"
    assert (await run(sandbox, "touch /workspace/x /tmp/x && echo ok")) == (0, "ok\n")
    await assert_healthy(client, sandbox)


async def test_root_is_out_of_reach(sandbox: HostSandbox, client: HostClient) -> None:
    code, _ = await run(sandbox, "unshare --user --map-root-user id")
    assert code != 0
    code, _ = await run(sandbox, f"{PROBE} 'import os; os.setuid(0)'")
    assert code != 0
    _, output = await run(sandbox, "grep NoNewPrivs /proc/self/status")
    assert output.split() == ["NoNewPrivs:", "1"]
    _, output = await run(sandbox, "grep CapEff /proc/self/status")
    assert output.split() == ["CapEff:", "0000000000000000"]
    await assert_healthy(client, sandbox)


def test_the_host_socket_is_for_root_only(host: HostProcess) -> None:
    mode = host.socket_path.stat().st_mode & 0o777
    assert mode == 0o600
    assert host.state_dir.stat().st_mode & 0o777 == 0o700
    with socket.socket(socket.AF_UNIX) as sock:
        sock.connect(str(host.socket_path))  # root may


async def test_sandboxes_get_distinct_uids(client: HostClient) -> None:
    first, second = (HostSandbox(client, new_id(), config()) for _ in range(2))
    try:
        uids = {(await first.acquire())["uid"], (await second.acquire())["uid"]}
        assert len(uids) == 2
    finally:
        for each in (first, second):
            await client.destroy(each.sandbox_id)
