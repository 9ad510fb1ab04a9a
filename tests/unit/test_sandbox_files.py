"""File primitives of the unsafe_local sandbox: confinement, reads, writes."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from stead.sandbox import (
    FileError,
    FileKind,
    FileNotFound,
    FileTooLarge,
    InvalidArgument,
    NotARegularFile,
    PathOutsideWorkspace,
    RangeTooLarge,
)
from stead.sandbox.local.sandbox import UnsafeLocalSandbox

pytestmark = pytest.mark.anyio


@pytest.fixture
async def sandbox(tmp_path: Path) -> AsyncIterator[UnsafeLocalSandbox]:
    async with UnsafeLocalSandbox(tmp_path / "ws", tmp_path / "state") as opened:
        await opened.write_file("notes.txt", b"one\ntwo\nthree\n")
        yield opened


@pytest.fixture
def workspace(sandbox: UnsafeLocalSandbox) -> Path:
    return Path(sandbox.workspace_path)


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    secret = tmp_path / "outside" / "secret.txt"
    secret.parent.mkdir()
    secret.write_text("secret")
    return secret


async def test_the_three_spellings_of_a_workspace_path(
    sandbox: UnsafeLocalSandbox, workspace: Path
) -> None:
    for path in (
        "notes.txt",
        "./sub/../notes.txt",
        "/workspace/notes.txt",
        f"{workspace}/notes.txt",
    ):
        assert await sandbox.read_file(path, max_bytes=100) == b"one\ntwo\nthree\n", path


@pytest.mark.parametrize(
    "path", ["../outside/secret.txt", "a/../../x", "/workspace/../etc/passwd", "/etc/passwd", "/"]
)
async def test_paths_outside_the_workspace_are_refused(
    sandbox: UnsafeLocalSandbox, path: str
) -> None:
    with pytest.raises(PathOutsideWorkspace) as caught:
        await sandbox.read_file(path, max_bytes=100)
    assert path in str(caught.value)
    with pytest.raises(PathOutsideWorkspace):
        await sandbox.write_file(path, b"x")


async def test_symlinks_that_lead_out_are_refused(
    sandbox: UnsafeLocalSandbox, workspace: Path, outside: Path
) -> None:
    (workspace / "file_link").symlink_to(outside)
    (workspace / "dir_link").symlink_to(outside.parent)
    (workspace / "hop").symlink_to("dir_link/../outside")  # relative, through another link
    (workspace / "dangling").symlink_to(outside.parent / "new.txt")
    for path in ("file_link", "dir_link/secret.txt", "hop/secret.txt"):
        with pytest.raises(PathOutsideWorkspace):
            await sandbox.read_file(path, max_bytes=100)
    with pytest.raises(PathOutsideWorkspace):
        await sandbox.write_file("dangling", b"escaped")
    with pytest.raises(PathOutsideWorkspace):
        await sandbox.write_file("dir_link/made/new.txt", b"escaped")
    assert sorted(p.name for p in outside.parent.iterdir()) == ["secret.txt"]


async def test_symlinks_inside_the_workspace_are_followed(
    sandbox: UnsafeLocalSandbox, workspace: Path
) -> None:
    (workspace / "alias.txt").symlink_to("notes.txt")
    (workspace / "d").mkdir()
    (workspace / "d" / "up").symlink_to("..")
    assert await sandbox.read_file("alias.txt", max_bytes=100) == b"one\ntwo\nthree\n"
    assert await sandbox.read_file("d/up/d/up/notes.txt", max_bytes=100) == b"one\ntwo\nthree\n"
    await sandbox.write_file("alias.txt", b"through the link\n")
    assert (workspace / "notes.txt").read_text() == "through the link\n"


async def test_symlink_loops_and_bad_paths_are_errors(
    sandbox: UnsafeLocalSandbox, workspace: Path
) -> None:
    (workspace / "loop").symlink_to("loop")
    with pytest.raises(FileError, match="too many levels of symbolic links"):
        await sandbox.read_file("loop", max_bytes=100)
    with pytest.raises(FileError, match="not a directory"):
        await sandbox.read_file("notes.txt/inner", max_bytes=100)
    with pytest.raises(InvalidArgument):
        await sandbox.read_file("a\x00b", max_bytes=100)
    with pytest.raises(FileNotFound):
        await sandbox.read_file("missing.txt", max_bytes=100)


async def test_read_refuses_files_over_the_limit_with_their_size(
    sandbox: UnsafeLocalSandbox,
) -> None:
    await sandbox.write_file("big.txt", b"x" * 1000)
    with pytest.raises(FileTooLarge) as caught:
        await sandbox.read_file("big.txt", max_bytes=999)
    assert (caught.value.size, caught.value.limit) == (1000, 999)
    assert len(await sandbox.read_file("big.txt", max_bytes=1000)) == 1000


async def test_non_regular_files_are_refused_without_blocking(
    sandbox: UnsafeLocalSandbox, workspace: Path
) -> None:
    os.mkfifo(workspace / "pipe")
    (workspace / "dir").mkdir()
    for path in ("pipe", "dir"):
        with pytest.raises(NotARegularFile):
            await sandbox.read_file(path, max_bytes=100)
        with pytest.raises(NotARegularFile):
            await sandbox.read_lines(path, 1, 2, max_bytes=100)
    with pytest.raises(NotARegularFile):
        await sandbox.write_file("pipe", b"x")
    with pytest.raises(FileError, match="is a directory"):
        await sandbox.write_file("dir", b"x")


@pytest.mark.parametrize(
    ("start", "end", "expected"),
    [
        (1, 1, b"one\n"),
        (2, 3, b"two\nthree\n"),
        (2, 0, b"two\nthree\n"),
        (2, -1, b"two\nthree\n"),
        (0, 1, b"one\n"),
        (3, 99, b"three\n"),
        (4, 9, b""),
        (3, 2, b""),
    ],
)
async def test_read_lines_selects_a_range(
    sandbox: UnsafeLocalSandbox, start: int, end: int, expected: bytes
) -> None:
    assert await sandbox.read_lines("notes.txt", start, end, max_bytes=100) == expected


async def test_read_lines_streams_big_files_and_caps_the_range(
    sandbox: UnsafeLocalSandbox,
) -> None:
    lines = b"".join(b"%06d\n" % i for i in range(200_000))  # 1.4 MB
    await sandbox.write_file("big.txt", lines + b"tail without newline")
    assert await sandbox.read_lines("big.txt", 100_000, 100_001, max_bytes=100) == (
        b"099999\n100000\n"
    )
    assert await sandbox.read_lines("big.txt", 200_001, 0, max_bytes=100) == (
        b"tail without newline"
    )
    with pytest.raises(RangeTooLarge) as caught:
        await sandbox.read_lines("big.txt", 1, 0, max_bytes=1000)
    assert (caught.value.start, caught.value.end, caught.value.limit) == (1, 0, 1000)


async def test_write_creates_parents_and_replaces_contents(
    sandbox: UnsafeLocalSandbox, workspace: Path
) -> None:
    await sandbox.write_file("a/b/c.txt", b"first version, long")
    await sandbox.write_file("/workspace/a/b/c.txt", b"second")
    assert (workspace / "a" / "b" / "c.txt").read_bytes() == b"second"
    info = await sandbox.stat("a/b/c.txt")
    assert (info.kind, info.size, info.path) == (FileKind.FILE, 6, f"{workspace}/a/b/c.txt")
    assert (await sandbox.stat("a")).kind is FileKind.DIRECTORY
    with pytest.raises(FileNotFound):
        await sandbox.stat("nope")
