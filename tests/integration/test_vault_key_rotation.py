"""The vault key through the ``stead`` command: rotation re-seals every credential
and the server reads them after; a bad key stops start-up with one line."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from stead.testing import ServerProcess
from tests.conftest import make_client, sdk_of


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
