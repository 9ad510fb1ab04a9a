"""One brain per embedded store: an exclusive lock on the data directory.

With SQLite, a single ``stead serve`` owns the database; holding this lock is
what lets it treat every run owned by another process as orphaned at start and
recover it at once, instead of waiting for the run's lease to expire.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


class DataDirInUse(RuntimeError):
    pass


@contextmanager
def brain_lock(data_dir: Path) -> Iterator[None]:
    data_dir.mkdir(parents=True, exist_ok=True)
    path = data_dir / "brain.lock"
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise DataDirInUse(
                f"another stead serve is running on {data_dir}; stop it or use another "
                "STEAD_DATA_DIR"
            ) from None
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        yield
    finally:
        os.close(fd)
