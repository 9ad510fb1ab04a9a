"""Skill uploads -> a validated ``SkillBundle``: files under one directory with a
``SKILL.md`` whose YAML frontmatter names and describes the skill.

The rules are the hosted API's: every file in one top-level directory with
``SKILL.md`` at its root; ``name`` (from the frontmatter, else the directory) a
kebab-case slug of at most 64 characters without the reserved words;
``description`` 1 to 1024 characters; neither holds XML tags. A single ``.zip``
upload is unpacked first (``skill_archive.py``). Every error is a 400 naming
``files`` (or ``display_name``); nothing is stored for a refused upload.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from stead.mount_paths import directories_of
from stead.schemas.skill_archive import (
    Budget,
    SkillLimits,
    ZipEntry,
    check_path,
    is_zip,
    read_written,
    read_zip,
)
from stead.schemas.skill_archive import write_zip as _write_zip
from stead.schemas.validation import RequestError

SKILL_FILE = "SKILL.md"
MAX_NAME = 64
MAX_DESCRIPTION = 1024
MAX_DISPLAY_NAME = 255
RESERVED_WORDS = ("anthropic", "claude")
_SLUG = re.compile(r"^[a-z0-9]+(-[a-z0-9]+)*$")
_TAG = re.compile(r"</?[A-Za-z][^<>]*>")
"""An XML tag (``<b>``, ``</b>``, ``<a href=..>``); ``x < 5 and y > 3`` is none."""
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_TEXT_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")
"""A control character other than tab and line breaks (YAML's "\\0" makes a NUL,
which PostgreSQL's text refuses)."""
FIELD = "files"


@dataclass(frozen=True, slots=True)
class SkillBundle:
    name: str
    description: str
    files: dict[str, bytes]
    """Path inside the skill's directory -> bytes (``SKILL.md`` among them)."""
    executables: frozenset[str] = frozenset()
    """The paths of ``files`` zipped executable (a zip upload's mode bits)."""

    def archive(self) -> bytes:
        """The zip stead keeps and serves: every file under ``<name>/``, the
        executables 0755."""
        return _write_zip(
            {f"{self.name}/{path}": data for path, data in self.files.items()},
            {f"{self.name}/{path}" for path in self.executables},
        )


def unpack(name: str, archive: bytes) -> list[ZipEntry]:
    """The files of a zip stead wrote (``SkillBundle.archive``), without
    ``<name>/``; executable those it wrote so."""
    prefix = f"{name}/"
    return [
        ZipEntry(entry.path.removeprefix(prefix), entry.data, entry.executable)
        for entry in read_written(archive)
    ]


def bundle(parts: Sequence[tuple[str, bytes]], limits: SkillLimits) -> SkillBundle:
    """Validates uploaded ``(filename, bytes)`` parts (one zip, or the files)."""
    if not parts:
        raise RequestError(f"{FIELD}: send the skill's files (or one .zip of its directory)")
    budget = Budget(limits)
    if len(parts) == 1 and is_zip(parts[0][0], parts[0][1][:4]):
        entries = read_zip(f"{FIELD}.0", parts[0][1], budget)
    else:  # files sent one by one carry no mode: none is executable
        entries = []
        for i, (filename, data) in enumerate(parts):
            budget.add_file(FIELD)
            budget.add_bytes(FIELD, filename, len(data), len(data))
            entries.append(ZipEntry(check_path(f"{FIELD}.{i}", filename), data))
    directory, files = _one_directory(entries)
    skill_md = files.get(SKILL_FILE)
    if skill_md is None:
        raise RequestError(
            f"{FIELD}: no {SKILL_FILE} at the root of the skill's directory {directory!r}"
        )
    name, description = frontmatter(skill_md)
    executables = frozenset(e.path.partition("/")[2] for e in entries if e.executable)
    return SkillBundle(check_name(name or directory), description, files, executables)


def _one_directory(entries: Sequence[ZipEntry]) -> tuple[str, dict[str, bytes]]:
    directories = set()
    files: dict[str, bytes] = {}
    for entry in entries:
        path, data = entry.path, entry.data
        top, slash, inner = path.partition("/")
        if not slash:
            raise RequestError(
                f"{FIELD}: {path!r} is not inside the skill's directory; send every file "
                f"under one top-level directory, as my-skill/{SKILL_FILE}"
            )
        directories.add(top)
        if inner in files:
            raise RequestError(f"{FIELD}: {path!r} is sent twice")
        files[inner] = data
    if len(directories) != 1:
        found = ", ".join(sorted(directories)) or "none"
        raise RequestError(f"{FIELD}: every file must be in one top-level directory; found {found}")
    for directory in sorted(directories_of(files) & files.keys()):
        inner = min(f for f in files if f.startswith(directory + "/"))
        raise RequestError(f"{FIELD}: {directory!r} is both a file and the directory of {inner!r}")
    return directories.pop(), files


def frontmatter(skill_md: bytes) -> tuple[str | None, str]:
    """``(name or None, description)`` from ``SKILL.md``'s YAML frontmatter."""
    where = f"{FIELD}: {SKILL_FILE}"
    try:
        text = skill_md.decode("utf-8").lstrip("\ufeff")
    except UnicodeDecodeError:
        raise RequestError(f"{where} is not UTF-8 text") from None
    lines = text.splitlines()
    if not lines or lines[0].strip() != "---":
        raise RequestError(f"{where} must open with YAML frontmatter between --- lines")
    end = next((i for i, line in enumerate(lines[1:], 1) if line.strip() == "---"), None)
    if end is None:
        raise RequestError(f"{where}: the frontmatter has no closing --- line")
    # Imported here: only a skill upload parses YAML, and a server keeps what it imports.
    import yaml

    try:
        meta: Any = yaml.safe_load("\n".join(lines[1:end]))
    except yaml.YAMLError as exc:
        raise RequestError(f"{where}: the frontmatter is not valid YAML ({exc})") from None
    except (ValueError, TypeError, OverflowError) as exc:
        # A scalar PyYAML's constructors cannot make: a date past its month's
        # last day (2001-02-30), an int of more digits than Python converts,
        # an explicit ``!!float abc``. They raise these, not a YAMLError.
        raise RequestError(
            f"{where}: the frontmatter has a value YAML cannot read ({exc})"
        ) from None
    except RecursionError:  # "[[[[..." nested past the interpreter's limit
        raise RequestError(f"{where}: the frontmatter is nested too deeply") from None
    if not isinstance(meta, dict):
        raise RequestError(f"{where}: the frontmatter must be a mapping of keys to values")
    name = meta.get("name")
    if name is not None and not isinstance(name, str):
        raise RequestError(f"{where} frontmatter name: expected a string")
    return name, _description(meta.get("description"))


def _description(value: object) -> str:
    where = f"{FIELD}: {SKILL_FILE} frontmatter description"
    if not isinstance(value, str) or not value.strip():
        raise RequestError(f"{where}: required, a non-empty string saying when to use the skill")
    if len(value) > MAX_DESCRIPTION:
        raise RequestError(f"{where}: at most {MAX_DESCRIPTION} characters, got {len(value)}")
    if _TAG.search(value):
        raise RequestError(f"{where}: must not hold XML tags")
    if _TEXT_CONTROL.search(value):
        raise RequestError(f"{where}: must not hold control characters")
    return value.strip()


def check_name(name: str) -> str:
    where = f"{FIELD}: {SKILL_FILE} frontmatter name"
    if len(name) > MAX_NAME:
        raise RequestError(f"{where}: at most {MAX_NAME} characters, got {len(name)}")
    if not _SLUG.fullmatch(name):  # match: "$" also matches before a final "\n"
        raise RequestError(
            f"{where}: {name!r} must be lowercase letters, digits and single hyphens"
        )
    for word in RESERVED_WORDS:
        if word in name:
            raise RequestError(f"{where}: {name!r} holds the reserved word {word!r}")
    return name


def display_name(raw: str | None, name: str) -> str:
    """The skill's label: ``raw`` if given (one line, 1-255 characters), else ``name``."""
    if raw is None:
        return name
    if not raw.strip() or len(raw) > MAX_DISPLAY_NAME or _CONTROL.search(raw):
        raise RequestError(f"display_name: one line of 1 to {MAX_DISPLAY_NAME} characters")
    return raw
