"""A PostgreSQL server of a test's own, to stop and start under load.

Never the shared server on 5432: a cluster made with ``initdb`` in a fresh
directory, listening on a free loopback port, run as the ``postgres`` user when
the tests run as root (``initdb`` refuses root). Every command has a timeout.
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from stead.testing import free_port
from tests.databases import postgres_required

COMMAND_TIMEOUT = 60.0


def _bin_dir() -> Path | None:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"))
    return Path(found[-1]).parent if found else None


class ThrowawayPostgres:
    """One cluster: ``start``, ``stop`` (a crash by default), ``url``."""

    def __init__(self, bin_dir: Path) -> None:
        self._bin = bin_dir
        self.root = Path(tempfile.mkdtemp(prefix="stead-pg-"))
        self._data = self.root / "data"
        self.port = free_port()
        self._as_postgres = os.geteuid() == 0
        if self._as_postgres:
            user = pwd.getpwnam("postgres")
            os.chown(self.root, user.pw_uid, user.pw_gid)
        self._run("initdb", "-D", str(self._data), "-A", "trust", "-U", "postgres", "--no-sync")

    def url(self, database: str = "postgres") -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/{database}"

    def start(self) -> None:
        options = (
            f"-p {self.port} -c listen_addresses=127.0.0.1 -k {self.root} "
            "-c fsync=off -c max_connections=100"
        )
        log = str(self.root / "server.log")
        self._run("pg_ctl", "-D", str(self._data), "-o", options, "-l", log, "-w", "start")

    def stop(self, mode: str = "immediate") -> None:
        """``immediate`` is a crash: connections are cut, the next start recovers."""
        self._run("pg_ctl", "-D", str(self._data), "-m", mode, "-w", "stop")

    def create_database(self, name: str) -> None:
        self._run("createdb", "-h", "127.0.0.1", "-p", str(self.port), "-U", "postgres", name)

    def remove(self) -> None:
        subprocess.run(
            self._command("pg_ctl", "-D", str(self._data), "-m", "immediate", "stop"),
            capture_output=True,
            timeout=COMMAND_TIMEOUT,
            check=False,
        )
        shutil.rmtree(self.root, ignore_errors=True)

    def _command(self, program: str, *args: str) -> list[str]:
        command = [str(self._bin / program), *args]
        return ["runuser", "-u", "postgres", "--", *command] if self._as_postgres else command

    def _run(self, program: str, *args: str) -> None:
        done = subprocess.run(
            self._command(program, *args),
            capture_output=True,
            text=True,
            timeout=COMMAND_TIMEOUT,
            check=False,
            cwd=self.root,
        )
        assert done.returncode == 0, f"{program}: {done.stdout}{done.stderr}"


@pytest.fixture
def throwaway_postgres() -> Iterator[ThrowawayPostgres]:
    """A started cluster of the test's own, removed after it."""
    bin_dir = _bin_dir()
    if bin_dir is None:
        reason = "no PostgreSQL server binaries under /usr/lib/postgresql"
        if postgres_required():
            pytest.fail(reason)
        pytest.skip(reason)
    cluster = ThrowawayPostgres(bin_dir)
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.remove()
