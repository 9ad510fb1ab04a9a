"""``stead sandbox-host status`` and ``stop`` against a real sandbox host, as an
operator runs them: the host that outlives ``stead serve`` can be seen and
stopped, and a host that is not there is said to be not there."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from stead.testing import HostProcess, ServeForker
from tests.sandbox.conftest import requires_isolation

pytestmark = requires_isolation
COMMAND_TIMEOUT = 60.0


def _host_command(host: HostProcess, *args: str) -> subprocess.CompletedProcess[str]:
    inherited = {k: v for k, v in os.environ.items() if not k.startswith("STEAD_")}
    return subprocess.run(
        [sys.executable, "-m", "stead", "sandbox-host", *args],
        env={**inherited, **host.settings_env},
        capture_output=True,
        text=True,
        timeout=COMMAND_TIMEOUT,
        check=False,
    )


def test_the_host_is_seen_and_stopped(tmp_path: Path, forker: ServeForker) -> None:
    host = HostProcess(tmp_path / "state", forker=forker).start()
    try:
        status = _host_command(host, "status")
        assert status.returncode == 0, status.stderr
        host_id = (host.state_dir / "host-id").read_text().strip()
        assert status.stdout.splitlines()[:3] == [
            f"sandbox host {host_id} (pid {host.pid}) at {host.socket_path}",
            "other processes reach it at: nowhere (no address)",
            "sandboxes: none",
        ]

        stopped = _host_command(host, "stop")
        assert stopped.returncode == 0, stopped.stderr
        assert stopped.stdout.strip() == (
            f"stopped the sandbox host (pid {host.pid}) at {host.socket_path}"
        )

        gone = _host_command(host, "status")
        assert gone.returncode == 1
        assert gone.stdout.startswith(f"no sandbox host answers at {host.socket_path}")
        again = _host_command(host, "stop")
        assert again.returncode == 0 and "nothing to stop" in again.stdout
    finally:
        host.stop()
