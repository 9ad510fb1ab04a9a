"""The Skills API through the official SDK on a real server, on each store:
create (files or a zip), retrieve, list with paging, versions, download,
delete, every bad upload refused with nothing stored, and other workspaces."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import anthropic
import pytest

from stead.testing import ServerProcess
from tests.conftest import make_client
from tests.databases import BACKENDS
from tests.integration.skill_files import (
    DESCRIPTION,
    modes_of,
    skill_files,
    skill_md,
    unzipped,
    zipped,
)

MAX_BYTES = 256 * 1024
MAX_FILE_BYTES = 64 * 1024
MAX_FILES = 12
SERVER_ENV = {
    "STEAD_SKILL_MAX_BYTES": str(MAX_BYTES),
    "STEAD_SKILL_MAX_FILE_BYTES": str(MAX_FILE_BYTES),
    "STEAD_SKILL_MAX_FILES": str(MAX_FILES),
}
"""Small limits, so the oversized uploads are cheap to send."""

pytestmark = pytest.mark.parametrize(
    "server_on_each_store", BACKENDS, indirect=True, scope="module"
)


@pytest.fixture
def client(client_on_each_store: anthropic.Anthropic) -> anthropic.Anthropic:
    return client_on_each_store


def _name() -> str:
    return f"skill-{uuid.uuid4().hex[:10]}"


def _blobs(server: ServerProcess) -> set[Path]:
    root = server.data_dir / "blobs" / "files"
    return {p for p in root.rglob("*") if p.is_file()} if root.exists() else set()


def test_create_from_files_retrieve_and_download(client: anthropic.Anthropic) -> None:
    name = _name()
    skill = client.beta.skills.create(files=skill_files(name))
    assert skill.id.startswith("skill_") and skill.type == "skill"
    assert (skill.display_name, skill.source.type) == (name, "custom")
    assert skill.created_at == skill.updated_at
    assert client.beta.skills.retrieve(skill.id) == skill

    version = client.beta.skills.versions.retrieve("latest", skill_id=skill.id)
    assert version.id == skill.latest_version_id and version.type == "skill_version"
    assert (version.skill_id, version.name, version.description) == (skill.id, name, DESCRIPTION)
    assert client.beta.skills.versions.retrieve(version.id, skill_id=skill.id) == version

    download = client.beta.skills.versions.download(version.id, skill_id=skill.id)
    assert download.headers["content-type"] == "application/zip"
    assert f"{name}.zip" in download.headers["content-disposition"]
    assert unzipped(download.read()) == {
        f"{name}/SKILL.md": skill_md(name),
        f"{name}/scripts/fill.py": b"print('fill')\n",
    }


def test_create_from_a_zip_with_a_display_name(client: anthropic.Anthropic) -> None:
    name = _name()
    script = f"{name}/scripts/fill.py"
    archive = zipped([*skill_files(name), (f"{name}/docs/", b"")], modes={script: 0o755})
    skill = client.beta.skills.create(
        files=[("skill.zip", archive, "application/zip")], display_name="PDF tools"
    )
    assert skill.display_name == "PDF tools"
    download = client.beta.skills.versions.download("latest", skill_id=skill.id).read()
    assert set(unzipped(download)) == {f"{name}/SKILL.md", script}
    # The execute bit is kept, and served (the sandbox mounts the script 0555).
    assert modes_of(download) == {f"{name}/SKILL.md": 0o644, script: 0o755}


def test_the_name_comes_from_the_directory_when_the_frontmatter_has_none(
    client: anthropic.Anthropic,
) -> None:
    name = _name()
    skill = client.beta.skills.create(files=[(f"{name}/SKILL.md", skill_md(name=None))])
    version = client.beta.skills.versions.retrieve("latest", skill_id=skill.id)
    assert version.name == name == skill.display_name


def test_versions_are_immutable_and_listed_newest_first(client: anthropic.Anthropic) -> None:
    name = _name()
    skill = client.beta.skills.create(files=skill_files(name, script=b"v1"))
    first = skill.latest_version_id
    second = client.beta.skills.versions.create(skill.id, files=skill_files(name, script=b"v2"))
    third = client.beta.skills.versions.create(
        skill.id, files=[("x.zip", zipped(skill_files(name, "Third.", script=b"v3")))]
    )
    assert int(first) < int(second.id) < int(third.id)
    assert third.description == "Third."
    again = client.beta.skills.retrieve(skill.id)
    assert again.latest_version_id == third.id and again.updated_at > skill.updated_at

    page = client.beta.skills.versions.list(skill.id, limit=2)
    assert [v.id for v in page.data] == [third.id, second.id]
    assert [v.id for v in page.get_next_page().data] == [first]
    listed = [v.id for v in client.beta.skills.versions.list(skill.id, limit=1)]
    assert listed == [third.id, second.id, first]

    for version, script in ((first, b"v1"), (second.id, b"v2"), (third.id, b"v3")):
        files = unzipped(client.beta.skills.versions.download(version, skill_id=skill.id).read())
        assert files[f"{name}/scripts/fill.py"] == script


def test_deleting_versions_and_the_skill(
    client: anthropic.Anthropic, server_on_each_store: ServerProcess
) -> None:
    name = _name()
    before = _blobs(server_on_each_store)
    skill = client.beta.skills.create(files=skill_files(name, script=b"v1"))
    second = client.beta.skills.versions.create(skill.id, files=skill_files(name, script=b"v2"))
    assert len(_blobs(server_on_each_store) - before) == 2

    deleted = client.beta.skills.versions.delete(second.id, skill_id=skill.id)
    assert (deleted.id, deleted.type) == (second.id, "skill_version_deleted")
    assert client.beta.skills.retrieve(skill.id).latest_version_id == skill.latest_version_id
    assert len(_blobs(server_on_each_store) - before) == 1
    for call in (
        lambda: client.beta.skills.versions.retrieve(second.id, skill_id=skill.id),
        lambda: client.beta.skills.versions.download(second.id, skill_id=skill.id),
        lambda: client.beta.skills.versions.delete(second.id, skill_id=skill.id),
    ):
        with pytest.raises(anthropic.NotFoundError, match=second.id):
            call()
    with pytest.raises(anthropic.BadRequestError, match=r"version: .*only version"):
        client.beta.skills.versions.delete("latest", skill_id=skill.id)

    gone = client.beta.skills.delete(skill.id)
    assert (gone.id, gone.type) == (skill.id, "skill_deleted")
    assert _blobs(server_on_each_store) == before
    for call in (
        lambda: client.beta.skills.retrieve(skill.id),
        lambda: client.beta.skills.delete(skill.id),
        lambda: client.beta.skills.versions.list(skill.id),
        lambda: client.beta.skills.versions.retrieve("latest", skill_id=skill.id),
        lambda: client.beta.skills.versions.create(skill.id, files=skill_files(name)),
    ):
        with pytest.raises(anthropic.NotFoundError):
            call()
    assert skill.id not in {s.id for s in client.beta.skills.list(limit=1000)}
    # The name is free again.
    assert client.beta.skills.create(files=skill_files(name)).id != skill.id


def test_list_pages_newest_first_and_filters_by_source(client: anthropic.Anthropic) -> None:
    made = [client.beta.skills.create(files=skill_files(_name())).id for _ in range(5)]
    first = client.beta.skills.list(limit=2)
    seen = [s.id for s in first.data]
    page = first
    while page.has_next_page():
        page = page.get_next_page()
        seen += [s.id for s in page.data]
    assert len(seen) == len(set(seen))
    assert [i for i in seen if i in made] == made[::-1]
    assert [s.id for s in client.beta.skills.list(limit=1000, source="custom")][:5] == made[::-1]
    assert client.beta.skills.list(source="anthropic").data == []
    with pytest.raises(anthropic.BadRequestError, match="source"):
        client.beta.skills.list(source="elsewhere")
    with pytest.raises(anthropic.BadRequestError, match="limit"):
        client.beta.skills.list(limit=1001)


def test_a_taken_name_is_a_409_and_a_version_keeps_the_name(
    client: anthropic.Anthropic, server_on_each_store: ServerProcess
) -> None:
    name = _name()
    skill = client.beta.skills.create(files=skill_files(name))
    with pytest.raises(anthropic.ConflictError, match=name) as caught:
        client.beta.skills.create(files=skill_files(name))
    details = caught.value.body["error"]["details"]  # type: ignore[index]
    assert details == {"error_code": "skill_name_taken", "skill_name": name}
    other = _name()
    before = _blobs(server_on_each_store)
    with pytest.raises(anthropic.BadRequestError, match=r"files: SKILL\.md names"):
        client.beta.skills.versions.create(skill.id, files=skill_files(other))
    assert _blobs(server_on_each_store) == before
    assert [v.id for v in client.beta.skills.versions.list(skill.id)] == [skill.latest_version_id]


def _bomb(name: str) -> bytes:
    return zipped([*skill_files(name), (f"{name}/zeros.bin", b"\0" * (MAX_BYTES * 8))])


BAD_UPLOADS = {
    "no SKILL.md": lambda n: [(f"{n}/README.md", b"hi")],
    "a path with ..": lambda n: [*skill_files(n), (f"{n}/../escape.txt", b"x")],
    "a zip with ../": lambda n: [("s.zip", zipped([*skill_files(n), ("../evil.sh", b"x")]))],
    "a zip with ../ inside": lambda n: [
        ("s.zip", zipped([*skill_files(n), (f"{n}/../../x", b"")]))
    ],
    "an absolute path": lambda n: [*skill_files(n), ("/etc/passwd", b"x")],
    "a zip with a symlink": lambda n: [
        ("s.zip", zipped(skill_files(n), symlinks={f"{n}/link": "/etc/passwd"}))
    ],
    "a zip bomb": lambda n: [("s.zip", _bomb(n))],
    "a file too large": lambda n: [*skill_files(n), (f"{n}/big.bin", b"x" * (MAX_FILE_BYTES + 1))],
    "too many files": lambda n: [
        *skill_files(n),
        *[(f"{n}/f{i}.txt", b"x") for i in range(MAX_FILES)],
    ],
    "too large together": lambda n: [
        *skill_files(n),
        *[
            (f"{n}/part{i}.bin", b"x" * (MAX_FILE_BYTES - 1))
            for i in range(MAX_BYTES // MAX_FILE_BYTES)
        ],
    ],
    "two directories": lambda n: [*skill_files(n), ("other/file.txt", b"x")],
    # What a session's sandbox could not hold under /workspace/skills.
    "a file and a directory": lambda n: [*skill_files(n), (f"{n}/x", b"1"), (f"{n}/x/y", b"2")],
    "a path too deep": lambda n: [*skill_files(n), (f"{n}/" + "a/" * 32 + "f.txt", b"x")],
    "a name too long": lambda n: [*skill_files(n), (f"{n}/" + "n" * 256, b"x")],
    "no directory": lambda n: [("SKILL.md", skill_md(n))],
    "not a zip": lambda n: [("s.zip", b"PK\x03\x04 but not really")],
    "no description": lambda n: [(f"{n}/SKILL.md", skill_md(n, description=None))],
    "a long description": lambda n: [(f"{n}/SKILL.md", skill_md(n, "d" * 1025))],
    "an XML tag in the description": lambda n: [(f"{n}/SKILL.md", skill_md(n, "a <b> c"))],
    # Before, kept on SQLite and a 500 on PostgreSQL (its text holds no NUL).
    "a NUL in the description": lambda n: [(f"{n}/SKILL.md", skill_md(n, '"a\\0b"'))],
    "an escape in the description": lambda n: [(f"{n}/SKILL.md", skill_md(n, '"a\\eb"'))],
    "an uppercase name": lambda n: [(f"{n}/SKILL.md", skill_md("Pdf-Tools"))],
    "a reserved name": lambda n: [(f"{n}/SKILL.md", skill_md("claude-helper"))],
    "a long name": lambda n: [(f"{n}/SKILL.md", skill_md("a" * 65))],
    # Before, kept as "<name>\n": a second skill beside "<name>", and a
    # /workspace/skills directory whose name ends in a newline.
    "a name ending in a newline": lambda n: [(f"{n}/SKILL.md", skill_md(f'"{n}\\n"'))],
    "no frontmatter": lambda n: [(f"{n}/SKILL.md", b"# just markdown\n")],
    "bad YAML": lambda n: [(f"{n}/SKILL.md", b"---\nname: [unclosed\n---\n")],
    # Before, a RecursionError: a 500, and the kept-alive connection reset.
    "YAML nested past the stack": lambda n: [
        (f"{n}/SKILL.md", b"---\ndescription: [" + b"[" * 5000 + b"\n---\n")
    ],
    "not UTF-8": lambda n: [(f"{n}/SKILL.md", b"---\nname: \xff\n---\n")],
    # Before, a 500: PyYAML raises ValueError, not a YAMLError, for these.
    "a YAML date past the month's end": lambda n: [
        (f"{n}/SKILL.md", skill_md(n).replace(b"---\n", b"---\nd: 2001-02-30\n", 1))
    ],
    "a YAML int past Python's digit limit": lambda n: [
        (f"{n}/SKILL.md", skill_md(n).replace(b"---\n", b"---\nd: " + b"9" * 5000 + b"\n", 1))
    ],
}


def _refusal(call: Callable[[], object]) -> str:
    with pytest.raises(anthropic.BadRequestError) as caught:
        call()
    return str(caught.value.body["error"]["message"])  # type: ignore[index]


@pytest.mark.parametrize("case", list(BAD_UPLOADS))
def test_bad_uploads_are_400s_naming_files_and_store_nothing(
    client: anthropic.Anthropic, server_on_each_store: ServerProcess, case: str
) -> None:
    existing = client.beta.skills.create(files=skill_files(_name()))
    taken = client.beta.skills.versions.retrieve("latest", skill_id=existing.id).name
    before = (_blobs(server_on_each_store), [s.id for s in client.beta.skills.list(limit=1000)])
    upload = BAD_UPLOADS[case]
    assert _refusal(lambda: client.beta.skills.create(files=upload(_name()))).startswith("files")
    refused = _refusal(lambda: client.beta.skills.versions.create(existing.id, files=upload(taken)))
    assert refused.startswith("files")
    after = (_blobs(server_on_each_store), [s.id for s in client.beta.skills.list(limit=1000)])
    assert after == before
    assert len(list(client.beta.skills.versions.list(existing.id))) == 1


def test_an_upload_over_the_size_limit_is_a_413(client: anthropic.Anthropic) -> None:
    name = _name()
    big = b"x" * (MAX_BYTES + 1024 * 1024)  # past the limit and the form's allowance
    with pytest.raises(anthropic.APIStatusError, match="files: larger than") as caught:
        client.beta.skills.create(files=[*skill_files(name), (f"{name}/a", big)])
    assert caught.value.status_code == 413
    with pytest.raises(anthropic.BadRequestError, match="files"):
        client.beta.skills.create(files=[])


def test_bad_display_names_and_ids(client: anthropic.Anthropic) -> None:
    for bad in ("two\nlines", "x" * 256, " "):
        with pytest.raises(anthropic.BadRequestError, match="display_name"):
            client.beta.skills.create(files=skill_files(_name()), display_name=bad)
    skill = client.beta.skills.create(files=skill_files(_name()))
    with pytest.raises(anthropic.BadRequestError, match="version"):
        client.beta.skills.versions.retrieve("v1", skill_id=skill.id)
    with pytest.raises(anthropic.NotFoundError):
        client.beta.skills.versions.retrieve("123", skill_id=skill.id)


def test_other_workspaces_see_404(server_on_each_store: ServerProcess) -> None:
    server = server_on_each_store
    assert server.first_key
    other_key = server.create_key(new_workspace=f"other-{uuid.uuid4().hex[:6]}")
    name = _name()
    with (
        make_client(server.url, server.first_key) as mine,
        make_client(server.url, other_key) as theirs,
    ):
        skill = mine.beta.skills.create(files=skill_files(name))
        version = skill.latest_version_id
        for call in (
            lambda: theirs.beta.skills.retrieve(skill.id),
            lambda: theirs.beta.skills.delete(skill.id),
            lambda: theirs.beta.skills.versions.list(skill.id),
            lambda: theirs.beta.skills.versions.retrieve(version, skill_id=skill.id),
            lambda: theirs.beta.skills.versions.download(version, skill_id=skill.id),
            lambda: theirs.beta.skills.versions.delete(version, skill_id=skill.id),
            lambda: theirs.beta.skills.versions.create(skill.id, files=skill_files(name)),
        ):
            with pytest.raises(anthropic.NotFoundError):
                call()
        assert skill.id not in {s.id for s in theirs.beta.skills.list(limit=1000)}
        # Names are per workspace: the other one may use the same.
        assert theirs.beta.skills.create(files=skill_files(name)).id != skill.id
        assert mine.beta.skills.retrieve(skill.id) == skill


def test_skill_zips_stay_out_of_the_files_api(client: anthropic.Anthropic) -> None:
    skill = client.beta.skills.create(files=skill_files(_name()))
    listed = {f.filename for f in client.beta.files.list(limit=1000)}
    assert not any(name.startswith("skill-") and name.endswith(".zip") for name in listed)
    assert skill.id


def test_concurrent_creates_of_one_name_make_one_skill(
    server_on_each_store: ServerProcess,
) -> None:
    assert server_on_each_store.first_key
    name = _name()

    def create(_: int) -> str:
        with make_client(server_on_each_store.url, server_on_each_store.first_key) as sdk:  # type: ignore[arg-type]
            try:
                return sdk.beta.skills.create(files=skill_files(name)).id
            except anthropic.ConflictError:
                return "409"

    with ThreadPoolExecutor(max_workers=4) as pool:
        results = list(pool.map(create, range(4)))
    made = [r for r in results if r != "409"]
    assert len(made) == 1 and results.count("409") == 3
    with make_client(server_on_each_store.url, server_on_each_store.first_key) as sdk:
        assert [v.name for v in sdk.beta.skills.versions.list(made[0])] == [name]
