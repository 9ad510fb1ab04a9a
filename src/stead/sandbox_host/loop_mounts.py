"""Disk images of a bounded size, mounted through loop devices (``disk.py``).

An image is a sparse file formatted ext4: it takes on the host's disk only
what is written into it, and never more than its size. It is mounted through
a loop device set up with the kernel's own calls (``LOOP_CONFIGURE``, then
``mount(2)``) rather than by running ``mount``: a few milliseconds less on every
wake. The device is set to clear itself (``LO_FLAGS_AUTOCLEAR``) once the file
system on it is unmounted, or once its last user closes it, so a host killed at
any point never leaves one attached to nothing; and to read and write the
image directly (``LO_FLAGS_DIRECT_IO``), so its pages are not cached twice.

An image grows (``grow_image``: the file extended, then ``resize2fs``) while
it is not mounted; it never shrinks.

An image must never be mounted twice at once (two file systems writing one
image corrupt it): ``attached`` says whether a loop device still holds one, as
an earlier mount lazily detached may, until its last user goes.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import fcntl
import hashlib
import os
import shutil
import struct
import subprocess
import time
from pathlib import Path

MKFS_SECONDS = 30.0
GROW_SECONDS = 600.0
"""How long each of e2fsck and resize2fs may take to grow an image (e2fsck
reads every inode in use: under a second for 100,000 files)."""
SBIN = "/usr/sbin:/sbin"
"""Where ``mkfs.ext4`` is, whatever the host's PATH."""
_LOOP_CTL_GET_FREE = 0x4C82
_LOOP_CONFIGURE = 0x4C0A
_LO_FLAGS_AUTOCLEAR = 4
_LO_FLAGS_DIRECT_IO = 16
_BLOCK_SIZE = 4096
_MS_NOSUID = 2
_MS_NODEV = 4
_MNT_DETACH = 2
_UMOUNT_NOFOLLOW = 8
_MOUNT_OPTIONS = b"discard,noinit_itable"
"""``discard``: what is deleted inside is given back to the host's disk (the
loop device punches holes in the image). ``noinit_itable``: the kernel leaves
the inode tables unwritten, as they read as zeros in a sparse image anyway."""
_INODE_RATIO = _BLOCK_SIZE
"""Bytes per inode: one per block, so a disk of small files (node_modules, git
objects; most take one block) fills its blocks before it runs out of inodes.
mkfs's default for file systems of 512 MiB and more is one per 16 KiB (a 10
GiB disk held 655,360 files). The inode tables take a sixteenth of the disk's
size, none of it on the host's disk: a sparse image, tables never written
(``lazy_itable_init``, ``noinit_itable``); mkfs takes no longer."""
_INODE_SIZE = 256
"""mkfs's default, named since ``_INODE_RATIO`` is: room for nanosecond times."""
_SMALL_JOURNAL = 128 * 1024**2
"""Images of this size and more get a 16 MiB journal, not mkfs's default of up
to 1 GiB: every block the journal ever used stays taken in the image while the
sandbox sleeps."""
_SUPERBLOCK_AT = 1024
_SUPERBLOCK_BYTES = 1024
_INCOMPAT_64BIT = 0x80
"""The superblock holds the high half of the block count (``s_blocks_count_hi``)."""
_LOOPS = Path("/sys/block")
LOOP_CONTROL = Path("/dev/loop-control")


class DiskError(Exception):
    """An image could not be made, mounted or unmounted; the message says why."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.errno = code


def mkfs_path() -> str | None:
    return _tool("mkfs.ext4")


def _tool(name: str) -> str | None:
    return shutil.which(name, path=f"{os.environ.get('PATH', '')}:{SBIN}")


def make_image(image: Path, size_bytes: int) -> None:
    """Makes ``image``: a sparse file of ``size_bytes`` formatted ext4, every
    block usable by any user (no reserve for root), an inode for each block,
    readable by root only.
    Written beside it and renamed into place, so an image is whole or not there."""
    mkfs = mkfs_path()
    if mkfs is None:
        raise DiskError(errno.ENOENT, "mkfs.ext4 not found (apt-get install e2fsprogs)")
    partial = image.with_name(image.name + ".new")
    # Root's alone: the image holds every file of the sandbox, whatever its mode.
    fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
    try:
        os.fchmod(fd, 0o600)  # one an earlier host left half made
        os.ftruncate(fd, size_bytes)
    finally:
        os.close(fd)
    try:
        done = subprocess.run(
            [mkfs, "-q", "-F", *_mkfs_options(size_bytes), str(partial)],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=MKFS_SECONDS,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        partial.unlink(missing_ok=True)
        raise DiskError(errno.EIO, f"mkfs.ext4 failed: {exc}") from None
    if done.returncode != 0:
        partial.unlink(missing_ok=True)
        said = (done.stderr or done.stdout).decode(errors="replace").strip()[-300:]
        raise DiskError(errno.EIO, f"mkfs.ext4 failed (exit {done.returncode}): {said}")
    os.rename(partial, image)


def grow_image(image: Path, size_bytes: int) -> bool:
    """Grows ``image`` and its file system to ``size_bytes`` if smaller (the
    image sparse: nothing more taken on the host's disk); never shrinks one.
    The image is not mounted: growing offline needs no CAP_SYS_RESOURCE, which
    a container may not give. e2fsck first, as resize2fs requires (it also
    replays the journal of a host killed with the image mounted). Whether it
    grew; ``DiskError`` if it could not (the image's file may be bigger than
    its file system then, which mounts as it is and grows at the next call)."""
    size = os.stat(image).st_size
    target = max(size, size_bytes) // _BLOCK_SIZE * _BLOCK_SIZE
    if fs_bytes(image) >= target:
        return False
    if size < target:
        os.truncate(image, target)
    _run("e2fsck", ["-f", "-p", str(image)], ok=(0, 1))  # 1: errors it corrected
    _run("resize2fs", [str(image), str(target // _BLOCK_SIZE)], ok=(0,))
    return True


def fs_bytes(image: Path) -> int:
    """The size of the ext4 file system on ``image``, from its superblock."""
    with open(image, "rb") as file:
        block = os.pread(file.fileno(), _SUPERBLOCK_BYTES, _SUPERBLOCK_AT)
    if len(block) < _SUPERBLOCK_BYTES or struct.unpack_from("<H", block, 0x38)[0] != 0xEF53:
        raise DiskError(errno.EINVAL, f"{image.name} holds no ext4 file system")
    count, block_bits, incompat = (
        int(struct.unpack_from("<I", block, offset)[0]) for offset in (0x04, 0x18, 0x60)
    )
    if incompat & _INCOMPAT_64BIT:
        count |= int(struct.unpack_from("<I", block, 0x150)[0]) << 32
    return count * (1024 << block_bits)


def _run(name: str, args: list[str], *, ok: tuple[int, ...]) -> None:
    tool = _tool(name)
    if tool is None:
        raise DiskError(errno.ENOENT, f"{name} not found (apt-get install e2fsprogs)")
    try:
        done = subprocess.run(
            [tool, *args],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=GROW_SECONDS,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise DiskError(errno.EIO, f"{name} failed: {exc}") from None
    if done.returncode not in ok:
        said = (done.stderr or done.stdout).decode(errors="replace").strip()[-300:]
        raise DiskError(errno.EIO, f"{name} failed (exit {done.returncode}): {said}")


def image_format(size_bytes: int) -> str:
    """A short name of how ``make_image`` formats an image of ``size_bytes``:
    another (an earlier stead's) names another format."""
    options = " ".join(_mkfs_options(size_bytes))
    return hashlib.sha256(options.encode()).hexdigest()[:8]


def _mkfs_options(size_bytes: int) -> list[str]:
    """Block size, reserve, inodes and journal given, not left to the machine's
    mke2fs.conf (whose inode ratio depends on the size)."""
    options = ["-b", str(_BLOCK_SIZE), "-m", "0"]
    options += ["-i", str(_INODE_RATIO), "-I", str(_INODE_SIZE)]
    options += ["-E", "nodiscard,lazy_itable_init=1,lazy_journal_init=1"]
    if size_bytes >= _SMALL_JOURNAL:
        options += ["-J", "size=16"]
    return options


def mount_image(image: Path, target: Path) -> None:
    """Mounts ``image`` at ``target`` (nosuid, nodev) through a free loop device."""
    device, fd = _attach(image)
    try:
        _check(
            _libc().mount(
                device.encode(),
                os.fsencode(target),
                b"ext4",
                _MS_NOSUID | _MS_NODEV,
                _MOUNT_OPTIONS,
            ),
            f"cannot mount {image.name}",
        )
    finally:
        # The mount holds the device now; closing ours clears it if the mount failed.
        os.close(fd)


def unmount(target: Path, *, lazy: bool = False) -> None:
    """Unmounts ``target``; with ``lazy``, even while busy (the file system goes
    once its last user does). Nothing mounted there is not an error."""
    flags = _UMOUNT_NOFOLLOW | (_MNT_DETACH if lazy else 0)
    if _libc().umount2(os.fsencode(target), flags) == 0:
        return
    code = ctypes.get_errno()
    if code == errno.EINVAL and not os.path.ismount(target):
        return
    raise DiskError(code, f"cannot unmount {target}: {os.strerror(code)}")


def mounts_under(directory: Path) -> list[Path]:
    """Every mount point below ``directory`` in this mount namespace, deepest first."""
    prefix = str(directory).rstrip("/") + "/"
    found = []
    with open("/proc/self/mountinfo", encoding="utf-8", errors="surrogateescape") as table:
        for line in table:
            point = _unescape(line.split(" ", 5)[4])
            if point.startswith(prefix):
                found.append(Path(point))
    return sorted(found, key=lambda p: len(p.parts), reverse=True)


def attached(image: Path) -> bool:
    """Whether a loop device is backed by ``image`` (mounted, or going away)."""
    wanted = str(image)
    for backing in _LOOPS.glob("loop*/loop/backing_file"):
        with contextlib.suppress(OSError):
            if backing.read_text().rstrip("\n").removesuffix(" (deleted)") == wanted:
                return True
    return False


def wait_detached(image: Path, seconds: float) -> bool:
    """Waits up to ``seconds`` for no loop device to hold ``image``."""
    deadline = time.monotonic() + seconds
    pause = 0.005
    while attached(image):
        if time.monotonic() >= deadline:
            return False
        time.sleep(pause)
        pause = min(pause * 2, 0.1)
    return True


# -- the kernel's calls ------------------------------------------------------------


def _attach(image: Path) -> tuple[str, int]:
    """A free loop device backed by ``image``, and an fd open on it."""
    backing = os.open(image, os.O_RDWR | os.O_CLOEXEC)
    try:
        control = os.open(LOOP_CONTROL, os.O_RDWR | os.O_CLOEXEC)
    except OSError as exc:
        os.close(backing)
        raise _no_loop_devices(exc) from None
    try:
        for _ in range(100):  # another process may take the free device first
            try:
                number = fcntl.ioctl(control, _LOOP_CTL_GET_FREE)
                device = f"/dev/loop{number}"
                fd = os.open(device, os.O_RDWR | os.O_CLOEXEC)
            except OSError as exc:
                raise _no_loop_devices(exc) from None
            try:
                fcntl.ioctl(fd, _LOOP_CONFIGURE, _loop_config(backing, image))
            except OSError as exc:
                os.close(fd)
                if exc.errno == errno.EBUSY:
                    continue
                raise DiskError(exc.errno or errno.EIO, f"cannot set up {device}: {exc}") from None
            return device, fd
        raise DiskError(errno.EBUSY, "every free loop device was taken before it could be set up")
    finally:
        os.close(control)
        os.close(backing)


def _no_loop_devices(exc: OSError) -> DiskError:
    where = f" ({exc.filename})" if exc.filename else ""
    return DiskError(
        exc.errno or errno.ENODEV,
        f"no free loop device{where}: {exc.strerror}; load the loop module "
        f"(modprobe loop) or, in a container, give it {LOOP_CONTROL} and the /dev/loop* devices",
    )


def _loop_config(backing: int, image: Path) -> bytes:
    """``struct loop_config``: the backing fd, the block size, then
    ``struct loop_info64`` (flags, the file's name) and reserved space."""
    name = os.fsencode(image)[:63]
    info = struct.pack(
        "=5Q4I64s64s32s2Q",
        0, 0, 0, 0, 0,
        0, 0, 0, _LO_FLAGS_AUTOCLEAR | _LO_FLAGS_DIRECT_IO,
        name, b"", b"", 0, 0,
    )  # fmt: skip
    return struct.pack("=2I", backing, _BLOCK_SIZE) + info + bytes(64)


def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


def _check(result: int, doing: str) -> None:
    if result != 0:
        code = ctypes.get_errno()
        raise DiskError(code, f"{doing}: {os.strerror(code)}")


def _unescape(field: str) -> str:
    """A mountinfo path: space, tab, newline and backslash are octal escapes."""
    for escaped, plain in (("\\040", " "), ("\\011", "\t"), ("\\012", "\n"), ("\\134", "\\")):
        field = field.replace(escaped, plain)
    return field
