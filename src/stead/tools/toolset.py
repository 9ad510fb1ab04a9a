"""Runs the built-in tools (bash, read, write, edit, glob, grep) over a ``Sandbox``.

``run_tool`` never raises for anything the model can fix: bad input and
``SandboxError``s become ``is_error`` outcomes whose text says what went wrong.
It does raise ``SandboxUnavailable`` (the sandbox is down: the run failed, the
model did nothing wrong) and ``WorkspaceUnavailable`` (the saved workspace is
lost: nothing the model does can bring it back), and lets cancellation through
untouched.
"""

from __future__ import annotations

import base64
import re
from collections.abc import Awaitable, Callable
from typing import Any

from stead.media_types import IMAGE_MAX_PIXELS, by_signature, image_size
from stead.sandbox import (
    EXEC_OUTPUT_LIMIT,
    GREP_OUTPUT_LIMIT,
    SEARCH_SECONDS,
    WALK_ENTRY_LIMIT,
    ExecResult,
    FileTooLarge,
    RangeTooLarge,
    Sandbox,
    SandboxError,
    SandboxUnavailable,
    WorkspaceUnavailable,
)
from stead.tools.definitions import (
    BASH_DEFAULT_TIMEOUT,
    BASH_MAX_TIMEOUT,
    EDIT_MAX_BYTES,
    IMAGE_MAX_BASE64_BYTES,
    MEDIA_TYPES,
    PDF_MAX_BYTES,
    READ_MAX_BYTES,
)
from stead.tools.inputs import (
    BashInput,
    EditInput,
    InputError,
    ReadInput,
    SearchInput,
    ToolInput,
    WriteInput,
    parse_input,
)
from stead.tools.outcome import ToolOutcome

_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]")
_Runner = Callable[[Any, Sandbox, str], Awaitable[ToolOutcome]]


async def run_tool(name: str, input: object, sandbox: Sandbox, *, op_key: str) -> ToolOutcome:
    """Runs built-in tool ``name`` with the model's ``input``.

    ``op_key`` identifies this call in the op ledger; ``bash`` passes it to
    ``Sandbox.exec``, so a call that already finished returns its recorded
    result instead of running again.
    """
    runner = _RUNNERS.get(name)
    if runner is None:
        return ToolOutcome.error(f"unknown tool {name!r}; built-in tools are {', '.join(_RUNNERS)}")
    try:
        parsed: ToolInput = parse_input(name, input)
        return await runner(parsed, sandbox, op_key)
    except InputError as exc:
        return ToolOutcome.error(str(exc))
    except (SandboxUnavailable, WorkspaceUnavailable):
        raise
    except SandboxError as exc:
        return ToolOutcome.error(f"{name}: {exc}")


async def _bash(call: BashInput, sandbox: Sandbox, op_key: str) -> ToolOutcome:
    if call.restart:
        await sandbox.restart_shell()
        return ToolOutcome.text("bash session restarted")
    if not call.command:
        return ToolOutcome.error("bash: command is required")
    if call.timeout_ms is not None and call.timeout_ms < 0:
        return ToolOutcome.error("bash: timeout_ms must not be negative")
    # Clamped as an integer first: any integer is valid input, and a huge one
    # overflows a float division.
    limit_ms = min(call.timeout_ms, int(BASH_MAX_TIMEOUT * 1000)) if call.timeout_ms else None
    seconds = limit_ms / 1000 if limit_ms else BASH_DEFAULT_TIMEOUT
    result = await sandbox.exec(call.command, op_key=op_key, timeout=seconds)
    return bash_outcome(result, seconds)


def bash_outcome(result: ExecResult, timeout: float | None = None) -> ToolOutcome:
    """What the model sees for an exec result: also for one re-attached by op key
    (``Sandbox.exec_result``), whose ``timeout`` the caller may not know."""
    parts = []
    if result.truncated:
        parts.append(f"[output truncated: showing the last {EXEC_OUTPUT_LIMIT} bytes]")
    output = _ANSI.sub("", result.output).rstrip("\n")
    if output:
        parts.append(output)
    reset = "the shell was restarted, so its working directory and variables are reset"
    if result.timed_out:
        after = f" after {timeout:g} s" if timeout is not None else ""
        parts.append(f"[command timed out{after} and was killed; {reset}]")
    elif result.interrupted:
        parts.append(f"[command was interrupted and killed; {reset}]")
    elif result.shell_exited:
        parts.append(
            f"[the shell exited with code {result.exit_code}; the next command starts a new shell]"
        )
    elif result.exit_code:
        parts.append(f"[exit code {result.exit_code}]")
    failed = result.exit_code != 0  # None: timed out or interrupted
    return ToolOutcome.text("\n".join(parts), is_error=failed)


async def _read(call: ReadInput, sandbox: Sandbox, op_key: str) -> ToolOutcome:
    media_type = MEDIA_TYPES.get(_suffix(call.file_path))
    if media_type is not None:
        return await _read_media(call, sandbox, media_type)
    path = call.file_path
    if call.view_range is not None:
        start, end = call.view_range
        try:
            data = await sandbox.read_lines(path, start, end, max_bytes=READ_MAX_BYTES)
        except RangeTooLarge as exc:
            return ToolOutcome.error(_range_too_large(path, exc))
        if end > 0:
            data = data.removesuffix(b"\n")
        empty = f"(no lines in view_range [{start}, {end}])"
    else:
        try:
            data = await sandbox.read_file(path, max_bytes=READ_MAX_BYTES)
        except FileTooLarge as exc:
            return ToolOutcome.error(
                f"read: {path} is {exc.size} bytes, exceeds {exc.limit}-byte limit. Use the "
                "view_range parameter to read specific line ranges, e.g. view_range: [1, 500]."
            )
        empty = "(empty file)"
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return ToolOutcome.error(
            f"read: {path}: not valid UTF-8 text "
            "(binary files are only supported for image/PDF extensions)"
        )
    return ToolOutcome.text(text or empty)


async def _read_media(call: ReadInput, sandbox: Sandbox, media_type: str) -> ToolOutcome:
    if call.view_range is not None:
        return ToolOutcome.error("read: view_range is not supported for image/PDF files")
    image_limit = IMAGE_MAX_BASE64_BYTES // 4 * 3
    limit = PDF_MAX_BYTES if media_type == "application/pdf" else image_limit
    try:
        data = await sandbox.read_file(call.file_path, max_bytes=limit)
    except FileTooLarge as exc:
        return ToolOutcome.error(
            f"read: {call.file_path} is {exc.size} bytes, "
            f"exceeds {exc.limit}-byte limit for image/PDF files."
        )
    # Typed by its bytes, not its name: a block whose bytes are not what its
    # type says is refused by the Messages API, in this request and every later
    # one of the session, which carries it.
    found = _media_type_of(data)
    if found is None:
        return ToolOutcome.error(
            f"read: {call.file_path} is not a PNG, JPEG, GIF, WebP or PDF file by its content"
        )
    kind = "document" if found == "application/pdf" else "image"
    if kind == "image" and len(data) > image_limit:  # named a PDF, read with a PDF's limit
        return ToolOutcome.error(
            f"read: {call.file_path} is an image of {len(data)} bytes, "
            f"exceeds {image_limit}-byte limit for image files."
        )
    size = image_size(data) if kind == "image" else None
    if size is not None and max(size) > IMAGE_MAX_PIXELS:
        # The same: the Messages API refuses the request, and the next ones.
        return ToolOutcome.error(
            f"read: {call.file_path} is {size[0]}x{size[1]} pixels, exceeds the "
            f"{IMAGE_MAX_PIXELS}-pixel limit on a side for images. Read a scaled-down "
            "copy, or crop it into parts."
        )
    source = {
        "type": "base64",
        "media_type": found,
        "data": base64.standard_b64encode(data).decode("ascii"),
    }
    return ToolOutcome([{"type": kind, "source": source}])


def _media_type_of(data: bytes) -> str | None:
    """The image or PDF type ``data`` is, by its signature."""
    found = by_signature(data)
    if found is None and data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        found = "image/webp"
    return found if found in READABLE_TYPES else None


READABLE_TYPES = frozenset(MEDIA_TYPES.values())


async def _write(call: WriteInput, sandbox: Sandbox, op_key: str) -> ToolOutcome:
    data = call.content.encode("utf-8", errors="replace")
    await sandbox.write_file(call.file_path, data)
    return ToolOutcome.text(f"wrote {len(data)} bytes to {call.file_path}")


async def _edit(call: EditInput, sandbox: Sandbox, op_key: str) -> ToolOutcome:
    path = call.file_path
    if not call.old_string:
        return ToolOutcome.error("edit: old_string must not be empty")
    try:
        text = (await sandbox.read_file(path, max_bytes=EDIT_MAX_BYTES)).decode("utf-8")
    except FileTooLarge as exc:
        return ToolOutcome.error(
            f"edit: {path} is {exc.size} bytes, exceeds {exc.limit}-byte limit. "
            "The edit tool loads the whole file and cannot modify a file this large."
        )
    except UnicodeDecodeError:
        return ToolOutcome.error(f"edit: {path}: not valid UTF-8 text (cannot edit binary files)")
    count = text.count(call.old_string)
    if count == 0:
        return ToolOutcome.error(f"edit: old_string not found in {path}")
    if count > 1 and not call.replace_all:
        return ToolOutcome.error(
            f"edit: old_string appears {count} times in {path} (must be unique; "
            "add surrounding context or set replace_all)"
        )
    updated = text.replace(call.old_string, call.new_string, -1 if call.replace_all else 1)
    await sandbox.write_file(path, updated.encode("utf-8", errors="replace"))
    replaced = count if call.replace_all else 1
    return ToolOutcome.text(f"edited {path} ({replaced} replacement(s))")


async def _glob(call: SearchInput, sandbox: Sandbox, op_key: str) -> ToolOutcome:
    found = await sandbox.glob(call.pattern, call.path)
    lines = list(found.paths) or ["no matches"]
    if found.total > len(found.paths):
        lines.append(f"[showing the {len(found.paths)} newest of {found.total} matches]")
    lines += _search_notes(found.walk_limit_hit, found.timed_out)
    return ToolOutcome.text("\n".join(lines))


async def _grep(call: SearchInput, sandbox: Sandbox, op_key: str) -> ToolOutcome:
    found = await sandbox.grep(call.pattern, call.path)
    lines = list(found.lines) or ["no matches"]
    if found.truncated:
        lines.append(f"[output truncated at {GREP_OUTPUT_LIMIT} bytes]")
    lines += _search_notes(found.walk_limit_hit, found.timed_out)
    return ToolOutcome.text("\n".join(lines))


def _search_notes(walk_limit_hit: bool, timed_out: bool) -> list[str]:
    notes = []
    if walk_limit_hit:
        notes.append(
            f"[search stopped after {WALK_ENTRY_LIMIT} entries; there may be more matches; "
            "narrow the path]"
        )
    if timed_out:
        notes.append(f"[search stopped after {SEARCH_SECONDS:g} s; there may be more matches]")
    return notes


def _range_too_large(path: str, exc: RangeTooLarge) -> str:
    if exc.start == exc.end:
        return (
            f"read: line {exc.start} of {path} alone exceeds {exc.limit}-byte limit. "
            "The read tool cannot return part of a line, so view_range cannot narrow this further."
        )
    return (
        f"read: view_range [{exc.start}, {exc.end}] of {path} exceeds {exc.limit}-byte limit. "
        "Narrow the view_range to read a smaller portion."
    )


def _suffix(path: str) -> str:
    name = path.rsplit("/", 1)[-1]
    return "." + name.rsplit(".", 1)[-1].lower() if "." in name.lstrip(".") else ""


_RUNNERS: dict[str, _Runner] = {
    "bash": _bash,
    "read": _read,
    "write": _write,
    "edit": _edit,
    "glob": _glob,
    "grep": _grep,
}
