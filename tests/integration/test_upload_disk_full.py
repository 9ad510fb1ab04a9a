"""An upload to a server whose temporary directory is full (where it spools
an upload's body past its first MiB) is a 503 that says so, logged in one line:
nothing is stored, and the server goes on."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import anthropic
import pytest

from stead.testing import ServerProcess
from tests.conftest import make_client
from tests.integration.skill_files import skill_files

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="mounting a small tmpfs needs root")


@pytest.fixture
def small_tmp(tmp_path: Path) -> Iterator[Path]:
    """A 2 MiB file system, for the server's TMPDIR."""
    mounted = tmp_path / "small"
    mounted.mkdir()
    command = ["mount", "-t", "tmpfs", "-o", "size=2m,mode=0700", "tmpfs", str(mounted)]
    subprocess.run(command, check=True, timeout=30)
    try:
        yield mounted
    finally:
        subprocess.run(["umount", str(mounted)], check=True, timeout=30)


def test_an_upload_past_the_servers_temporary_space_is_a_503(
    tmp_path: Path, small_tmp: Path
) -> None:
    # A fresh interpreter: one forked from a warm one may have read TMPDIR already.
    env = {"STEAD_SANDBOX": "unsafe_local", "TMPDIR": str(small_tmp)}
    server = ServerProcess(tmp_path / "data", env=env).start()
    try:
        assert server.first_key
        with make_client(server.url, server.first_key) as client:
            with pytest.raises(anthropic.InternalServerError, match="no room") as refused:
                client.beta.files.upload(file=("big.bin", os.urandom(4 * 1024 * 1024)))
            assert refused.value.status_code == 503
            with pytest.raises(anthropic.InternalServerError, match="no room"):
                client.beta.skills.create(
                    files=skill_files("roomy", script=os.urandom(4 * 1024 * 1024))
                )
            assert list(client.beta.files.list()) == []
            assert list(client.beta.skills.list()) == []
            small = client.beta.files.upload(file=("small.txt", b"fits"))
            assert client.beta.files.download(small.id).read() == b"fits"
        assert list(small_tmp.iterdir()) == []
        assert "Traceback" not in server.log_text()
    finally:
        server.stop()
