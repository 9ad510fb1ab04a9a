"""One brain per embedded store: an exclusive lock on the data directory, and
on the SQLite database when ``STEAD_DATABASE_URL`` puts it elsewhere.

With SQLite, a single ``stead serve`` owns the database; holding this lock is
what lets it treat every run owned by another process as orphaned at start and
recover it at once, instead of waiting for the run's lease to expire. The
database's own lock keeps a second server with another data directory (and so
another key file) off it: two brains would each take the other's runs for
orphans, and seal credentials under keys the other cannot open.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path


class DataDirInUse(RuntimeError):
    """Another ``stead serve`` holds the data directory or the database, or the
    lock cannot be made there at all; the message says which, in one line."""


@contextmanager
def brain_lock(data_dir: Path, database: Path | None = None) -> Iterator[None]:
    """``database``: the SQLite file, locked too (``<file>.lock`` beside it),
    wherever it is: another data directory may name it."""
    data_dir.mkdir(parents=True, exist_ok=True)
    with ExitStack() as held:
        held.enter_context(
            _held(
                data_dir / "brain.lock",
                f"another stead serve is running on {data_dir}; stop it or use another "
                "STEAD_DATA_DIR",
            )
        )
        if database is not None:
            held.enter_context(
                _held(
                    database.with_name(database.name + ".lock"),
                    f"another stead serve is running on the database {database}; stop it "
                    "or use another STEAD_DATABASE_URL",
                )
            )
        yield


@contextmanager
def _held(path: Path, in_use: str) -> Iterator[None]:
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    except OSError as exc:  # a directory that is not there, or not writable
        raise DataDirInUse(f"cannot lock {path}: {exc.strerror or exc}") from None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise DataDirInUse(in_use) from None
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        yield
    finally:
        os.close(fd)
