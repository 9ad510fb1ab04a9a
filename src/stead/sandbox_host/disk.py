"""A sandbox's disk: the only place its processes can write to (``/workspace``,
``/tmp`` and the writable mounts under ``/mnt``), of a bounded size
(``HostOptions.sandbox_disk_bytes``, ``STEAD_SANDBOX_DISK_MB``).

It is a sparse ext4 image in the sandbox's directory (``loop_mounts.py``),
made at its first wake (taken from ``SpareDisks``, made ahead, so that wake
does not wait for mkfs), mounted while anything needs it (the body, a snapshot,
a mount call: each ``acquire`` it) and unmounted once nothing does, so a
sleeping sandbox holds no loop device and no mount. A sandbox that fills it
gets ENOSPC inside; the host's own disk, its catalogue and every other sandbox
are not touched. The image outlives sleep (the mount tree stays on it,
``mounts.py``); the workspace on it goes at each sleep once saved
(``workspace.py``), ``/tmp`` at each sleep and wake. It goes with the sandbox's
destroy, once no call holds it.

The mounted disk (root's, searchable by the sandbox's group alone) holds
``workspace`` and ``tmp`` (the sandbox user's), ``mnt`` (the mount tree) and a
restore's staging directories, which must share the workspace's file system
(one rename puts them in place).

A disk grows to a larger ``STEAD_SANDBOX_DISK_MB`` when it is next mounted
(a sandbox that filled it can write more once its host starts with the new
setting); it never shrinks to a smaller one, which applies to new disks alone.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import subprocess
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import anyio
from anyio import to_thread

from stead.sandbox import SandboxNotFound, SandboxUnavailable, WorkspaceUnavailable
from stead.sandbox_host.loop_mounts import (
    DiskError,
    fs_bytes,
    grow_image,
    image_format,
    make_image,
    mount_image,
    mounts_under,
    unmount,
    wait_detached,
)
from stead.sandbox_host.snapshots import remove_stale_staging
from stead.sandbox_host.trees import remove_tree

log = logging.getLogger("stead.sandbox.host")

DETACH_SECONDS = 5.0
"""How long a mount waits for an earlier mount of the same image to be gone."""
LET_GO_SECONDS = 60.0
"""How long a removal (a destroy) waits for the calls holding the disk to end."""
MOVE_SECONDS = 600.0
SPARES = 2
"""Disks made ahead of need; more are made as they are taken."""
LEGACY = ("workspace", "mnt")
"""What stead kept on the host's disk, beside the image, before sandboxes had
disks of their own: moved onto the disk when it is first mounted."""
MOVED = ".moved"
"""The suffix of what was moved onto the disk, while it is deleted."""


class SpareDisks:
    """Empty disks of the host's size and format made ahead, in a directory on
    the sandboxes' file system: a new sandbox's first wake takes one with a
    rename instead of waiting for mkfs (some 15-40 ms). A spare's name ends in
    its format (``loop_mounts.image_format``)."""

    def __init__(self, directory: Path, size_bytes: int, count: int = SPARES) -> None:
        self._directory = directory
        self._size = size_bytes
        self._suffix = f".{image_format(size_bytes)}.img"
        self._count = count
        self._taken = anyio.Event()

    async def take(self, image: Path) -> bool:
        """Puts a spare at ``image``; False if there is none (yet)."""
        taken = await to_thread.run_sync(self._take, image)
        self._taken.set()
        return taken

    async def keep_made(self) -> None:
        """Runs forever: makes spares up to ``count``, again after each take.
        A spare that cannot be made is only logged (each wake then makes its own)."""
        await to_thread.run_sync(self._clear)
        while True:
            try:
                await to_thread.run_sync(self.fill)
            except (DiskError, OSError) as exc:
                log.warning("no spare sandbox disks: %s", exc)
            await self._taken.wait()
            self._taken = anyio.Event()

    def _take(self, image: Path) -> bool:
        for spare in sorted(self._directory.glob(f"*{self._suffix}")):
            with contextlib.suppress(FileNotFoundError):  # taken by another wake first
                # One of an earlier host's size or format that ``_clear`` has
                # not dropped yet (it runs beside the host's first calls) is
                # not this host's: a new disk never keeps the old one.
                if spare.stat().st_size != self._size:
                    continue
                os.rename(spare, image)
                return True
        return False

    def _clear(self) -> None:
        """Drops what an earlier host left: a spare half made, or of another
        size or format."""
        self._directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        for path in self._directory.iterdir():
            if not path.name.endswith(self._suffix) or path.stat().st_size != self._size:
                path.unlink()

    def fill(self) -> None:
        """Makes spares up to ``count`` (blocking)."""
        self._directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        while len(list(self._directory.glob(f"*{self._suffix}"))) < self._count:
            make_image(self._directory / f"{uuid.uuid4().hex}{self._suffix}", self._size)


class SandboxDisk:
    def __init__(
        self, root: Path, size_bytes: int, uid: int, *, spares: SpareDisks | None = None
    ) -> None:
        self.root = root
        self.image = root / "disk.img"
        self.mountpoint = root / "disk"
        self.workspace = self.mountpoint / "workspace"
        self.tmp = self.mountpoint / "tmp"
        self.mnt = self.mountpoint / "mnt"
        self.size_bytes = size_bytes
        """The host's size at first; the disk's own once mounted (which may be
        bigger: it never shrinks)."""
        self._wanted = size_bytes
        self._uid = uid
        self._spares = spares
        self._holders = 0
        self._lock = anyio.Lock()
        self._removed = False
        self._unheld: anyio.Event | None = None
        """Set by the last ``release`` while a ``remove`` waits for it."""

    @property
    def size_mib(self) -> int:
        return self.size_bytes // 1024**2

    async def acquire(self) -> None:
        """Mounts the disk, made if new, unless it is mounted already; each
        call needs its ``release``. ``WorkspaceUnavailable`` if what an earlier
        stead left on the host's disk does not fit it, ``SandboxUnavailable``
        if it cannot be made or mounted, ``SandboxNotFound`` once removed."""
        async with self._lock:
            if self._removed:
                raise SandboxNotFound("the sandbox was destroyed")
            if self._holders == 0:
                try:
                    if self._spares is not None and not await to_thread.run_sync(self._made):
                        await self._spares.take(self.image)
                    await to_thread.run_sync(self._mount)
                except DiskError as exc:
                    if exc.errno == errno.ENOSPC:
                        raise WorkspaceUnavailable(str(exc)) from None
                    raise SandboxUnavailable(f"the sandbox's disk: {exc}") from None
            self._holders += 1

    async def release(self) -> None:
        """Unmounts the disk when nothing else holds it. One still busy (a host
        process inside it) stays mounted, and the next ``acquire`` takes it as it is."""
        with anyio.CancelScope(shield=True):
            async with self._lock:
                self._holders -= 1
                if self._holders > 0:
                    return
                if self._removed:
                    if self._unheld is not None:
                        self._unheld.set()
                    return
                try:
                    await to_thread.run_sync(unmount, self.mountpoint)
                except DiskError as exc:
                    log.warning("sandbox disk %s stays mounted: %s", self.mountpoint, exc)

    @contextlib.asynccontextmanager
    async def held(self) -> AsyncIterator[None]:
        """The disk, mounted inside the block."""
        await self.acquire()
        try:
            yield
        finally:
            await self.release()

    async def remove(self, *, wait: float = LET_GO_SECONDS) -> None:
        """Unmounts the disk and deletes its image once nothing holds it;
        ``acquire`` refuses from the start (``SandboxNotFound``) until
        ``restore``. A holder works on the disk in a worker thread (a mount
        call): unmounted from under it, it would write onto the host's own
        disk. ``SandboxUnavailable`` if a holder keeps it past ``wait``
        seconds; the disk is left as it is."""
        async with self._lock:
            self._removed = True
            unheld = self._unheld = anyio.Event() if self._holders else None
        if unheld is not None:
            with anyio.move_on_after(wait):
                await unheld.wait()
            if not unheld.is_set():
                raise SandboxUnavailable(
                    "the sandbox's disk is still in use by a call; destroy it again later"
                )
        with anyio.CancelScope(shield=True):
            async with self._lock:
                # Lazily if a host process is still inside (an unmount found it busy).
                await to_thread.run_sync(self._remove)

    def restore(self) -> None:
        """The disk may be made again (a destroy that failed after ``remove``)."""
        self._removed = False
        self._unheld = None

    def fresh_tmp(self) -> None:
        """An empty ``tmp``, as a new ``/tmp`` is (the disk is held)."""
        self.drop_tmp()
        self.tmp.mkdir(mode=0o1777)
        os.chown(self.tmp, self._uid, self._uid)
        os.chmod(self.tmp, 0o1777)

    def drop_tmp(self) -> None:
        remove_tree(self.tmp, ignore_errors=True)

    # -- worker thread ----------------------------------------------------------

    def _made(self) -> bool:
        """Whether the image is there; makes the sandbox's directory if not."""
        if self.image.exists():
            return True
        self.root.mkdir(mode=0o711, parents=True, exist_ok=True)
        os.chmod(self.root, 0o711)
        return False

    def _mount(self) -> None:
        if os.path.ismount(self.mountpoint):
            return  # an earlier unmount found it busy
        self._made()
        self.mountpoint.mkdir(mode=0o700, exist_ok=True)
        if not self.image.exists():
            make_image(self.image, self._wanted)
        # Two file systems on one image would corrupt it.
        if not wait_detached(self.image, DETACH_SECONDS):
            raise DiskError(errno.EBUSY, "an earlier mount of it has not gone yet")
        self._grow()
        mount_image(self.image, self.mountpoint)
        try:
            # Searchable by the sandbox's user alone (its file tools act as
            # it), not by every user of the host: /tmp here is world-writable.
            os.chown(self.mountpoint, 0, self._uid)
            os.chmod(self.mountpoint, 0o710)
            # Nothing restores into a disk nobody holds: any staging is a killed host's.
            remove_stale_staging(self.mountpoint)
            self._move_legacy()
        except BaseException:
            with contextlib.suppress(DiskError):
                unmount(self.mountpoint)
            raise

    def _grow(self) -> None:
        """To the host's size, if it is bigger (``STEAD_SANDBOX_DISK_MB`` was
        raised since the disk was made). One that cannot grow is mounted at
        its own size: the sandbox still has its files and its disk."""
        try:
            grown = grow_image(self.image, self._wanted)
        except (DiskError, OSError) as exc:
            grown = False
            log.warning("sandbox disk %s keeps its size: %s", self.image, exc)
        self.size_bytes = fs_bytes(self.image)
        if grown:
            log.info("sandbox disk %s: grown to %d MiB", self.image, self.size_mib)

    def _move_legacy(self) -> None:
        for name in LEGACY:
            old = self.root / name
            # Renamed once copied, then deleted: a host killed while deleting it
            # left a part of it, which must not replace the whole copy on the disk.
            moved = self.root / f"{name}{MOVED}"
            remove_tree(moved, ignore_errors=True)
            if old.is_symlink() or not old.is_dir():
                continue
            new = self.mountpoint / name
            remove_tree(new, ignore_errors=True)
            argv = ["cp", "-a", "--sparse=always", "--", str(old), str(new)]
            try:
                done = subprocess.run(argv, capture_output=True, timeout=MOVE_SECONDS, check=False)
            except (OSError, subprocess.TimeoutExpired) as exc:
                remove_tree(new, ignore_errors=True)
                raise DiskError(errno.EIO, f"cannot move its {name} onto it: {exc}") from None
            if done.returncode != 0:
                remove_tree(new, ignore_errors=True)
                said = done.stderr.decode(errors="replace")
                code = errno.ENOSPC if "No space left" in said else errno.EIO
                raise DiskError(
                    code,
                    f"the sandbox's {name} on the host's disk does not fit its disk of "
                    f"{self.size_mib} MiB (STEAD_SANDBOX_DISK_MB)"
                    if code == errno.ENOSPC
                    else f"cannot move its {name} onto its disk: {said.strip()[-300:]}",
                )
            os.sync()  # the copy is on the host's disk before the original goes
            old.rename(moved)
            remove_tree(moved)
            log.info("sandbox disk %s: moved its %s onto it", self.mountpoint, name)

    def _remove(self) -> None:
        with contextlib.suppress(DiskError):
            unmount(self.mountpoint, lazy=True)
        self.image.unlink(missing_ok=True)
        self.image.with_name(self.image.name + ".new").unlink(missing_ok=True)


def unmount_all(sandboxes: Path) -> int:
    """Unmounts every disk mounted under ``sandboxes``: a host killed with
    sandboxes awake left them. Only at start, before any sandbox is held. One
    still busy (its body not yet gone) is detached lazily; its image is not
    mounted again before it has gone (``SandboxDisk._mount``). Returns how many."""
    found = mounts_under(sandboxes)
    for point in found:
        try:
            unmount(point)
        except DiskError:
            with contextlib.suppress(DiskError):
                unmount(point, lazy=True)
    return len(found)
