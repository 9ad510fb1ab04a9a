"""The Files API through the SDK on a server whose blob store is S3 (SeaweedFS on
loopback), with a file storage quota: bytes round trip and go with a delete,
and an upload past the quota is a 400 ``storage_quota_exceeded`` that stores
nothing. (Expiry sweeps on S3 are in ``tests/unit/test_file_keeper.py``, where
the clock can be moved.)"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator

import anthropic
import anyio
import httpx2
import pytest

from stead.blobs import open_blob_store
from stead.testing import FakeModel, ServeForker, ServerProcess, client_tls, free_port
from stead.testing.seaweed import S3Server
from tests.conftest import loop_env, make_client, s3_config, serving

QUOTA = 100_000


@pytest.fixture(scope="module")
def s3_served(
    tmp_path_factory: pytest.TempPathFactory,
    fake_model: FakeModel,
    s3_server: S3Server,
    forker: ServeForker,
) -> Iterator[tuple[ServerProcess, S3Server, str]]:
    prefix = f"served-{uuid.uuid4().hex}"
    env = {
        "STEAD_BLOB_URL": s3_server.url(prefix),
        "STEAD_S3_ENDPOINT": s3_server.endpoint,
        "STEAD_S3_REGION": s3_server.region,
        "STEAD_S3_ACCESS_KEY_ID": s3_server.access_key_id,
        "STEAD_S3_SECRET_ACCESS_KEY": s3_server.secret_access_key,
        "STEAD_FILES_QUOTA_BYTES": str(QUOTA),
    }
    data = tmp_path_factory.mktemp("s3-data")
    for process in serving(data, loop_env(fake_model, **env), forker):
        yield process, s3_server, prefix


def _objects(s3: S3Server, prefix: str) -> set[str]:
    """The file blobs in the server's bucket prefix, read straight from S3."""

    async def listed() -> set[str]:
        blobs = open_blob_store(s3_config(s3, s3.url(prefix)))
        return {found.key.rsplit("/", 1)[-1] for found in await blobs.list("files")}

    return anyio.run(listed)


def test_upload_download_delete_on_s3(s3_served: tuple[ServerProcess, S3Server, str]) -> None:
    server, s3, prefix = s3_served
    assert server.first_key
    data = os.urandom(50_000)
    with make_client(server.url, server.first_key) as client:
        uploaded = client.beta.files.upload(file=("data.bin", data))
        assert uploaded.id in _objects(s3, prefix)
        assert client.beta.files.download(uploaded.id).read() == data
        client.beta.files.delete(uploaded.id)
        assert uploaded.id not in _objects(s3, prefix)
        with pytest.raises(anthropic.NotFoundError):
            client.beta.files.download(uploaded.id)


def test_an_upload_past_the_quota_is_a_400_and_stores_nothing(
    s3_served: tuple[ServerProcess, S3Server, str],
) -> None:
    server, s3, prefix = s3_served
    key = server.create_key(new_workspace=f"quota-{uuid.uuid4().hex[:6]}")
    with make_client(server.url, key) as client:
        first = client.beta.files.upload(file=("a.bin", b"a" * 60_000))
        before = _objects(s3, prefix)
        with pytest.raises(anthropic.BadRequestError) as refused:
            client.beta.files.upload(file=("b.bin", b"b" * 50_000))
        error = refused.value.body["error"]  # type: ignore[index]
        assert error["details"]["error_code"] == "storage_quota_exceeded"
        assert f"quota of {QUOTA} bytes" in error["message"]
        assert _objects(s3, prefix) == before
        assert [f.id for f in client.beta.files.list()] == [first.id]
        client.beta.files.delete(first.id)  # room again
        client.beta.files.upload(file=("b.bin", b"b" * 50_000))
        # The workspace's own limit, set by an operator, replaces the server's.
        own = httpx2.get(
            f"{server.url}/v1/stead/limits", headers={"x-api-key": key}, verify=client_tls()
        ).json()
        admin = server.create_key(admin=True)
        answer = httpx2.post(
            f"{server.url}/v1/stead/workspaces/{own['workspace_id']}/limits",
            headers={"x-api-key": admin},
            json={"file_storage_bytes": 200_000},
            verify=client_tls(),
        )
        assert answer.json()["limits"]["file_storage_bytes"] == 200_000, answer.text
        client.beta.files.upload(file=("c.bin", b"c" * 90_000))


def test_an_unreachable_s3_is_a_503_that_names_none_of_it(
    tmp_path_factory: pytest.TempPathFactory,
    fake_model: FakeModel,
    s3_server: S3Server,
    forker: ServeForker,
) -> None:
    """An S3 endpoint that does not answer: a retryable 503 that says so, and
    none of what the store's client said (its endpoint, bucket, prefix), which
    is the operator's to read in the log, not every client's."""
    closed = httpx2.URL(s3_server.endpoint).copy_with(port=free_port())
    env = {
        "STEAD_BLOB_URL": s3_server.url("nowhere"),
        "STEAD_S3_ENDPOINT": str(closed),
        "STEAD_S3_REGION": s3_server.region,
        "STEAD_S3_ACCESS_KEY_ID": s3_server.access_key_id,
        "STEAD_S3_SECRET_ACCESS_KEY": s3_server.secret_access_key,
        "STEAD_BLOB_TIMEOUT_SECONDS": "3",
    }
    data = tmp_path_factory.mktemp("s3-closed")
    for server in serving(data, loop_env(fake_model, **env), forker):
        answer = httpx2.post(
            f"{server.url}/v1/files",
            headers={"x-api-key": server.first_key or ""},
            files={"file": ("a.txt", b"hello", "text/plain")},
            timeout=60,
            verify=client_tls(),
        )
        assert answer.status_code == 503, answer.text
        message = answer.json()["error"]["message"]
        assert "cannot be reached" in message
        assert str(closed.port) not in message and "nowhere" not in message
        assert str(closed.port) in server.log_text()
