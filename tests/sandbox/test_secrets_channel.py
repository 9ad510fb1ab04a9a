"""The secrets channel (rule 8): credentials reach a sandbox's egress proxy,
which adds them to the sandbox's requests, and nowhere else: not the sandbox,
not the host's state directory, catalogue, snapshots or log. A host that
restarts holds none, and the brain sends them again on its next call. (A header
credential goes only on requests the proxy sends over TLS: ``test_repositories``.)"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import trustme

from stead.sandbox import EgressCredential, HostAddress, HostSandbox
from stead.sandbox.providers.host import HostProvider
from stead.testing import HostProcess, ServeForker
from tests.sandbox.conftest import config, files_holding, held_in, new_id, requires_isolation
from tests.sandbox.https_origins import Origin, https_origin

pytestmark = [pytest.mark.anyio, requires_isolation]

ORIGIN = "secret.test"
FETCH = "curl -sS -H 'Authorization: Bearer placeholder'"


@pytest.fixture(scope="module")
def ca() -> trustme.CA:
    return trustme.CA()


@pytest.fixture(scope="module")
def echo(ca: trustme.CA) -> Iterator[Origin]:
    """An HTTPS origin on loopback that records the Authorization header it got
    (and never echoes it: a reply would carry the secret into the sandbox)."""
    with https_origin(ca, (ORIGIN,)) as origin:
        yield origin


@pytest.fixture(scope="module")
def host_env(ca: trustme.CA, tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """The origin's name pinned to loopback, its CA trusted by the proxy; small
    sandbox disks, as ``_files_holding`` reads every file of the work directory
    whole, the disk images among them (10 GiB each by default)."""
    bundle = tmp_path_factory.mktemp("ca") / "ca.pem"
    ca.cert_pem.write_to_path(str(bundle))
    return {
        "STEAD_EGRESS_HOSTS": json.dumps({ORIGIN: "127.0.0.1"}),
        "STEAD_EGRESS_EXTRA_CA_FILE": str(bundle),
        "STEAD_SANDBOX_DISK_MB": "32",
    }


def _allowing_the_origin() -> dict[str, object]:
    return {
        "type": "limited",
        "allowed_hosts": [ORIGIN],
        "allow_mcp_servers": False,
        "allow_package_managers": False,
    }


def _authorization(origin: Origin) -> str:
    return origin.seen[-1]["authorization"]


def _files_holding(root: Path, secret: bytes) -> list[Path]:
    return [
        path
        for path in root.rglob("*")
        if path.is_file() and not path.is_socket() and secret in path.read_bytes()
    ]


async def test_a_credential_is_injected_by_the_proxy_and_written_nowhere(
    tmp_path: Path, echo: Origin, host_env: dict[str, str], forker: ServeForker
) -> None:
    url = f"https://{ORIGIN}:{echo.port}/"
    made = time.time()
    secret = f"dummy-secret-{uuid.uuid4().hex}"
    process = HostProcess(
        tmp_path / "state", env={**host_env, "STEAD_LOG_LEVEL": "debug"}, forker=forker
    ).start()
    provider = HostProvider(HostAddress(unix_path=process.socket_path))
    sandbox_id = new_id()
    wanted = config(networking=_allowing_the_origin())
    try:
        sandbox = await provider.acquire(sandbox_id, wanted)
        assert isinstance(sandbox, HostSandbox)
        credential = EgressCredential(ORIGIN, "Authorization", f"Bearer {secret}", port=echo.port)
        await provider.set_secrets(sandbox_id, wanted, [credential])

        # The sandbox's own placeholder header is replaced, never passed on.
        fetched = await sandbox.exec(f"{FETCH} {url}", op_key=new_id(), timeout=30)
        assert (fetched.exit_code, fetched.output.strip()) == (0, "ok"), fetched.output
        assert _authorization(echo) == f"Bearer {secret}"

        # Inside, nothing holds it: not the environment, not any file. The
        # command names it in two halves, so that its own record cannot hold it.
        half = len(secret) // 2
        search = await sandbox.exec(
            f"a={secret[:half]}; b={secret[half:]}; env; "
            + files_holding('-e "$a$b"', since=made)
            + "; echo searched",
            op_key=new_id(),
            timeout=120,
        )
        assert search.output.count(secret) == 0
        assert held_in(search.output) == []
        assert search.output.endswith("searched\n")

        await sandbox.snapshot()
        assert not _files_holding(process.work_dir, secret.encode())
        process.kill()
        assert not _files_holding(process.state_dir, secret.encode())
        assert not _files_holding(tmp_path / "blobs", secret.encode())
        assert secret not in process.log_text()

        # A restarted host holds no credentials; the next call sends them again.
        process = HostProcess(
            tmp_path / "state", env=host_env, work_dir=process.work_dir, forker=forker
        ).start()
        again = await sandbox.exec(f"{FETCH} {url}", op_key=new_id(), timeout=30)
        assert again.output.strip() == "ok"
        assert _authorization(echo) == f"Bearer {secret}"
        assert await provider.release(sandbox_id) is not None
    finally:
        await provider.aclose()
        process.stop()
    assert secret not in process.log_text()


async def test_without_credentials_the_sandboxs_request_goes_out_unchanged(
    tmp_path: Path, echo: Origin, host_env: dict[str, str], forker: ServeForker
) -> None:
    process = HostProcess(tmp_path / "state", env=host_env, forker=forker).start()
    provider = HostProvider(HostAddress(unix_path=process.socket_path))
    sandbox_id = new_id()
    try:
        sandbox = await provider.acquire(sandbox_id, config(networking=_allowing_the_origin()))
        fetched = await sandbox.exec(
            f"{FETCH} https://{ORIGIN}:{echo.port}/", op_key=new_id(), timeout=30
        )
        assert fetched.output.strip() == "ok"
        assert _authorization(echo) == "Bearer placeholder"
    finally:
        await provider.release(sandbox_id)
        await provider.aclose()
        process.stop()
