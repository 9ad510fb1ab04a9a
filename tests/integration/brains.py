"""Several ``stead serve`` processes on one PostgreSQL schema, for the tests
that run a client against one process and read its streams from another."""

from __future__ import annotations

import base64
import secrets
from pathlib import Path

from stead.testing import FakeModel, ServeForker, ServerProcess
from tests.conftest import loop_env
from tests.databases import PostgresRun


class Brains:
    """Processes on one schema; ``key`` works on each of them."""

    def __init__(self, run: PostgresRun, root: Path, fake: FakeModel, forker: ServeForker) -> None:
        self.schema = run.new_schema()
        self.url = run.url(self.schema)
        self._run = run
        self._root = root
        self._fake = fake
        self._forker = forker
        # One sealing key for vault secrets: every process must open every credential.
        self.secret = base64.b64encode(secrets.token_bytes(32)).decode()
        self.servers: list[ServerProcess] = []

    def start(self, **extra: str) -> ServerProcess:
        """A new process (a data directory of its own) with ``extra`` settings."""
        env = loop_env(
            self._fake,
            STEAD_DATABASE_URL=self.url,
            STEAD_SECRET_KEY=self.secret,
            STEAD_REAPER_INTERVAL_SECONDS="0.2",
            STEAD_BRAIN_HEARTBEAT_SECONDS="0.5",
            # Readers learn of other processes' events by notice alone, so a
            # notice that goes missing fails the test instead of being polled for.
            STEAD_BUS_POLL_SECONDS="600",
            **extra,
        )
        data = self._root / f"brain-{len(self.servers)}"
        server = ServerProcess(data, env=env, forker=self._forker).start()
        self.servers.append(server)
        return server

    @property
    def key(self) -> str:
        found = next((s.first_key for s in self.servers if s.first_key), None)
        assert found, self.servers[0].log_text()
        return found

    def close(self) -> None:
        """Kills every process started and drops the schema."""
        for server in self.servers:
            server.kill()
        self._run.drop_schema(self.schema)
