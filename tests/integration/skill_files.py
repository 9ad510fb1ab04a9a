"""Skill uploads for the tests: a ``SKILL.md``, a directory of files, zips."""

from __future__ import annotations

import io
import stat
import zipfile

DESCRIPTION = "Fills PDF forms. Use when the user asks to fill in a PDF."


def skill_md(name: str | None = "pdf-tools", description: str | None = DESCRIPTION) -> bytes:
    lines = ["---"]
    if name is not None:
        lines.append(f"name: {name}")
    if description is not None:
        lines.append(f"description: {description}")
    return (
        "\n".join([*lines, "---", "", "# Filling PDFs", "Run scripts/fill.py."]) + "\n"
    ).encode()


def skill_files(
    name: str = "pdf-tools", description: str = DESCRIPTION, script: bytes = b"print('fill')\n"
) -> list[tuple[str, bytes]]:
    return [
        (f"{name}/SKILL.md", skill_md(name, description)),
        (f"{name}/scripts/fill.py", script),
    ]


def zipped(
    entries: list[tuple[str, bytes]],
    symlinks: dict[str, str] | None = None,
    modes: dict[str, int] | None = None,
) -> bytes:
    """A zip of ``entries``; ``modes`` gives some their permission bits, as a
    zip made on Unix records them (``zip``, Python's ``zipfile``)."""
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for path, data in entries:
            if modes is not None and path in modes:
                info = zipfile.ZipInfo(path)
                info.external_attr = (stat.S_IFREG | modes[path]) << 16
                info.compress_type = zipfile.ZIP_DEFLATED
                archive.writestr(info, data)
            else:
                archive.writestr(path, data)
        for path, target in (symlinks or {}).items():
            info = zipfile.ZipInfo(path)
            info.external_attr = (stat.S_IFLNK | 0o777) << 16
            archive.writestr(info, target)
    return out.getvalue()


def modes_of(data: bytes) -> dict[str, int]:
    """The permission bits each entry of a zip records."""
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        return {info.filename: (info.external_attr >> 16) & 0o7777 for info in archive.infolist()}


def unzipped(data: bytes) -> dict[str, bytes]:
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        return {info.filename: archive.read(info) for info in archive.infolist()}
