"""The sandbox host touches workspaces with the sandbox user's rights: a path
the sandbox swapped after it was checked (a race it won) reaches nothing that
user could not, and other threads keep root's rights meanwhile."""

from __future__ import annotations

import os
import shutil
import tempfile
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from stead.sandbox import FileError
from stead.sandbox.local import files, search
from stead.sandbox.local.actas import acting_as
from stead.sandbox.local.paths import WorkspacePaths

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="acting as another user needs root")

UID = 2_999_123


@dataclass(frozen=True, slots=True)
class RacedPaths(WorkspacePaths):
    """Resolves every path to ``escape``: as if the sandbox swapped a directory
    for a symlink between the check and the use, and won."""

    escape: Path = Path("/")

    def resolve(self, path: str) -> Path:
        return self.escape


@pytest.fixture
def root_only(workspace: Path) -> Path:
    """A host file only root may read or write, in a directory anyone may search
    and only root may change."""
    private = workspace.parent / "private"
    private.mkdir(mode=0o755)
    secret = private / "secret"
    secret.write_bytes(b"root's secret\n")
    secret.chmod(0o600)
    return secret


@pytest.fixture
def workspace() -> Iterator[Path]:
    """Where the sandbox user can reach it, as the host's work directory is
    (pytest's own temporary directories are root's alone)."""
    base = Path(tempfile.mkdtemp(prefix="stead-actas-", dir="/tmp"))
    os.chmod(base, 0o711)
    directory = base / "workspace"
    directory.mkdir()
    os.chown(directory, UID, UID)
    yield directory
    shutil.rmtree(base)


def test_a_thread_acting_as_a_user_loses_roots_rights_and_gets_them_back(
    root_only: Path,
) -> None:
    with acting_as(UID), pytest.raises(PermissionError):
        root_only.read_bytes()
    assert root_only.read_bytes() == b"root's secret\n"


def test_other_threads_keep_roots_rights_meanwhile(root_only: Path) -> None:
    inside, leave = threading.Event(), threading.Event()
    outcome: list[BaseException | bytes] = []

    def act() -> None:
        with acting_as(UID):
            inside.set()
            leave.wait(10)
            try:
                outcome.append(root_only.read_bytes())
            except OSError as exc:
                outcome.append(exc)

    thread = threading.Thread(target=act)
    thread.start()
    try:
        assert inside.wait(10)
        assert root_only.read_bytes() == b"root's secret\n"
    finally:
        leave.set()
        thread.join(10)
    assert isinstance(outcome[0], PermissionError)


def test_a_raced_read_or_write_reaches_no_root_file(root_only: Path, workspace: Path) -> None:
    raced = RacedPaths(workspace, "/workspace", uid=UID, escape=root_only)
    with pytest.raises(FileError):
        files.read_file(raced, "innocent.txt", 1000)
    with pytest.raises(FileError):
        files.write_file(raced, "innocent.txt", b"overwritten")
    with pytest.raises(FileError):
        files.read_lines(raced, "innocent.txt", 1, 0, 1000)
    assert root_only.read_bytes() == b"root's secret\n"
    planted = RacedPaths(workspace, "/workspace", uid=UID, escape=root_only.parent / "planted")
    with pytest.raises(FileError):
        files.write_file(planted, "innocent.txt", b"planted")
    assert not (root_only.parent / "planted").exists()


def test_a_directory_swapped_for_a_symlink_after_the_check_fails_the_open(
    root_only: Path, workspace: Path
) -> None:
    # As resolve() saw it: a plain directory "d". Then the sandbox swapped it.
    (workspace / "d").symlink_to(root_only.parent)
    raced = RacedPaths(workspace, "/workspace", escape=workspace / "d" / root_only.name)
    below = RacedPaths(workspace, "/workspace", escape=workspace / "d" / "new" / "file")
    listed = RacedPaths(workspace, "/workspace", escape=workspace / "d")
    for operation in (
        lambda: files.list_dir(listed, "d"),
        lambda: files.read_file(raced, "d/secret", 1000),
        lambda: files.write_file(raced, "d/secret", b"overwritten"),
        lambda: files.stat_path(raced, "d/secret"),
        lambda: files.write_file(below, "d/new/file", b"planted"),
    ):
        with pytest.raises(FileError, match="symbolic links"):
            operation()  # as root, too: the open itself refuses the detour
    assert root_only.read_bytes() == b"root's secret\n"
    assert sorted(p.name for p in root_only.parent.iterdir()) == ["secret"]


def test_what_the_host_writes_belongs_to_the_sandbox_user(workspace: Path) -> None:
    paths = WorkspacePaths.open(workspace, "/workspace", uid=UID)
    files.write_file(paths, "deep/er/file.txt", b"data")
    for made in ("deep", "deep/er", "deep/er/file.txt"):
        info = os.lstat(workspace / made)
        assert (info.st_uid, info.st_gid) == (UID, UID), made


@pytest.mark.anyio
async def test_search_walks_with_the_sandbox_users_rights(workspace: Path) -> None:
    (workspace / "visible.txt").write_text("needle in the open\n")
    os.chown(workspace / "visible.txt", UID, UID)
    hidden = workspace / "hidden.txt"  # root's, as a file reached through a swap would be
    hidden.write_text("needle kept from the sandbox\n")
    hidden.chmod(0o600)
    paths = WorkspacePaths.open(workspace, "/workspace", uid=UID)
    found = await search.grep(paths, "needle", None)
    assert [line.split(":", 1)[0] for line in found.lines] == ["/workspace/visible.txt"]


def test_a_listing_shows_entries_as_they_are_by_name(workspace: Path) -> None:
    paths = WorkspacePaths.open(workspace, "/workspace", uid=UID)
    files.write_file(paths, "b.txt", b"12345")
    files.write_file(paths, "sub/inner.txt", b"")
    (workspace / "a-link").symlink_to("/etc/shadow")  # listed, never followed
    os.mkfifo(workspace / "pipe")
    listing = files.list_dir(paths, "/workspace")
    assert listing.path == "/workspace" and listing.total == 4
    assert [(e.name, e.kind.value) for e in listing.entries] == [
        ("a-link", "symlink"),
        ("b.txt", "file"),
        ("pipe", "other"),
        ("sub", "directory"),
    ]
    assert listing.entries[1].size == 5
    assert files.list_dir(paths, "sub").path == "/workspace/sub"
    capped = files.list_dir(paths, ".", limit=2)
    assert ([e.name for e in capped.entries], capped.total) == (["a-link", "b.txt"], 4)
    with pytest.raises(FileError, match="not a directory"):
        files.list_dir(paths, "b.txt")
    with pytest.raises(FileError, match="no such file"):
        files.list_dir(paths, "missing")
