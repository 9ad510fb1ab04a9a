"""Data directories that hold values no read can render, as versions of stead before
the strict body parser could leave them: they heal on upgrade, render safely until
repaired, and ``stead db check`` finds and repairs them."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import anthropic
import pytest

from stead.testing import ServeForker, ServerProcess
from tests.conftest import make_client
from tests.integration.helpers import db_check

SCHEMA = {"type": "object", "properties": {"n": {"type": "integer", "maximum": 7}}}
TOOL = {"type": "custom", "name": "t", "description": "d", "input_schema": SCHEMA}


def poison(database: Path) -> None:
    """What an earlier stead stored for ``maximum: 1e400`` (an agent, its version and
    the session that copied it) and for an escaped unpaired surrogate in metadata."""
    with sqlite3.connect(database) as db:
        infinite = "replace({0}, '\"maximum\": 7', '\"maximum\": Infinity')"
        db.execute(f"UPDATE agent_versions SET definition = {infinite.format('definition')}")
        db.execute(f"UPDATE sessions SET agent = {infinite.format('agent')}")
        db.execute("""UPDATE environments SET metadata = '{"k": "\\udc00"}'""")
    with sqlite3.connect(database) as db:
        (count,) = db.execute(
            "SELECT count(*) FROM agent_versions WHERE definition LIKE '%Infinity%'"
        )
        assert count == (1,)


def reads(client: anthropic.Anthropic, ids: dict[str, str]) -> dict[str, Any]:
    """Every read that includes a poisoned value (each raises if it is not a 200)."""
    agent = client.beta.agents.retrieve(ids["agent"])
    client.beta.agents.list()
    client.beta.agents.versions.list(ids["agent"])
    session = client.beta.sessions.retrieve(ids["session"])
    client.beta.sessions.list()
    environment = client.beta.environments.retrieve(ids["environment"])
    client.beta.environments.list()
    return {
        "maximum": agent.tools[0].input_schema.properties["n"]["maximum"],  # type: ignore[union-attr]
        "session_maximum": session.agent.tools[0].input_schema.properties["n"]["maximum"],  # type: ignore[union-attr]
        "metadata": environment.metadata,
    }


@pytest.fixture
def poisoned(tmp_path: Path, forker: ServeForker) -> tuple[ServerProcess, str, dict[str, str]]:
    """A data directory with an agent, a session and an environment, poisoned."""
    server = ServerProcess(tmp_path / "data", forker=forker).start()
    assert server.first_key
    with make_client(server.url, server.first_key) as client:
        agent = client.beta.agents.create(name="a", model="claude-sonnet-4-6", tools=[TOOL])  # type: ignore[list-item]
        environment = client.beta.environments.create(name="e", metadata={"k": "v"})
        session = client.beta.sessions.create(agent=agent.id, environment_id=environment.id)
    server.stop()
    ids = {"agent": agent.id, "environment": environment.id, "session": session.id}
    poison(tmp_path / "data" / "stead.db")
    return server, server.first_key, ids


def test_a_directory_poisoned_before_the_fix_heals_on_upgrade(
    poisoned: tuple[ServerProcess, str, dict[str, str]], forker: ServeForker
) -> None:
    server, key, ids = poisoned
    database = server.data_dir / "stead.db"
    with sqlite3.connect(database) as db:  # as it was before migration 0004
        db.execute("ALTER TABLE api_keys DROP COLUMN admin")
        for table, column in (  # as it was before migration 0020
            ("sandbox_leases", "host_id"),
            ("sandbox_leases", "host_address"),
            ("sandbox_leases", "placement"),
            ("ops", "placement"),
            ("sessions", "interrupt_tail"),  # as it was before migration 0022
        ):
            db.execute(f"ALTER TABLE {table} DROP COLUMN {column}")
        for later in (
            "console_logouts",
            "usage_months",
            "session_repositories",
            "memory_mounts",
            "session_memory_stores",
            "workspace_limits",
            "session_outputs",
            "skill_versions",
            "skills",
            "webhook_attempts",
            "webhook_deliveries",
            "webhook_endpoints",
            "memory_versions",
            "memories",
            "memory_stores",
            "files",
            "idempotency_keys",
            "brains",
            "usage_ledger",
            "work_items",
            "environment_keys",
            "vault_credentials",
            "vaults",
            "installation_secrets",
        ):
            db.execute(f"DROP TABLE {later}")
        db.execute("UPDATE alembic_version SET version_num = '0003'")
    server.start()
    try:
        with make_client(server.url, key) as client:
            seen = reads(client, ids)
    finally:
        server.stop()
    assert seen == {"maximum": None, "session_maximum": None, "metadata": {"k": "\ufffd"}}
    checked = db_check(forker, server.data_dir)
    assert checked.returncode == 0 and "no problems found" in checked.stdout, checked


def test_stored_values_render_safely_until_stead_db_check_repairs_them(
    poisoned: tuple[ServerProcess, str, dict[str, str]], forker: ServeForker
) -> None:
    server, key, ids = poisoned
    server.start()
    try:
        with make_client(server.url, key) as client:
            assert reads(client, ids)["maximum"] is None
    finally:
        server.stop()

    found = db_check(forker, server.data_dir)
    assert found.returncode == 1, found
    for where in (f"agent_versions {ids['agent']}/1", f"sessions {ids['session']}"):
        assert where in found.stdout and "not finite" in found.stdout, found.stdout
    assert f"environments {ids['environment']}: metadata.k" in found.stdout, found.stdout

    repaired = db_check(forker, server.data_dir, "--repair")
    assert repaired.returncode == 0 and repaired.stdout.count("(repaired)") == 3, repaired
    again = db_check(forker, server.data_dir)
    assert again.returncode == 0 and "no problems found" in again.stdout, again
    with sqlite3.connect(server.data_dir / "stead.db") as db:
        (definition,) = db.execute("SELECT definition FROM agent_versions").fetchone()
    assert '"maximum": null' in definition


def test_an_integer_outside_64_bits_is_found_and_repaired(
    poisoned: tuple[ServerProcess, str, dict[str, str]], forker: ServeForker
) -> None:
    server, _, ids = poisoned
    database = server.data_dir / "stead.db"
    with sqlite3.connect(database) as db:  # what an earlier stead stored for metadata {"k": 2**70}
        db.execute("""UPDATE environments SET metadata = '{"k": 1180591620717411303424}'""")

    found = db_check(forker, server.data_dir)
    assert found.returncode == 1, found
    assert f"environments {ids['environment']}: metadata.k" in found.stdout, found.stdout
    assert "outside the 64-bit range" in found.stdout, found.stdout

    repaired = db_check(forker, server.data_dir, "--repair")
    assert repaired.returncode == 0, repaired
    with sqlite3.connect(database) as db:
        (metadata,) = db.execute("SELECT metadata FROM environments").fetchone()
    assert metadata == '{"k": null}'
