"""Skill upload validation (``stead.schemas.skills``): paths, limits, zips and
the SKILL.md frontmatter, each refusal a ``RequestError`` naming ``files``."""

from __future__ import annotations

import io
import stat
import zipfile

import pytest

from stead.schemas import RequestError, SkillLimits
from stead.schemas.skill_archive import Budget, check_path, read_zip
from stead.schemas.skills import bundle, display_name, frontmatter

LIMITS = SkillLimits(max_total_bytes=100_000, max_file_bytes=40_000, max_files=5)
MD = b"---\nname: pdf-tools\ndescription: Fills PDFs.\n---\n# body\n"


def _zip(entries: list[tuple[zipfile.ZipInfo | str, bytes]]) -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for info, data in entries:
            archive.writestr(info, data)
    return out.getvalue()


def _refused(parts: list[tuple[str, bytes]]) -> str:
    with pytest.raises(RequestError) as caught:
        bundle(parts, LIMITS)
    message = str(caught.value)
    assert message.startswith("files"), message
    return message


def test_a_directory_with_skill_md_becomes_a_bundle() -> None:
    found = bundle([("pdf-tools/SKILL.md", MD), ("pdf-tools/a/b.py", b"x")], LIMITS)
    assert (found.name, found.description) == ("pdf-tools", "Fills PDFs.")
    assert found.files == {"SKILL.md": MD, "a/b.py": b"x"}


def test_the_directory_names_the_skill_only_when_the_frontmatter_does_not() -> None:
    md = b"---\ndescription: D.\n---\n"
    assert bundle([("from-dir/SKILL.md", md)], LIMITS).name == "from-dir"
    assert bundle([("other-dir/SKILL.md", MD)], LIMITS).name == "pdf-tools"


def test_the_stored_archive_is_the_same_for_the_same_files() -> None:
    one = bundle([("d/SKILL.md", MD), ("d/x", b"1")], LIMITS)
    two = bundle([("e/x", b"1"), ("e/SKILL.md", MD)], LIMITS)
    assert one.archive() == two.archive()
    with zipfile.ZipFile(io.BytesIO(one.archive())) as archive:
        assert archive.namelist() == ["pdf-tools/SKILL.md", "pdf-tools/x"]


@pytest.mark.parametrize(
    ("path", "problem"),
    [
        ("", "is empty"),
        ("/etc/passwd", "is absolute"),
        ("C:/x", "is absolute"),
        ("a/../../b", "'..'"),
        ("..", "'..'"),
        ("a/./b", "'.' component"),
        ("a//b", "empty or '.'"),
        ("a\\b", "backslash"),
        ("a/\x00b", "control character"),
        ("a/" + "x" * 1100, "longer than"),
    ],
)
def test_paths_that_leave_the_skill_are_refused(path: str, problem: str) -> None:
    with pytest.raises(RequestError, match=r"files\.0: path") as caught:
        check_path("files.0", path)
    assert problem in str(caught.value)


def test_a_zip_is_unpacked_with_its_directories_skipped() -> None:
    data = _zip([("s/", b""), ("s/SKILL.md", MD), ("s/x.txt", b"hello")])
    assert bundle([("s.zip", data)], LIMITS).files == {"SKILL.md": MD, "x.txt": b"hello"}


def test_a_zipped_files_execute_bit_is_kept_and_nothing_else_of_its_mode() -> None:
    script = zipfile.ZipInfo("s/run.sh")
    script.external_attr = (stat.S_IFREG | 0o4777) << 16
    group = zipfile.ZipInfo("s/group.sh")
    group.external_attr = (stat.S_IFREG | 0o650) << 16
    made_elsewhere = zipfile.ZipInfo("s/dos.bat")
    made_elsewhere.external_attr = 0x20  # MS-DOS attributes only: no mode
    data = _zip([("s/SKILL.md", MD), (script, b"1"), (group, b"2"), (made_elsewhere, b"3")])
    found = bundle([("s.zip", data)], LIMITS)
    assert found.executables == {"run.sh", "group.sh"}
    with zipfile.ZipFile(io.BytesIO(found.archive())) as archive:
        modes = {i.filename: i.external_attr >> 16 for i in archive.infolist()}
    regular = stat.S_IFREG
    assert modes == {
        "pdf-tools/SKILL.md": regular | 0o644,
        "pdf-tools/dos.bat": regular | 0o644,
        "pdf-tools/group.sh": regular | 0o755,
        "pdf-tools/run.sh": regular | 0o755,
    }
    assert bundle([("s/SKILL.md", MD), ("s/run.sh", b"1")], LIMITS).executables == set()


def test_a_zip_made_by_finder_leaves_its_metadata_out() -> None:
    """macOS's Compress adds ``__MACOSX/`` resource forks and ``.DS_Store``;
    before, such a zip was refused for its second top-level folder."""
    data = _zip(
        [
            ("s/SKILL.md", MD),
            ("s/.DS_Store", b"\0\0\0\1Bud1"),
            ("__MACOSX/", b""),
            ("__MACOSX/s/._SKILL.md", b"\0\5\26\7"),
        ]
    )
    assert bundle([("s.zip", data)], LIMITS).files == {"SKILL.md": MD}


def test_a_zip_is_recognised_by_its_bytes_without_the_extension() -> None:
    data = _zip([("s/SKILL.md", MD)])
    assert bundle([("upload", data)], LIMITS).name == "pdf-tools"


def test_zip_entries_that_escape_or_are_links_or_encrypted_are_refused() -> None:
    assert "'..'" in _refused([("s.zip", _zip([("s/SKILL.md", MD), ("s/../../x", b"")]))])
    assert "absolute" in _refused([("s.zip", _zip([("s/SKILL.md", MD), ("/x", b"")]))])
    link = zipfile.ZipInfo("s/link")
    link.external_attr = (stat.S_IFLNK | 0o777) << 16
    assert "symbolic link" in _refused([("s.zip", _zip([("s/SKILL.md", MD), (link, b"/etc")]))])
    fifo = zipfile.ZipInfo("s/fifo")
    fifo.external_attr = (stat.S_IFIFO | 0o644) << 16
    assert "not a regular file" in _refused([("s.zip", _zip([("s/SKILL.md", MD), (fifo, b"")]))])
    data = bytearray(_zip([("s/SKILL.md", MD)]))
    data[6] |= 0x1  # the local header's encryption flag
    central = data.rfind(b"PK\x01\x02")
    data[central + 8] |= 0x1
    assert "encrypted" in _refused([("s.zip", bytes(data))])


def test_a_zip_bomb_stops_at_the_limit_whatever_its_headers_say() -> None:
    bomb = _zip([("s/SKILL.md", MD), ("s/zeros", b"\0" * 10_000_000)])
    assert len(bomb) < 20_000
    assert "40000-byte limit for one file" in _refused([("s.zip", bomb)])
    many = _zip([("s/SKILL.md", MD), *[(f"s/{i}", b"\0" * 30_000) for i in range(4)]])
    assert "100000-byte limit" in _refused([("s.zip", many)])


def test_a_lying_header_does_not_get_past_the_count() -> None:
    budget = Budget(LIMITS)
    data = bytearray(_zip([("s/zeros", b"\0" * 50_000)]))
    # Claim a tiny uncompressed size in both headers: the bytes are still counted.
    data[22:26] = (10).to_bytes(4, "little")
    central = data.rfind(b"PK\x01\x02")
    data[central + 24 : central + 28] = (10).to_bytes(4, "little")
    with pytest.raises(RequestError, match="files"):
        read_zip("files.0", bytes(data), budget)


def test_files_count_and_size_limits() -> None:
    too_many = [("s/SKILL.md", MD), *[(f"s/{i}", b"") for i in range(5)]]
    assert "at most 5 files" in _refused(too_many)
    assert "one file" in _refused([("s/SKILL.md", MD), ("s/big", b"x" * 40_001)])
    together = [("s/SKILL.md", MD), *[(f"s/{i}", b"x" * 39_000) for i in range(3)]]
    assert "100000-byte limit" in _refused(together)


def test_the_layout_must_be_one_directory_with_skill_md() -> None:
    assert "not inside the skill's directory" in _refused([("SKILL.md", MD)])
    assert "one top-level directory" in _refused([("a/SKILL.md", MD), ("b/x", b"")])
    assert "no SKILL.md" in _refused([("a/README.md", b"")])
    assert "no SKILL.md" in _refused([("a/sub/SKILL.md", MD)])
    assert "sent twice" in _refused([("a/SKILL.md", MD), ("a/SKILL.md", MD)])
    assert "send the skill's files" in _refused([])
    assert "not a readable zip" in _refused([("s.zip", b"PK\x03\x04garbage")])


def test_frontmatter_forms() -> None:
    folded = b'---\nname: "x-y"\ndescription: >\n  Two\n  lines.\n---\n'
    assert frontmatter(folded) == ("x-y", "Two lines.")
    assert frontmatter(b"\xef\xbb\xbf---\r\ndescription: D\r\n---\r\n") == (None, "D")
    # Comparisons are not tags.
    compared = b"---\ndescription: use when x < 5 and y > 3\n---\n"
    assert frontmatter(compared) == (None, "use when x < 5 and y > 3")


@pytest.mark.parametrize(
    ("skill_md", "problem"),
    [
        (b"# no frontmatter", "must open with YAML frontmatter"),
        (b"---\ndescription: D\n", "no closing ---"),
        (b"---\n[unclosed\n---\n", "not valid YAML"),
        (b"---\n- a list\n---\n", "mapping"),
        (b"---\nname: 5\ndescription: D\n---\n", "name: expected a string"),
        (b"---\nname: a\n---\n", "description: required"),
        (b"---\ndescription: '  '\n---\n", "description: required"),
        (b"---\ndescription: " + b"d" * 1025 + b"\n---\n", "at most 1024"),
        (b"---\ndescription: use <tool>\n---\n", "XML tags"),
        (b"---\ndescription: ends </tool>\n---\n", "XML tags"),
        (b"---\nname: \xff\n---\n", "not UTF-8"),
    ],
)
def test_bad_frontmatter_is_refused(skill_md: bytes, problem: str) -> None:
    assert problem in _refused([("a/SKILL.md", skill_md)])


@pytest.mark.parametrize(
    ("name", "problem"),
    [
        ("Upper", "lowercase"),
        ("two--hyphens", "lowercase"),
        ("-lead", "lowercase"),
        ("under_score", "lowercase"),
        ("a" * 65, "at most 64"),
        ("my-claude-skill", "reserved word 'claude'"),
        ("anthropic-tools", "reserved word 'anthropic'"),
    ],
)
def test_bad_names_are_refused(name: str, problem: str) -> None:
    md = f"---\nname: {name}\ndescription: D\n---\n".encode()
    assert problem in _refused([("a/SKILL.md", md)])


def test_display_names() -> None:
    assert display_name(None, "pdf-tools") == "pdf-tools"
    assert display_name("PDF tools", "pdf-tools") == "PDF tools"
    for bad in ("", " ", "a\nb", "tab\there", "nul\x00", "x" * 256):
        with pytest.raises(RequestError, match=r"^display_name"):
            display_name(bad, "n")
