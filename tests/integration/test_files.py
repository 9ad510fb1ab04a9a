"""The Files API through the official SDK on a real server, on each store:
upload, list (paging, scope and id filters), metadata, download, delete, the
size limit, bad input and other workspaces."""

from __future__ import annotations

import io
import os
import socket
import uuid

import anthropic
import httpx2
import pytest

from stead.testing import ServerProcess, client_tls
from tests.conftest import make_client
from tests.databases import BACKENDS

MAX_FILE_BYTES = 64 * 1024
SERVER_ENV = {"STEAD_MAX_FILE_BYTES": str(MAX_FILE_BYTES)}
"""A small limit, so the oversized upload is cheap to send."""

pytestmark = pytest.mark.parametrize(
    "server_on_each_store", BACKENDS, indirect=True, scope="module"
)


@pytest.fixture
def client(client_on_each_store: anthropic.Anthropic) -> anthropic.Anthropic:
    return client_on_each_store


def _blob_files(server: ServerProcess) -> set[str]:
    root = server.data_dir / "blobs" / "files"
    return {p.name for p in root.rglob("*") if p.is_file()} if root.exists() else set()


def test_upload_retrieve_download_delete_round_trip(
    client: anthropic.Anthropic, server_on_each_store: ServerProcess
) -> None:
    data = os.urandom(40_000) + b"\x00\xff end"
    uploaded = client.beta.files.upload(file=("report.bin", data, "application/x-custom"))
    assert uploaded.id.startswith("file_") and uploaded.type == "file"
    assert (uploaded.filename, uploaded.mime_type) == ("report.bin", "application/x-custom")
    assert uploaded.size_bytes == len(data) and uploaded.downloadable is True
    assert uploaded.scope is None and uploaded.expires_at is None
    assert client.beta.files.retrieve_metadata(uploaded.id) == uploaded
    assert client.beta.files.download(uploaded.id).read() == data
    assert uploaded.id in _blob_files(server_on_each_store)
    deleted = client.beta.files.delete(uploaded.id)
    assert (deleted.id, deleted.type) == (uploaded.id, "file_deleted")
    assert uploaded.id not in _blob_files(server_on_each_store)
    for call in (
        lambda: client.beta.files.retrieve_metadata(uploaded.id),
        lambda: client.beta.files.download(uploaded.id),
        lambda: client.beta.files.delete(uploaded.id),
    ):
        with pytest.raises(anthropic.NotFoundError, match=uploaded.id):
            call()
    assert uploaded.id not in {f.id for f in client.beta.files.list(limit=1000)}


def test_filename_and_mime_type_are_kept_guessed_or_sniffed(client: anthropic.Anthropic) -> None:
    files = client.beta.files
    assert files.upload(file=("a/b/notes.md", b"# hi", "text/markdown")).filename == "notes.md"
    guessed = files.upload(file=("photo.png", b"\x89PNG\r\n\x1a\nrest"))
    assert guessed.mime_type == "image/png"
    sniffed = files.upload(file=("blob", b"%PDF-1.7 body", "application/octet-stream"))
    assert (sniffed.filename, sniffed.mime_type) == ("blob", "application/pdf")
    text = files.upload(file=("data", "héllo".encode(), "application/octet-stream"))
    assert text.mime_type == "text/plain"
    empty = files.upload(file=("empty.txt", b""))
    assert empty.size_bytes == 0 and files.download(empty.id).read() == b""
    # Bytes or a file object carry no name: the SDK sends a part without a filename.
    nameless = files.upload(file=b"%PDF-1.7 body")
    assert (nameless.filename, nameless.mime_type) == ("unnamed.pdf", "application/pdf")
    assert files.download(nameless.id).read() == b"%PDF-1.7 body"
    assert files.upload(file=io.BytesIO(b"plain words")).filename == "unnamed.txt"
    # Served with its stored type as it is: no charset is made up for a text file.
    latin = files.upload(file=("latin.csv", "caf\xe9".encode("latin-1"), "text/csv"))
    served = files.download(latin.id)
    assert served.headers["content-type"] == "text/csv"
    assert served.headers["x-content-type-options"] == "nosniff"
    assert served.headers["content-disposition"] == "attachment; filename*=UTF-8''latin.csv"
    assert served.read() == "caf\xe9".encode("latin-1")


def test_expires_in_seconds_sets_expires_at(client: anthropic.Anthropic) -> None:
    uploaded = client.beta.files.upload(file=("t.txt", b"x"), expires_in_seconds=3600)
    assert uploaded.expires_at is not None
    assert 3590 < (uploaded.expires_at - uploaded.created_at).total_seconds() <= 3601
    for bad in (10, 7_776_001):
        with pytest.raises(anthropic.BadRequestError, match="expires_in_seconds"):
            client.beta.files.upload(file=("t.txt", b"x"), expires_in_seconds=bad)


def test_list_pages_newest_first_and_filters_by_ids(client: anthropic.Anthropic) -> None:
    tag = uuid.uuid4().hex[:8]
    made = [client.beta.files.upload(file=(f"{tag}-{i}.txt", b"%d" % i)).id for i in range(5)]
    first = client.beta.files.list(limit=2)
    assert [f.id for f in first.data] == made[::-1][:2]
    assert first.next_page and first.next_page.startswith("page_")
    walked = [f.id for f in client.beta.files.list(limit=2)]
    assert walked[:5] == made[::-1]
    assert len(walked) == len(set(walked))
    by_ids = client.beta.files.list(ids=[made[0], made[3], made[0], "file_nope"])
    assert [f.id for f in by_ids.data] == [made[3], made[0]] and by_ids.next_page is None
    with pytest.raises(anthropic.BadRequestError, match="ids"):
        client.beta.files.list(ids=[made[0]], limit=5)
    with pytest.raises(anthropic.BadRequestError, match="ids"):
        client.beta.files.list(ids=[f"file_{i}" for i in range(101)])


def test_scope_filter_and_its_cursor(client: anthropic.Anthropic) -> None:
    client.beta.files.upload(file=("unscoped.txt", b"x"))
    assert client.beta.files.list(scope_id="sesn_none").data == []
    cursor = client.beta.files.list(limit=1).next_page
    with pytest.raises(anthropic.BadRequestError, match="page"):
        client.beta.files.list(scope_id="sesn_none", page=cursor)
    with pytest.raises(anthropic.BadRequestError, match="scope_id"):
        client.beta.files.list(scope_id="bad id!")


def test_an_oversized_upload_is_refused_naming_the_limit(
    client: anthropic.Anthropic, server_on_each_store: ServerProcess
) -> None:
    before = _blob_files(server_on_each_store)
    for size in (MAX_FILE_BYTES + 1, MAX_FILE_BYTES + 2 * 1024 * 1024):
        with pytest.raises(anthropic.APIStatusError) as refused:
            client.beta.files.upload(file=("big.bin", b"x" * size))
        assert refused.value.status_code == 413
        assert "STEAD_MAX_FILE_BYTES" in refused.value.message and str(MAX_FILE_BYTES) in (
            refused.value.message
        )
    exact = client.beta.files.upload(file=("max.bin", b"y" * MAX_FILE_BYTES))
    assert exact.size_bytes == MAX_FILE_BYTES
    assert _blob_files(server_on_each_store) - before == {exact.id}


@pytest.mark.parametrize(
    ("files", "data", "headers", "status", "named"),
    [
        ({"expires_in_seconds": (None, "3600")}, None, None, 400, "file"),
        (
            {"file": ("a.txt", b"x"), "expires_in_seconds": ("e.txt", b"1")},
            None,
            None,
            400,
            "expires_in_seconds",
        ),
        ({"other": ("a.txt", b"x")}, None, None, 400, "other"),
        ({"file": ("a.txt", b"x")}, {"colour": "red"}, None, 400, "colour"),
        (
            {"file": ("a.txt", b"x")},
            {"expires_in_seconds": "soon"},
            None,
            400,
            "expires_in_seconds",
        ),
        # Digits to str.isdigit, not to int(): a 500 (and a dropped connection) before.
        (
            {"file": ("a.txt", b"x")},
            {"expires_in_seconds": "\u00b2"},
            None,
            400,
            "expires_in_seconds",
        ),
        (
            {"file": ("a.txt", b"x")},
            {"expires_in_seconds": "\uff13\uff16\uff10\uff10"},
            None,
            400,
            "expires_in_seconds",
        ),
        ({"file": ("a.txt", b"x", "not a type")}, None, None, 400, "content type"),
        (None, None, {"content-type": "application/json"}, 415, "multipart/form-data"),
        (None, None, {"content-type": "multipart/form-data"}, 400, "body"),
    ],
)
def test_bad_uploads_are_4xx_naming_the_field(
    server_on_each_store: ServerProcess,
    files: dict[str, tuple[str | bytes | None, ...]] | None,
    data: dict[str, str] | None,
    headers: dict[str, str] | None,
    status: int,
    named: str,
) -> None:
    key = server_on_each_store.first_key
    assert key
    answer = httpx2.post(
        f"{server_on_each_store.url}/v1/files",
        headers={"x-api-key": key, **(headers or {})},
        files=files,  # type: ignore[arg-type]
        data=data,
        content=None if files or data else b"{}",
        verify=client_tls(),
    )
    assert answer.status_code == status, answer.text
    body = answer.json()
    assert body["type"] == "error" and named in body["error"]["message"], body


def test_bad_ids_are_400_and_unknown_ones_404(client: anthropic.Anthropic) -> None:
    with pytest.raises(anthropic.BadRequestError, match="file_id"):
        client.beta.files.retrieve_metadata("file id with spaces")
    with pytest.raises(anthropic.NotFoundError):
        client.beta.files.download("file_doesnotexist")
    with pytest.raises(anthropic.BadRequestError, match="limit"):
        client.beta.files.list(limit=1001)


def test_other_workspaces_see_404(server_on_each_store: ServerProcess) -> None:
    server = server_on_each_store
    assert server.first_key
    other_key = server.create_key(new_workspace=f"other-{uuid.uuid4().hex[:6]}")
    with (
        make_client(server.url, server.first_key) as mine,
        make_client(server.url, other_key) as theirs,
    ):
        uploaded = mine.beta.files.upload(file=("mine.txt", b"secret"))
        for call in (
            lambda: theirs.beta.files.retrieve_metadata(uploaded.id),
            lambda: theirs.beta.files.download(uploaded.id),
            lambda: theirs.beta.files.delete(uploaded.id),
        ):
            with pytest.raises(anthropic.NotFoundError):
                call()
        assert uploaded.id not in {f.id for f in theirs.beta.files.list(limit=1000)}
        assert theirs.beta.files.list(ids=[uploaded.id]).data == []
        assert mine.beta.files.download(uploaded.id).read() == b"secret"


def test_an_upload_the_blob_store_failed_stops_counting_against_the_quota(
    server_on_each_store: ServerProcess,
) -> None:
    """Before, each upload the blob store failed (a 503) held its size of the
    workspace's quota until the purger's grace (six hours) passed, so a client
    that retried through an outage found the workspace full once it ended."""
    server = server_on_each_store
    key = server.create_key(new_workspace=f"failed-{uuid.uuid4().hex[:6]}")
    admin = server.create_key(admin=True)
    with make_client(server.url, key) as client, make_client(server.url, admin) as operator:
        own = client.get("/v1/stead/limits", cast_to=object)
        workspace_id = own["workspace_id"]  # type: ignore[index]
        limits = f"/v1/stead/workspaces/{workspace_id}/limits"
        operator.post(limits, body={"file_storage_bytes": 1000}, cast_to=object)
        # A file where the workspace's directory of blobs goes: every write fails.
        in_the_way = server.data_dir / "blobs" / "files" / workspace_id
        in_the_way.parent.mkdir(parents=True, exist_ok=True)
        in_the_way.write_bytes(b"")
        for _ in range(3):
            with pytest.raises(anthropic.InternalServerError):
                client.with_options(max_retries=0).beta.files.upload(file=("a.bin", b"a" * 600))
        in_the_way.unlink()
        uploaded = client.beta.files.upload(file=("a.bin", b"a" * 600))
        assert client.beta.files.download(uploaded.id).read() == b"a" * 600


@pytest.mark.parametrize(
    "second", [b'name="file"; filename="b.bin"', b'name="x"; filename="x.bin"']
)
def test_a_second_file_part_is_refused_before_its_bytes_are_read(
    server_on_each_store: ServerProcess, second: bytes
) -> None:
    """Before, every part with a filename was spooled (its first MiB in memory)
    until the body ended, and only then was the form refused: one body of
    hundreds of such parts held hundreds of MiB of the server's memory."""
    server = server_on_each_store
    head = (
        b"--B\r\nContent-Disposition: form-data; "
        b'name="file"; filename="a.bin"\r\n\r\n' + b"a" * 1000 + b"\r\n"
        b"--B\r\nContent-Disposition: form-data; " + second + b"\r\n\r\n" + b"b" * 1000
    )
    request = (
        f"POST /v1/files HTTP/1.1\r\nHost: 127.0.0.1\r\nx-api-key: {server.first_key}\r\n"
        "content-type: multipart/form-data; boundary=B\r\n"
        f"content-length: {len(head) + 500_000}\r\n\r\n"
    ).encode()
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
        sock.sendall(request + head)  # and the rest of the body never comes
        answer = b""
        while b"}" not in answer:
            chunk = sock.recv(65536)
            assert chunk, answer
            answer += chunk
    assert answer.startswith(b"HTTP/1.1 400"), answer
    assert b"send exactly one file" in answer or b"x: unknown field" in answer, answer
