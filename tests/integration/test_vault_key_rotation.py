"""The vault key through the ``stead`` command: rotation re-seals every credential
and the server reads them after; a bad key stops start-up with one line, and so
does a key the database's secrets are not sealed under; a server left on the old
key beside a rotation (PostgreSQL) stores no secret after it."""

from __future__ import annotations

import base64
import os
import secrets
import subprocess
import sys
from pathlib import Path

import anthropic
import pytest
from sqlalchemy import text

from stead.testing import FakeModel, ServeForker, ServerProcess, free_port
from stead.vault.cipher import key_id
from tests.conftest import loop_env, make_client, sdk_of
from tests.databases import PostgresRun, engine

COMMAND_TIMEOUT = 60.0


def _stead(data_dir: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "stead", *args, "--data-dir", str(data_dir)],
        capture_output=True,
        text=True,
        timeout=60,
        env={"PATH": "/usr/bin:/bin", **env},
    )


def test_rotate_key_reseals_and_the_server_reads_them(fresh_server: ServerProcess) -> None:
    secret = "sk-rotation-secret-4242"
    with sdk_of(fresh_server) as client:
        vault = client.beta.vaults.create(display_name="rotating")
        cred = client.beta.vaults.credentials.create(
            vault.id,
            auth={"type": "static_bearer", "mcp_server_url": "https://m.example", "token": secret},
        )
    old_key = (fresh_server.data_dir / "secret.key").read_text()
    fresh_server.stop()
    rotated = _stead(fresh_server.data_dir, "secrets", "rotate-key")
    assert rotated.returncode == 0, rotated.stderr
    assert "re-sealed 1 credential(s)" in rotated.stdout
    assert secret not in rotated.stdout + rotated.stderr
    assert (fresh_server.data_dir / "secret.key").read_text() != old_key
    assert not (fresh_server.data_dir / "secret.key.next").exists()
    fresh_server.start()
    assert fresh_server.first_key is not None
    with make_client(fresh_server.url, fresh_server.first_key) as client:
        # An auth update opens the sealed secret: it works only if the new key reads it.
        updated = client.beta.vaults.credentials.update(
            cred.id, vault_id=vault.id, auth={"type": "static_bearer"}, display_name="after"
        )
        assert updated.display_name == "after"


def test_a_bad_secret_key_stops_serve_with_one_line(tmp_path: Path) -> None:
    result = _stead(tmp_path, "serve", STEAD_SECRET_KEY="c2hvcnQ=")
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert lines == ["stead: STEAD_SECRET_KEY: must be base64 of 32 bytes, got 5 bytes"]


def _key_id(key_text: str) -> str:
    return key_id(base64.urlsafe_b64decode(key_text.strip())).hex()


def _command_env(server: ServerProcess) -> dict[str, str]:
    """The environment an operator's command on ``server``'s data directory runs with."""
    inherited = {k: v for k, v in os.environ.items() if not k.startswith("STEAD_")}
    return {
        **inherited,
        "STEAD_DATA_DIR": str(server.data_dir),
        "STEAD_PORT": str(free_port()),
        "STEAD_SANDBOX": "off",
    }


def test_a_key_the_secrets_are_not_sealed_under_stops_serve_until_forgotten(
    fresh_server: ServerProcess, forker: ServeForker
) -> None:
    secret = "sk-lost-key-secret-5151"
    with sdk_of(fresh_server) as client:
        vault = client.beta.vaults.create(display_name="sealed")
        client.beta.vaults.credentials.create(
            vault.id,
            auth={"type": "static_bearer", "mcp_server_url": "https://m.example", "token": secret},
        )
    fresh_server.stop()
    key_file = fresh_server.data_dir / "secret.key"
    lost = _key_id(key_file.read_text())
    key_file.unlink()  # lost: the next start makes another
    env = _command_env(fresh_server)

    refused = forker.complete(("serve",), env, COMMAND_TIMEOUT)
    made = _key_id(key_file.read_text())
    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert refused.stderr.strip().splitlines() == [
        f"stead: {key_file} is key {made}, but this database's secrets are sealed under key "
        f"{lost}: every stead process of one database needs the same key. If that key is "
        f"lost, `stead secrets forget-key --lost {lost}` makes this one the database's "
        "(what the lost key sealed stays unreadable)"
    ]
    assert "first API key" not in refused.stdout  # refused before the first key is spent
    # Webhook commands seal too: refused alike.
    listed = forker.complete(("webhooks", "list"), env, COMMAND_TIMEOUT)
    assert listed.returncode == 2 and f"sealed under key {lost}" in listed.stderr

    wrong = forker.complete(("secrets", "forget-key", "--lost", made), env, COMMAND_TIMEOUT)
    assert wrong.returncode == 2
    assert wrong.stderr.strip() == f"stead: the database's key is {lost}, not {made}"
    forgot = forker.complete(("secrets", "forget-key", "--lost", lost), env, COMMAND_TIMEOUT)
    assert forgot.returncode == 0, forgot.stderr
    assert f"the database's key is now {made} (was {lost})" in forgot.stdout
    again = forker.complete(("secrets", "forget-key", "--lost", lost), env, COMMAND_TIMEOUT)
    assert again.returncode == 0 and "already this one" in again.stdout

    fresh_server.start()
    outputs = refused.stdout + refused.stderr + forgot.stdout + forgot.stderr
    assert secret not in outputs + fresh_server.log_text()


def test_rotation_moves_the_kept_key_so_the_old_key_is_refused(
    fresh_server: ServerProcess, forker: ServeForker
) -> None:
    fresh_server.stop()
    key_file = fresh_server.data_dir / "secret.key"
    old = key_file.read_text()
    env = _command_env(fresh_server)
    rotated = forker.complete(("secrets", "rotate-key"), env, COMMAND_TIMEOUT)
    assert rotated.returncode == 0, rotated.stderr
    new = key_file.read_text()
    key_file.write_text(old)  # a copy of the key from before the rotation
    refused = forker.complete(("serve",), env, COMMAND_TIMEOUT)
    assert refused.returncode == 2
    assert f"sealed under key {_key_id(new)}" in refused.stderr
    key_file.write_text(new)
    fresh_server.start()


@pytest.mark.postgres
def test_a_server_left_on_the_old_key_refuses_to_seal_after_a_rotation(
    postgres_run: PostgresRun, fake_model: FakeModel, forker: ServeForker, tmp_path: Path
) -> None:
    """Before, the server went on sealing under the old key: its new credential
    was stored under a key the database no longer named, unreadable for good
    once the previous key was dropped, and nothing said so."""
    schema = postgres_run.new_schema()
    url = postgres_run.url(schema)
    old, new = (base64.b64encode(secrets.token_bytes(32)).decode() for _ in range(2))
    before, after = "sk-sealed-before-rotation-7171", "sk-sealed-by-a-stale-server-7272"
    stale = ServerProcess(
        tmp_path / "stale",
        env=loop_env(fake_model, STEAD_DATABASE_URL=url, STEAD_SECRET_KEY=old),
        forker=forker,
    )
    try:
        stale.start()
        with sdk_of(stale) as client:
            vault = client.beta.vaults.create(display_name="rotated beside a server")
            kept = client.beta.vaults.credentials.create(
                vault.id,
                auth={
                    "type": "static_bearer",
                    "mcp_server_url": "https://b.example",
                    "token": before,
                },
            )
            env = {
                **_command_env(stale),
                "STEAD_DATA_DIR": str(tmp_path / "operator"),
                "STEAD_DATABASE_URL": url,
                "STEAD_SECRET_KEY": new,
                "STEAD_SECRET_KEY_PREVIOUS": old,
            }
            rotated = forker.complete(("secrets", "rotate-key"), env, COMMAND_TIMEOUT)
            assert rotated.returncode == 0, rotated.stderr
            assert "re-sealed 1 credential(s)" in rotated.stdout

            with pytest.raises(anthropic.InternalServerError) as refused:
                client.beta.vaults.credentials.create(
                    vault.id,
                    auth={
                        "type": "static_bearer",
                        "mcp_server_url": "https://a.example",
                        "token": after,
                    },
                )
            # Opening what the rotation re-sealed (an auth update reads the
            # current secret first): before, a SealError, a 500 "internal error".
            with pytest.raises(anthropic.InternalServerError) as unopened:
                client.beta.vaults.credentials.update(
                    kept.id, vault_id=vault.id, auth={"type": "static_bearer", "token": after}
                )
        assert refused.value.status_code == 503
        assert "this server's secret key is not the database's" in refused.value.message
        assert "restarted with the current STEAD_SECRET_KEY" in refused.value.message
        assert unopened.value.status_code == 503
        assert "cannot open a secret the database holds" in unopened.value.message
        sealed_under = _sealed_key_ids(url)
        assert sealed_under == {kept.id: _key_id(new)}  # nothing under the old key
        logged = stale.log_text()
        assert logged.count("a secret was not stored") == 1
        assert f"sealed under key {_key_id(new)}" in logged
        outputs = logged + rotated.stdout + rotated.stderr
        outputs += str(refused.value.body) + str(unopened.value.body)
        assert before not in outputs and after not in outputs
    finally:
        stale.kill()
        postgres_run.drop_schema(schema)


def _sealed_key_ids(url: str) -> dict[str, str]:
    """Each stored credential's id and the id of the key it is sealed under,
    after checking the database still names that key as its own."""
    reader = engine(url)
    try:
        with reader.connect() as conn:
            kept = conn.execute(
                text("SELECT value FROM installation_secrets WHERE name = 'secret_key_id'")
            ).scalar_one()
            rows = conn.execute(text("SELECT id, sealed FROM vault_credentials")).all()
    finally:
        reader.dispose()
    found = {row.id: bytes(row.sealed)[1:9].hex() for row in rows}
    assert set(found.values()) <= {bytes(kept).hex()}, (found, bytes(kept).hex())
    return found
