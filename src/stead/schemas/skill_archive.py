"""A skill's files as (path, bytes) pairs: path rules, limits, and zip in and out.

Paths are relative, ``/``-separated and stay inside the skill: no absolute
paths, no ``..`` or ``.`` components, no backslashes or control characters. A
zip is read entry by entry with every byte counted as it inflates (a header's
sizes are never trusted), so a zip bomb stops at the limit; symlinks,
encrypted entries and special files are refused. Of an entry's mode only
whether it may be executed is kept (a script zipped on Unix with its ``x``
bit); nothing of a skill is ever writable. Nothing here touches a disk.
"""

from __future__ import annotations

import io
import re
import stat
import zipfile
from collections.abc import Collection
from dataclasses import dataclass

from stead.mount_paths import MAX_DEPTH, name_problem
from stead.schemas.validation import RequestError

MAX_PATH_BYTES = 1024
READ_BYTES = 64 * 1024
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_DRIVE = re.compile(r"^[A-Za-z]:")
EXECUTABLE = 0o111
"""Any of the mode's execute bits."""
_ZIP_TIME = (1980, 1, 1, 0, 0, 0)
"""Every entry of a zip stead writes has this time, so equal files give equal zips."""


@dataclass(frozen=True, slots=True)
class SkillLimits:
    max_total_bytes: int
    """All files of one skill version together, uncompressed."""
    max_file_bytes: int
    max_files: int


def check_path(field: str, path: str) -> str:
    """``path`` if it is relative and stays inside the skill; a 400 naming ``field`` if not."""
    problem = _path_problem(path)
    if problem is not None:
        raise RequestError(f"{field}: path {path!r} {problem}")
    return path


def _path_problem(path: str) -> str | None:
    if not path:
        return "is empty"
    if len(path.encode("utf-8", "surrogatepass")) > MAX_PATH_BYTES:
        return f"is longer than {MAX_PATH_BYTES} bytes"
    if _CONTROL.search(path):
        return "has a control character"
    if "\\" in path:
        return "has a backslash; separate directories with /"
    if path.startswith("/") or _DRIVE.match(path):
        return "is absolute; paths must be relative to the skill's directory"
    parts = path.split("/")
    if ".." in parts:
        return "has a '..' component; paths must stay inside the skill"
    if "." in parts or "" in parts:
        return "has an empty or '.' component"
    # What a session's sandbox could not hold under /workspace/skills.
    if len(parts) > MAX_DEPTH:
        return f"is deeper than {MAX_DEPTH} levels"
    for part in parts:
        if problem := name_problem(part):
            return f"has a component that {problem}"
    return None


class Budget:
    """Counts files and bytes against ``SkillLimits`` as they are read."""

    def __init__(self, limits: SkillLimits) -> None:
        self.limits = limits
        self.files = 0
        self.total = 0

    def add_file(self, field: str) -> None:
        self.files += 1
        if self.files > self.limits.max_files:
            raise RequestError(f"{field}: a skill holds at most {self.limits.max_files} files")

    def add_bytes(self, field: str, path: str, in_file: int, count: int) -> None:
        self.total += count
        if in_file > self.limits.max_file_bytes:
            raise RequestError(
                f"{field}: {path!r} is larger than the {self.limits.max_file_bytes}-byte "
                "limit for one file of a skill (STEAD_SKILL_MAX_FILE_BYTES)"
            )
        if self.total > self.limits.max_total_bytes:
            raise RequestError(
                f"{field}: the skill's files are larger than the {self.limits.max_total_bytes}-"
                "byte limit (STEAD_SKILL_MAX_BYTES)"
            )


def is_zip(filename: str, head: bytes) -> bool:
    return filename.lower().endswith(".zip") or head.startswith(b"PK\x03\x04")


@dataclass(frozen=True, slots=True)
class ZipEntry:
    path: str
    data: bytes
    executable: bool = False


def read_zip(field: str, data: bytes, budget: Budget) -> list[ZipEntry]:
    """The regular files of the zip ``data``, each path checked, each byte
    counted, each executable if its mode has an ``x`` bit (a zip made on Unix
    records its files' modes; one made elsewhere none, so nothing there is)."""
    try:
        archive = zipfile.ZipFile(io.BytesIO(data))
    except (zipfile.BadZipFile, ValueError, EOFError) as exc:
        raise RequestError(f"{field}: not a readable zip archive ({exc})") from None
    entries: list[ZipEntry] = []
    with archive:
        for info in archive.infolist():
            where = f"{field}: entry {info.filename!r}"
            if _finder_metadata(info.filename):
                continue
            if info.is_dir():
                check_path(field, info.filename.rstrip("/"))
                continue
            _check_entry(where, info)
            budget.add_file(field)
            path = check_path(field, info.filename)
            inflated = _inflate(field, archive, info, budget)
            entries.append(ZipEntry(path, inflated, bool(_mode(info) & EXECUTABLE)))
    return entries


def _mode(info: zipfile.ZipInfo) -> int:
    """The Unix mode an entry records: the high half of its external attributes
    (0 from a zip made where there are none, as on Windows)."""
    return info.external_attr >> 16


def _finder_metadata(name: str) -> bool:
    """What macOS's Finder adds to a zip it makes (``__MACOSX/`` resource forks,
    ``.DS_Store``): no part of the skill, so left out rather than refused."""
    parts = name.split("/")
    return parts[0] == "__MACOSX" or parts[-1] == ".DS_Store"


def _check_entry(where: str, info: zipfile.ZipInfo) -> None:
    if info.flag_bits & 0x1:
        raise RequestError(f"{where} is encrypted")
    mode = _mode(info)
    if stat.S_ISLNK(mode):
        raise RequestError(f"{where} is a symbolic link; a skill holds regular files only")
    if mode and stat.S_IFMT(mode) and not stat.S_ISREG(mode):
        raise RequestError(f"{where} is not a regular file")


def _inflate(field: str, archive: zipfile.ZipFile, info: zipfile.ZipInfo, budget: Budget) -> bytes:
    chunks: list[bytes] = []
    size = 0
    try:
        with archive.open(info) as stream:
            while chunk := stream.read(READ_BYTES):
                size += len(chunk)
                budget.add_bytes(field, info.filename, size, len(chunk))
                chunks.append(chunk)
    except (zipfile.BadZipFile, NotImplementedError, EOFError, ValueError) as exc:
        raise RequestError(f"{field}: entry {info.filename!r} cannot be read ({exc})") from None
    return b"".join(chunks)


def write_zip(files: dict[str, bytes], executables: Collection[str] = ()) -> bytes:
    """A deflated zip of ``files`` in path order, regular files (0755 those in
    ``executables``, 0644 the others) with a fixed time: the same files always
    give the same bytes."""
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for path in sorted(files):
            info = zipfile.ZipInfo(path, date_time=_ZIP_TIME)
            mode = 0o755 if path in executables else 0o644
            info.external_attr = (stat.S_IFREG | mode) << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            archive.writestr(info, files[path])
    return out.getvalue()


def read_written(data: bytes) -> list[ZipEntry]:
    """The files of a zip ``write_zip`` made: stead's own, so read whole,
    without the checks and counts an upload gets."""
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        return [
            ZipEntry(info.filename, archive.read(info), bool(_mode(info) & EXECUTABLE))
            for info in archive.infolist()
            if not info.is_dir()
        ]
