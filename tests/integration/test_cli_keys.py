"""``stead keys`` as an operator uses it beside a running server: create, list
(never a secret), revoke (the server refuses the key), and a wrong data
directory refused instead of quietly made."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import anthropic
import pytest

from stead.testing import FakeModel, ServeForker, ServerProcess
from tests.conftest import loop_env, make_client

COMMAND_TIMEOUT = 60.0


def _keys(forker: ServeForker, data_dir: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "STEAD_DATA_DIR": str(data_dir)}
    return forker.complete(("keys", *args), env, COMMAND_TIMEOUT)


@pytest.fixture(scope="module")
def served(
    tmp_path_factory: pytest.TempPathFactory, fake_model: FakeModel, forker: ServeForker
) -> Iterator[ServerProcess]:
    # Keys are checked on every request, so a revocation shows at once.
    env = loop_env(fake_model, STEAD_AUTH_CACHE_SECONDS="0")
    process = ServerProcess(tmp_path_factory.mktemp("keys"), env=env, forker=forker).start()
    yield process
    process.stop()


def test_a_key_is_made_listed_without_its_secret_and_revoked(
    served: ServerProcess, forker: ServeForker
) -> None:
    made = _keys(forker, served.data_dir, "create", "--name", "ci", "--json")
    assert made.returncode == 0, made.stderr
    key = json.loads(made.stdout)
    with make_client(served.url, key["key"]) as client:
        client.beta.agents.list()
        listed = _keys(forker, served.data_dir, "list", "--json")
        assert listed.returncode == 0 and key["key"] not in listed.stdout
        rows = {row["id"]: row for row in json.loads(listed.stdout)}
        assert rows[key["id"]]["name"] == "ci" and rows[key["id"]]["revoked_at"] is None
        assert rows[key["id"]]["ends_with"] == key["key"][-4:]
        assert len(rows) == 2  # the first key, made at the first start

        revoked = _keys(forker, served.data_dir, "revoke", key["id"])
        assert revoked.returncode == 0 and key["id"] in revoked.stdout
        with pytest.raises(anthropic.AuthenticationError):
            client.beta.agents.list()
    again = json.loads(_keys(forker, served.data_dir, "list", "--json").stdout)
    assert next(r for r in again if r["id"] == key["id"])["revoked_at"] is not None
    assert "sk-stead-" not in _keys(forker, served.data_dir, "list").stdout
    unknown = _keys(forker, served.data_dir, "revoke", "key_nosuchkey")
    assert unknown.returncode == 1
    assert unknown.stderr.strip() == f"stead: no API key key_nosuchkey in {served.data_dir}"


def test_a_data_directory_without_a_database_is_refused(
    tmp_path: Path, forker: ServeForker
) -> None:
    for args in (["create"], ["list"], ["revoke", "key_x"]):
        refused = _keys(forker, tmp_path / "elsewhere", *args)
        assert refused.returncode == 1
        lines = refused.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith(
            f"stead: no stead database in {tmp_path / 'elsewhere'}"
        )
    assert not (tmp_path / "elsewhere" / "stead.db").exists()
