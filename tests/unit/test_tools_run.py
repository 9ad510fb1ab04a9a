"""The built-in toolset run against a real unsafe_local sandbox: what the model sees."""

from __future__ import annotations

import base64
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from stead.sandbox import ExecResult, SandboxUnavailable
from stead.sandbox.local.sandbox import UnsafeLocalSandbox
from stead.tools import READ_MAX_BYTES, ToolOutcome, bash_outcome, run_tool

pytestmark = pytest.mark.anyio


@pytest.fixture
async def sandbox(tmp_path: Path) -> AsyncIterator[UnsafeLocalSandbox]:
    async with UnsafeLocalSandbox(tmp_path / "ws", tmp_path / "state") as opened:
        await opened.write_file("src/app.py", b"def main():\n    return 1\n\nmain()\n")
        yield opened


async def call(
    sandbox: UnsafeLocalSandbox, name: str, op_key: str = "op", **input: Any
) -> ToolOutcome:
    return await run_tool(name, input, sandbox, op_key=op_key)


def text(outcome: ToolOutcome) -> str:
    [block] = outcome.content
    assert block["type"] == "text" and block["text"]
    return str(block["text"])


async def test_bash_output_exit_codes_and_errors(sandbox: UnsafeLocalSandbox) -> None:
    ok = await call(sandbox, "bash", command="printf '\\033[31mred\\033[0m\\n'")
    assert (text(ok), ok.is_error) == ("red", False)
    failed = await call(sandbox, "bash", "op2", command="echo oops >&2; (exit 3)")
    assert failed.is_error and text(failed) == "oops\n[exit code 3]"
    quiet = await call(sandbox, "bash", "op3", command="true")
    assert (text(quiet), quiet.is_error) == ("(no output)", False)
    missing = await call(sandbox, "bash", "op4")
    assert missing.is_error and text(missing) == "bash: command is required"


async def test_bash_timeout_truncation_and_restart(sandbox: UnsafeLocalSandbox) -> None:
    slow = await call(sandbox, "bash", "a", command="echo before; sleep 30", timeout_ms=300)
    assert slow.is_error
    assert text(slow).startswith("before\n[command timed out after 0.3 s and was killed;")
    big = await call(sandbox, "bash", "b", command="seq 1 100000")
    assert not big.is_error
    assert text(big).startswith("[output truncated: showing the last 102400 bytes]\n")
    assert text(big).endswith("\n100000")
    await call(sandbox, "bash", "c", command="export X=1")
    restarted = await call(sandbox, "bash", restart=True)
    assert text(restarted) == "bash session restarted"
    assert text(await call(sandbox, "bash", "d", command='echo "[$X]"')) == "[]"
    # Any integer is valid input: one past any float is the longest timeout.
    huge = await call(sandbox, "bash", "e", command="echo fine", timeout_ms=10**400)
    assert (text(huge), huge.is_error) == ("fine", False)


async def test_bash_with_a_finished_op_key_returns_the_recorded_result(
    sandbox: UnsafeLocalSandbox,
) -> None:
    first = await call(sandbox, "bash", "same", command="echo x >> count; wc -l < count")
    again = await call(sandbox, "bash", "same", command="echo x >> count; wc -l < count")
    assert first == again and text(first) == "1"


async def test_bash_cancellation_propagates(sandbox: UnsafeLocalSandbox) -> None:
    outcomes = []
    with anyio.move_on_after(0.3) as scope:
        outcomes.append(await call(sandbox, "bash", command="sleep 30"))
    assert scope.cancelled_caught and outcomes == []


async def test_read_whole_ranges_and_limits(sandbox: UnsafeLocalSandbox) -> None:
    assert text(await call(sandbox, "read", file_path="src/app.py")) == (
        "def main():\n    return 1\n\nmain()\n"
    )
    assert text(await call(sandbox, "read", file_path="src/app.py", view_range=[2, 3])) == (
        "    return 1\n"
    )
    assert text(await call(sandbox, "read", file_path="src/app.py", view_range=[4, -1])) == (
        "main()\n"
    )
    beyond = await call(sandbox, "read", file_path="src/app.py", view_range=[9, 10])
    assert text(beyond) == "(no lines in view_range [9, 10])" and not beyond.is_error
    await sandbox.write_file("big.txt", b"line\n" * (READ_MAX_BYTES // 5 + 1))
    big = await call(sandbox, "read", file_path="big.txt")
    assert big.is_error and "exceeds 262144-byte limit" in text(big)
    assert "view_range" in text(big)
    assert text(await call(sandbox, "read", file_path="big.txt", view_range=[1, 2])) == (
        "line\nline"
    )
    await sandbox.write_file("empty.txt", b"")
    assert text(await call(sandbox, "read", file_path="empty.txt")) == "(empty file)"
    await sandbox.write_file("blob.bin", b"\xff\xfe\x00")
    binary = await call(sandbox, "read", file_path="blob.bin")
    assert binary.is_error and "not valid UTF-8" in text(binary)


async def test_read_returns_images_and_pdfs_as_blocks(sandbox: UnsafeLocalSandbox) -> None:
    png = b"\x89PNG\r\n\x1a\n" + b"\x00" * 16
    await sandbox.write_file("pic.PNG", png)
    await sandbox.write_file("doc.pdf", b"%PDF-1.4\n")
    [image] = (await call(sandbox, "read", file_path="pic.PNG")).content
    assert image == {
        "type": "image",
        "source": {
            "type": "base64",
            "media_type": "image/png",
            "data": base64.b64encode(png).decode(),
        },
    }
    [document] = (await call(sandbox, "read", file_path="doc.pdf")).content
    assert document["type"] == "document"
    assert document["source"]["media_type"] == "application/pdf"
    ranged = await call(sandbox, "read", file_path="pic.PNG", view_range=[1, 2])
    assert ranged.is_error
    # Typed by the bytes: a PNG named .jpg is a PNG; what is no image is refused,
    # never sent as one (the Messages API would refuse every later request).
    await sandbox.write_file("named.jpg", png)
    [named] = (await call(sandbox, "read", file_path="named.jpg")).content
    assert named["source"]["media_type"] == "image/png"
    for name, data in (("empty.png", b""), ("text.png", b"not an image")):
        await sandbox.write_file(name, data)
        refused = await call(sandbox, "read", file_path=name)
        assert refused.is_error and "not a PNG, JPEG, GIF, WebP or PDF" in text(refused)


async def test_write_then_edit(sandbox: UnsafeLocalSandbox) -> None:
    for root in (".", "/workspace", "sub/.."):
        refused = await call(sandbox, "write", file_path=root, content="x")
        assert refused.is_error and text(refused) == f"write: {root}: is a directory"
    wrote = await call(sandbox, "write", file_path="new/dir/f.txt", content="héllo hello\n")
    assert text(wrote) == "wrote 13 bytes to new/dir/f.txt"
    twice = await call(sandbox, "edit", file_path="new/dir/f.txt", old_string="llo", new_string="y")
    assert twice.is_error and "appears 2 times" in text(twice)
    all_of_them = await call(
        sandbox,
        "edit",
        file_path="new/dir/f.txt",
        old_string="llo",
        new_string="y",
        replace_all=True,
    )
    assert text(all_of_them) == "edited new/dir/f.txt (2 replacement(s))"
    once = await call(sandbox, "edit", file_path="new/dir/f.txt", old_string="hé", new_string="a")
    assert text(once) == "edited new/dir/f.txt (1 replacement(s))"
    assert await sandbox.read_file("new/dir/f.txt", max_bytes=100) == b"ay hey\n"
    absent = await call(sandbox, "edit", file_path="new/dir/f.txt", old_string="zz", new_string="")
    assert absent.is_error and text(absent) == "edit: old_string not found in new/dir/f.txt"
    empty = await call(sandbox, "edit", file_path="new/dir/f.txt", old_string="", new_string="x")
    assert empty.is_error
    nofile = await call(sandbox, "edit", file_path="nope.txt", old_string="a", new_string="b")
    assert text(nofile) == "edit: nope.txt: no such file or directory"


async def test_glob_and_grep_text(sandbox: UnsafeLocalSandbox) -> None:
    root = sandbox.workspace_path
    assert text(await call(sandbox, "glob", pattern="**/*.py")) == f"{root}/src/app.py"
    assert text(await call(sandbox, "glob", pattern="*.rs")) == "no matches"
    for i in range(205):
        await sandbox.write_file(f"many/{i}.txt", b"")
    capped = text(await call(sandbox, "glob", pattern="many/*.txt"))
    assert capped.endswith("\n[showing the 200 newest of 205 matches]")
    assert text(await call(sandbox, "grep", pattern=r"return \d")) == (
        f"{root}/src/app.py:2:    return 1"
    )
    assert text(await call(sandbox, "grep", pattern="zzz", path="src")) == "no matches"
    await sandbox.write_file("many.txt", b"hit\n" * 40_000)
    truncated = text(await call(sandbox, "grep", pattern="hit", path="many.txt"))
    assert truncated.endswith("\n[output truncated at 102400 bytes]")
    bad = await call(sandbox, "grep", pattern="(")
    assert bad.is_error and text(bad).startswith("grep: invalid regex:")


async def test_sandbox_errors_become_tool_errors(sandbox: UnsafeLocalSandbox) -> None:
    outside = await call(sandbox, "read", file_path="../../etc/passwd")
    assert outside.is_error
    assert text(outside) == "read: path '../../etc/passwd' is outside the workspace"
    escaped = await call(sandbox, "write", file_path="/etc/stead-test", content="x")
    assert escaped.is_error and "outside the workspace" in text(escaped)
    absolute = await call(sandbox, "glob", pattern="/etc/*")
    assert absolute.is_error and "absolute pattern" in text(absolute)


async def test_a_closed_sandbox_is_not_the_models_problem(sandbox: UnsafeLocalSandbox) -> None:
    await sandbox.close()
    with pytest.raises(SandboxUnavailable):
        await call(sandbox, "read", file_path="src/app.py")


def test_bash_outcome_of_a_reattached_result() -> None:
    timed_out = bash_outcome(ExecResult("partial\n", None, timed_out=True))
    assert timed_out.is_error and text(timed_out).startswith("partial\n[command timed out and")
    interrupted = bash_outcome(ExecResult("", None, interrupted=True))
    assert interrupted.is_error and "interrupted" in text(interrupted)
    exited = bash_outcome(ExecResult("", 0, shell_exited=True))
    assert not exited.is_error and "shell exited with code 0" in text(exited)
