"""glob and grep of the unsafe_local sandbox, and the doublestar translation."""

from __future__ import annotations

import os
import re
import time
from pathlib import Path

import pytest

from stead.sandbox import (
    GLOB_RESULT_LIMIT,
    GREP_MAX_LINE_LENGTH,
    GREP_OUTPUT_LIMIT,
    FileError,
    InvalidArgument,
    PathOutsideWorkspace,
)
from stead.sandbox.local import search
from stead.sandbox.local.sandbox import UnsafeLocalSandbox
from stead.sandbox.local.walker import translate

pytestmark = pytest.mark.anyio


@pytest.fixture
def workspace(sandbox: UnsafeLocalSandbox) -> Path:
    root = Path(sandbox.workspace_path)
    root.mkdir()
    return root


def make(root: Path, relative: str, text: str = "", mtime: float | None = None) -> Path:
    path = root / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    if mtime is not None:
        os.utime(path, (mtime, mtime))
    return path


@pytest.mark.parametrize(
    ("pattern", "matches", "misses"),
    [
        ("*.py", ["a.py", ".hidden.py"], ["d/a.py", "a.pyc"]),
        ("**/*.py", ["a.py", "d/a.py", "d/e/a.py"], ["a.pyc"]),
        ("d/**", ["d/a", "d/e/f"], ["d", "x/d/a"]),
        ("d/**/f", ["d/f", "d/e/f", "d/e/g/f"], ["d/e/fx"]),
        ("?.{py,md}", ["a.py", "b.md"], ["ab.py", "a.txt"]),
        ("[ab].txt", ["a.txt", "b.txt"], ["c.txt"]),
        ("[!ab].txt", ["c.txt"], ["a.txt", "/.txt"]),
        ("lit\\*.txt", ["lit*.txt"], ["litx.txt"]),
        ("{src,test}/**/*.{js,ts}", ["src/a.js", "test/x/y.ts"], ["lib/a.js"]),
        ("[oops", ["[oops"], ["o"]),
    ],
)
def test_doublestar_translation(pattern: str, matches: list[str], misses: list[str]) -> None:
    compiled = re.compile(translate(pattern), re.DOTALL)
    for path in matches:
        assert compiled.fullmatch(path), f"{pattern} should match {path}"
    for path in misses:
        assert not compiled.fullmatch(path), f"{pattern} should not match {path}"


async def test_glob_lists_newest_first(sandbox: UnsafeLocalSandbox, workspace: Path) -> None:
    make(workspace, "old.py", mtime=1_000)
    make(workspace, "pkg/new.py", mtime=3_000)
    make(workspace, "pkg/mid.py", mtime=2_000)
    make(workspace, "pkg/skip.txt", mtime=4_000)
    found = await sandbox.glob("**/*.py")
    assert found.paths == tuple(f"{workspace}/{p}" for p in ("pkg/new.py", "pkg/mid.py", "old.py"))
    assert found.total == 3 and not found.walk_limit_hit and not found.timed_out
    under = await sandbox.glob("*.py", "/workspace/pkg")
    assert under.paths == (f"{workspace}/pkg/new.py", f"{workspace}/pkg/mid.py")


async def test_glob_caps_the_list_and_counts_the_rest(
    sandbox: UnsafeLocalSandbox, workspace: Path
) -> None:
    for i in range(GLOB_RESULT_LIMIT + 5):
        make(workspace, f"f{i:03}.txt", mtime=10_000 + i)
    found = await sandbox.glob("*.txt")
    assert len(found.paths) == GLOB_RESULT_LIMIT and found.total == GLOB_RESULT_LIMIT + 5
    assert found.paths[0].endswith("f204.txt") and found.paths[-1].endswith("f005.txt")


async def test_glob_stays_inside_the_workspace(
    sandbox: UnsafeLocalSandbox, workspace: Path, tmp_path: Path
) -> None:
    make(tmp_path, "outside/secret.py")
    (workspace / "out").symlink_to(tmp_path / "outside")
    (workspace / "leak.py").symlink_to(tmp_path / "outside" / "secret.py")
    make(workspace, "real.py")
    found = await sandbox.glob("**/*.py")
    assert found.paths == (f"{workspace}/real.py",)
    for bad in ("/etc/*", "../*", "a/../../*", ""):
        with pytest.raises(InvalidArgument):
            await sandbox.glob(bad)
    with pytest.raises(PathOutsideWorkspace):
        await sandbox.glob("*", "out")
    with pytest.raises(FileError, match="not a directory"):
        await sandbox.glob("*", "real.py")


async def test_grep_prints_path_line_text(sandbox: UnsafeLocalSandbox, workspace: Path) -> None:
    make(workspace, "b.py", "import os\nx = 1\nimport re\n")
    make(workspace, "a/c.py", "nothing\nimport sys\n")
    make(workspace, ".git/config", "import git\n")
    make(workspace, "node_modules/m.js", "import m\n")
    (workspace / "bin.dat").write_bytes(b"\x00\x01import binary\n")
    found = await sandbox.grep(r"^import \w+")
    assert found.lines == (
        f"{workspace}/a/c.py:2:import sys",
        f"{workspace}/b.py:1:import os",
        f"{workspace}/b.py:3:import re",
    )
    assert not found.truncated
    single = await sandbox.grep("x =", "b.py")
    assert single.lines == (f"{workspace}/b.py:2:x = 1",)
    assert (await sandbox.grep("absent")).lines == ()


async def test_grep_caps_output_and_long_lines(
    sandbox: UnsafeLocalSandbox, workspace: Path
) -> None:
    make(workspace, "long.txt", "match " + "y" * 5_000 + "\n")
    make(workspace, "many.txt", "".join(f"match {i}\n" for i in range(30_000)))
    found = await sandbox.grep("match", "long.txt")
    [line] = found.lines
    assert line.endswith(" [line truncated]")
    assert len(line.split(":", 2)[2]) == GREP_MAX_LINE_LENGTH + len(" [line truncated]")
    many = await sandbox.grep("match", "many.txt")
    assert many.truncated
    assert sum(len(line) + 1 for line in many.lines) <= GREP_OUTPUT_LIMIT
    assert many.lines[0].endswith("many.txt:1:match 0")


async def test_grep_refuses_bad_patterns_and_paths(
    sandbox: UnsafeLocalSandbox, workspace: Path, tmp_path: Path
) -> None:
    make(tmp_path, "outside/secret.txt", "secret\n")
    (workspace / "link.txt").symlink_to(tmp_path / "outside" / "secret.txt")
    assert (await sandbox.grep("secret")).lines == ()  # symlinked files are not read
    with pytest.raises(InvalidArgument, match="invalid regex"):
        await sandbox.grep("(unclosed")
    with pytest.raises(PathOutsideWorkspace):
        await sandbox.grep("x", "../outside")
    with pytest.raises(FileError, match="no such file"):
        await sandbox.grep("x", "missing")


async def test_searches_stop_at_their_budgets(
    sandbox: UnsafeLocalSandbox, workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for i in range(10):
        make(workspace, f"d{i}/f.txt", "hit\n")
    monkeypatch.setattr(search, "WALK_ENTRY_LIMIT", 5)
    walked = await sandbox.grep("hit")
    assert walked.walk_limit_hit and 0 < len(walked.lines) < 10
    assert (await sandbox.glob("**")).walk_limit_hit
    monkeypatch.setattr(search, "SEARCH_SECONDS", 0.0)
    assert (await sandbox.grep("hit")).timed_out


async def test_searches_do_not_spend_their_budget_where_nothing_can_match(
    sandbox: UnsafeLocalSandbox, workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A large dependency tree that sorts first (``.venv``, ``node_modules``)
    hid the project's own files from a pattern that cannot reach into it."""
    for i in range(12):
        make(workspace, f".venv/lib/m{i}.py", "needle\n")
        make(workspace, f"node_modules/p{i}/index.js", "needle\n")
    make(workspace, "package.json", "{}\n")
    make(workspace, "src/app/main.py", "needle\n")
    monkeypatch.setattr(search, "WALK_ENTRY_LIMIT", 8)
    assert (await sandbox.glob("package.json")).paths == (f"{workspace}/package.json",)
    assert (await sandbox.glob("src/*/*.py")).paths == (f"{workspace}/src/app/main.py",)
    assert (await sandbox.glob("src/**/*.py")).paths == (f"{workspace}/src/app/main.py",)
    assert (await sandbox.grep("needle")).lines == (f"{workspace}/src/app/main.py:1:needle",)
    # An escaped or bracketed name is matched as glob reads it, not compared as
    # spelled (such a pattern is walked unpruned: here, with room for it).
    make(workspace, "foo.bar/x.conf", "")
    monkeypatch.setattr(search, "WALK_ENTRY_LIMIT", 1000)
    assert (await sandbox.glob("foo\\.bar/*.conf")).paths == (f"{workspace}/foo.bar/x.conf",)
    assert (await sandbox.glob("[f]oo.bar/*.conf")).paths == (f"{workspace}/foo.bar/x.conf",)
    monkeypatch.setattr(search, "WALK_ENTRY_LIMIT", 8)
    # Where the pattern does reach, it still walks: **/*.py goes everywhere.
    assert (await sandbox.glob("**/*.py")).walk_limit_hit


async def test_a_runaway_regex_is_killed_at_the_deadline(
    sandbox: UnsafeLocalSandbox, workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    make(workspace, "a.txt", "fine\n")
    make(workspace, "b.txt", "a" * 40 + "!\n")  # (a+)+$ backtracks for hours on this line
    monkeypatch.setattr(search, "SEARCH_SECONDS", 0.5)
    monkeypatch.setattr(search, "KILL_GRACE", 0.2)
    started = time.monotonic()
    found = await sandbox.grep(r"(fine|(a+)+$)")
    assert time.monotonic() - started < 5
    assert found.timed_out and found.lines == (f"{workspace}/a.txt:1:fine",)
