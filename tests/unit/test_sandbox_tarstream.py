"""The snapshot tar reader against ``tarfile``: the same members from what
``tarfile`` writes in PAX format, and a clear refusal of anything else."""

from __future__ import annotations

import io
import tarfile

import pytest

from stead.sandbox_host.tarstream import TarFormatError, TarStream


def archive(members: list[tuple[tarfile.TarInfo, bytes]], fmt: int = tarfile.PAX_FORMAT) -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=fmt) as tar:
        for info, data in members:
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data) if data else None)
    return out.getvalue()


def entry(
    name: str, kind: bytes = tarfile.REGTYPE, **fields: object
) -> tuple[tarfile.TarInfo, bytes]:
    info = tarfile.TarInfo(name)
    info.type = kind
    info.mode = 0o644
    data = fields.pop("data", b"") if kind == tarfile.REGTYPE else b""
    for field, value in fields.items():
        setattr(info, field, value)
    assert isinstance(data, bytes)
    return info, data


def read_all(data: bytes) -> list[tuple[str, bytes, int, int, str, bytes]]:
    stream = TarStream(io.BytesIO(data))
    found = []
    for member in stream.members():
        content = b""
        while chunk := stream.read(7):  # small reads cross the buffer's edges
            content += chunk
        found.append(
            (member.name, member.type, member.mode, member.mtime_ns, member.linkname, content)
        )
    return found


def test_members_read_as_written_including_long_odd_names_and_exact_mtimes() -> None:
    long_name = "/".join(["deep"] * 40) + "/file.txt"
    members = [
        entry(".", tarfile.DIRTYPE, mode=0o755, mtime=1_700_000_000),
        entry("empty.txt", mtime=5),
        entry("data.bin", data=bytes(range(256)) * 41, mode=0o600),
        entry("dir", tarfile.DIRTYPE, mode=0o700),
        entry(long_name, data=b"far down"),
        entry("caf\u00e9 \u2603.txt", data=b"unicode"),
        entry("raw-\udcff.bin", data=b"undecodable name"),
        entry("link", tarfile.SYMTYPE, linkname="x" * 150),
        entry("exact", data=b"x"),
    ]
    members[-1][0].pax_headers = {"mtime": "1700000000.123456789"}
    found = read_all(archive(members))
    assert [f[0] for f in found] == [info.name for info, _ in members]
    assert found[2][5] == bytes(range(256)) * 41 and found[2][2] == 0o600
    assert found[4][5] == b"far down"
    assert found[7][4] == "x" * 150
    assert found[0][3] == 1_700_000_000 * 10**9
    assert found[-1][3] == 1_700_000_000_123_456_789


def test_data_a_caller_leaves_unread_is_skipped() -> None:
    data = archive([entry("a", data=b"A" * 3000), entry("b", data=b"B" * 10)])
    stream = TarStream(io.BytesIO(data))
    names = [member.name for member in stream.members()]
    assert names == ["a", "b"]


def test_a_negative_mtime_is_kept() -> None:
    info, data = entry("old", data=b"1969")
    info.pax_headers = {"mtime": "-1.5"}
    assert read_all(archive([(info, data)]))[0][3] == -1_500_000_000


def refused(data: bytes) -> str:
    with pytest.raises(TarFormatError) as caught:
        read_all(data)
    return str(caught.value)


def test_a_changed_byte_fails_the_checksum() -> None:
    data = bytearray(archive([entry("a", data=b"x")]))
    # The first header is the PAX one for long/odd data or the member's own.
    data[600 if data[156:157] == b"x" else 10] ^= 0x01
    assert "checksum" in refused(bytes(data))


def test_a_truncated_archive_is_refused_wherever_it_stops() -> None:
    data = archive([entry("a", data=b"x" * 2000)])
    for cut in (100, 512 + 100, 512 + 1999):
        assert "ends inside" in refused(data[:cut])


def test_other_tar_dialects_are_refused() -> None:
    assert "ustar" in refused(archive([entry("a", data=b"x")], fmt=tarfile.GNU_FORMAT))


def test_a_number_field_with_a_sign_is_refused() -> None:
    block = bytearray(archive([entry("a")], fmt=tarfile.USTAR_FORMAT)[:512])
    block[124:136] = b"-0000000001\0"
    block[148:156] = b"        "
    block[148:156] = f"{sum(block):06o}\0 ".encode()
    assert "octal" in refused(bytes(block) + bytes(1024))


@pytest.mark.parametrize(
    "records",
    [b"99 path=x\n", b"5 p\n", b"nolength\n", b"12 path x\n", b"1x path=x\n"],
)
def test_malformed_extended_headers_are_refused(records: bytes) -> None:
    info = tarfile.TarInfo("././@PaxHeader")
    info.type = tarfile.XHDTYPE
    info.size = len(records)
    header = info.tobuf(tarfile.USTAR_FORMAT)
    padding = bytes(-len(records) % 512)
    member = archive([entry("a", data=b"x")], fmt=tarfile.USTAR_FORMAT)
    refused(header + records + padding + member)


def test_an_extended_header_at_the_end_is_refused() -> None:
    info, _ = entry("a", data=b"x")
    info.pax_headers = {"mtime": "1.5"}
    whole = archive([(info, b"x")])
    pax_header_and_records = whole[:1024]
    assert "after an extended header" in refused(pax_header_and_records + bytes(1024))
