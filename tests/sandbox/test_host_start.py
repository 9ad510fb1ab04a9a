"""A sandbox host that cannot start says why in one line (the setting it
cannot start with), and one the brain starts listens where the brain dials;
a host the brain started and gave up on is not left running."""

from __future__ import annotations

import os
import resource
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from stead.config import Settings
from stead.sandbox import HostAddress, SandboxUnavailable, open_provider
from stead.sandbox.admin import stop_host
from stead.sandbox.providers import host as host_provider
from stead.sandbox.providers.host import HostLauncher, HostProvider
from stead.testing import HostProcess, ServeForker

COMMAND_TIMEOUT = 60.0
STOP_SECONDS = 30.0
SERVICE_OPEN_FILES = 1024
"""The soft limit on open files a service manager (systemd) starts a process with."""


def _host_env(root: Path, **more: str) -> dict[str, str]:
    """A host of the test's own: its data, state and work directories, its uid
    registry. The work directory is left unreachable by sandbox users: these
    hosts refuse sandboxes at once, which spares the self-check."""
    return {
        "PATH": "/usr/bin:/bin",
        "STEAD_DATA_DIR": str(root),
        "STEAD_SANDBOX_HOST_STATE_DIR": str(root / "state"),
        "STEAD_SANDBOX_WORK_DIR": str(root / "work"),
        "STEAD_SANDBOX_UID_REGISTRY": str(root / "uids.json"),
        **more,
    }


def test_a_taken_tcp_port_stops_the_host_with_one_line(tmp_path: Path, forker: ServeForker) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        listen = f"127.0.0.1:{taken.getsockname()[1]}"
        env = _host_env(
            tmp_path, STEAD_SANDBOX_HOST_LISTEN_TCP=listen, STEAD_SANDBOX_HOST_TOKEN="t" * 32
        )
        failed = forker.complete(("sandbox-host",), env, COMMAND_TIMEOUT)
    assert failed.returncode == 2, failed.stderr
    # After the host's own log lines (sandboxes refused, here).
    assert failed.stderr.splitlines()[-1] == (
        f"stead: STEAD_SANDBOX_HOST_LISTEN_TCP: cannot listen on {listen}: Address already in use"
    )
    assert "Traceback" not in failed.stderr


def test_a_host_on_another_hosts_socket_stops_with_one_line(
    tmp_path: Path, forker: ServeForker
) -> None:
    first = HostProcess(tmp_path / "first" / "state", forker=forker).start()
    try:
        # Another state directory, so its lock does not stop it: the socket must.
        env = _host_env(tmp_path / "second", STEAD_SANDBOX_HOST=str(first.socket_path))
        second = forker.complete(("sandbox-host",), env, COMMAND_TIMEOUT)
        assert second.returncode == 1, second.stderr
        assert second.stderr.splitlines() == [
            f"stead: another sandbox host listens at {first.socket_path}"
        ]
        assert "error" not in first.call({"op": "ping"})  # its socket is still there
    finally:
        first.stop()


@pytest.fixture
def host_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """What a host the brain starts inherits from it, besides what it resolved."""
    for name in list(os.environ):
        if name.startswith("STEAD_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("STEAD_SANDBOX_WORK_DIR", str(tmp_path / "work"))
    monkeypatch.setenv("STEAD_SANDBOX_UID_REGISTRY", str(tmp_path / "uids.json"))
    yield


# The brain lets go of the host it started, which outlives it: its Popen says so.
@pytest.mark.filterwarnings("ignore:subprocess .* is still running:ResourceWarning")
@pytest.mark.anyio
@pytest.mark.usefixtures("host_env")
async def test_the_host_the_brain_starts_listens_at_the_socket_it_names(tmp_path: Path) -> None:
    dialled = tmp_path / "run" / "brain.sock"
    settings = Settings(data_dir=tmp_path / "data", sandbox="bwrap", sandbox_host=str(dialled))
    provider = open_provider(settings)
    try:
        reply = await (await provider.client()).ping()
        assert dialled.is_socket()
        assert not (settings.resolved_sandbox_host_state_dir / "host.sock").exists()
        assert isinstance(reply["pid"], int)
    finally:
        await provider.aclose()
        default = settings.resolved_sandbox_host_state_dir / "host.sock"
        for address in (dialled, default):  # the second: where it listened before
            await stop_host(HostAddress(unix_path=address), wait_seconds=STOP_SECONDS)


STARTED: list[subprocess.Popen[bytes]] = []


class _Recording(HostLauncher):
    """Keeps the processes it starts in ``STARTED``."""

    def launch(self) -> subprocess.Popen[bytes]:
        process = super().launch()
        STARTED.append(process)
        return process


@pytest.mark.anyio
@pytest.mark.usefixtures("host_env")
async def test_a_host_the_brain_gave_up_on_is_not_left_running(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(host_provider, "START_SECONDS", 0.5)
    state_dir = tmp_path / "state"
    # The host listens at its state directory's socket; the brain dials elsewhere.
    launcher = _Recording(state_dir, {"STEAD_SANDBOX_HOST_STATE_DIR": str(state_dir)})
    STARTED.clear()
    provider = HostProvider(HostAddress(unix_path=tmp_path / "elsewhere.sock"), launcher)
    try:
        with pytest.raises(SandboxUnavailable, match="the sandbox host did not start"):
            await provider.client()
        [process] = STARTED
        assert process.poll() is not None
    finally:
        await provider.aclose()
        for process in STARTED:
            process.kill()
            process.wait()


@pytest.mark.anyio
@pytest.mark.usefixtures("host_env")
async def test_a_host_that_exits_at_once_is_not_waited_for(tmp_path: Path) -> None:
    state_dir = tmp_path / "state"
    # A TCP listener without its token: the host stops at once, with status 2.
    env = {"STEAD_SANDBOX_HOST_STATE_DIR": str(state_dir)}
    launcher = _Recording(state_dir, {**env, "STEAD_SANDBOX_HOST_LISTEN_TCP": "127.0.0.1:9"})
    STARTED.clear()
    provider = HostProvider(HostAddress(unix_path=state_dir / "host.sock"), launcher)
    try:
        # Before, the brain probed for the whole START_SECONDS (60 s) first.
        with pytest.raises(SandboxUnavailable, match=r"did not start \(it exited with 2\)"):
            await provider.client()
        [process] = STARTED
        assert process.returncode == 2
        assert "STEAD_SANDBOX_HOST_TOKEN" in (state_dir / "host.log").read_text()
    finally:
        await provider.aclose()


def _soft_open_files(pid: int) -> int:
    for line in Path(f"/proc/{pid}/limits").read_text().splitlines():
        if line.startswith("Max open files"):
            return int(line.split()[3])
    raise AssertionError("no open files limit")


def test_the_host_takes_all_the_open_files_it_may(tmp_path: Path) -> None:
    """Every connection through a sandbox's egress proxy holds two of the
    host's descriptors, up to 256 per sandbox: before, a host started with the
    soft limit of a service manager kept it, and two sandboxes' connections
    left every other sandbox's proxy 'Too many open files' (a 502)."""
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    if hard != resource.RLIM_INFINITY and hard <= SERVICE_OPEN_FILES:
        pytest.skip(f"the hard limit on open files is {hard}: nothing to raise")

    def as_a_service() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (SERVICE_OPEN_FILES, hard))

    socket_path = tmp_path / "state" / "host.sock"
    env = _host_env(tmp_path, STEAD_SANDBOX_HOST=str(socket_path))
    # A fresh interpreter, not a fork of the forker: it starts with the limit given.
    host = subprocess.Popen(
        [sys.executable, "-m", "stead", "sandbox-host"],
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        preexec_fn=as_a_service,
    )
    try:
        deadline = time.monotonic() + COMMAND_TIMEOUT
        while not socket_path.is_socket():  # listening: its start is behind it
            assert host.poll() is None and time.monotonic() < deadline
            time.sleep(0.05)
        assert _soft_open_files(host.pid) > SERVICE_OPEN_FILES
    finally:
        host.terminate()
        host.wait(STOP_SECONDS)
