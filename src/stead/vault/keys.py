"""Where the installation's secret key comes from, and how it is replaced.

``STEAD_SECRET_KEY`` (base64 of 32 bytes) when set, with
``STEAD_SECRET_KEY_PREVIOUS`` still accepted for opening during a rotation;
otherwise ``<data dir>/secret.key``, made once with mode 0600. A rotation of the
key file first writes ``secret.key.next`` (which opening also accepts), then
re-seals every secret, then renames it over ``secret.key``: a crash at any point
leaves every secret readable.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import os
import secrets
import stat
from pathlib import Path

from stead.config import Settings
from stead.vault.cipher import KEY_BYTES, SecretBox

KEY_FILE = "secret.key"
NEXT_KEY_FILE = "secret.key.next"


class KeySetupError(Exception):
    """The secret key cannot be used; the message names the setting or file."""


def decode_key(text: str, where: str) -> bytes:
    try:
        key = base64.b64decode(text.strip().encode(), altchars=b"-_", validate=True)
    except (binascii.Error, ValueError):
        raise KeySetupError(f"{where}: not base64") from None
    if len(key) != KEY_BYTES:
        raise KeySetupError(f"{where}: must be base64 of {KEY_BYTES} bytes, got {len(key)} bytes")
    return key


def encode_key(key: bytes) -> str:
    return base64.urlsafe_b64encode(key).decode()


def new_key() -> bytes:
    return secrets.token_bytes(KEY_BYTES)


def _read_key_file(path: Path) -> bytes:
    mode = stat.S_IMODE(path.stat().st_mode)
    if mode & 0o077:
        raise KeySetupError(f"{path}: readable by others (mode {mode:04o}); run chmod 600 on it")
    return decode_key(path.read_text(), str(path))


def write_key_file(path: Path, key: bytes) -> None:
    """Writes ``key`` to ``path`` (mode 0600) only if nothing is there; fsync'd."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        os.write(fd, (encode_key(key) + "\n").encode())
        os.fsync(fd)
    finally:
        os.close(fd)


def _file_key(data_dir: Path) -> tuple[bytes, tuple[bytes, ...]]:
    path = data_dir / KEY_FILE
    if not path.exists():
        # O_EXCL: of two processes starting on a new data directory, one writes
        # and both read what it wrote.
        with contextlib.suppress(FileExistsError):
            write_key_file(path, new_key())
    key = _read_key_file(path)
    upcoming = data_dir / NEXT_KEY_FILE
    return key, ((_read_key_file(upcoming),) if upcoming.exists() else ())


def key_source(settings: Settings) -> str:
    """Where ``load_secret_box`` takes the key from, as an error names it."""
    if settings.secret_key is not None:
        return "STEAD_SECRET_KEY"
    return str(settings.data_dir / KEY_FILE)


def load_secret_box(settings: Settings) -> SecretBox:
    """The box for this installation (see the module docstring for where keys live);
    ``KeySetupError`` names the setting or file when the key cannot be used."""
    if settings.secret_key is not None:
        key = decode_key(settings.secret_key.get_secret_value(), "STEAD_SECRET_KEY")
        older: tuple[bytes, ...] = ()
        if settings.secret_key_previous is not None:
            previous = settings.secret_key_previous.get_secret_value()
            older = (decode_key(previous, "STEAD_SECRET_KEY_PREVIOUS"),)
        return SecretBox(key, older)
    try:
        key, upcoming = _file_key(settings.data_dir)
    except OSError as exc:
        raise KeySetupError(f"{settings.data_dir / KEY_FILE}: {exc.strerror or exc}") from None
    return SecretBox(key, upcoming)


def begin_file_rotation(data_dir: Path) -> SecretBox:
    """Starts replacing the key file: a box that seals under a new key (kept in
    ``secret.key.next``) and still opens under the current one."""
    current = _read_key_file(data_dir / KEY_FILE)
    upcoming_path = data_dir / NEXT_KEY_FILE
    if upcoming_path.exists():
        upcoming = _read_key_file(upcoming_path)  # an interrupted rotation: finish it
    else:
        upcoming = new_key()
        write_key_file(upcoming_path, upcoming)
    return SecretBox(upcoming, (current,))


def finish_file_rotation(data_dir: Path) -> None:
    os.replace(data_dir / NEXT_KEY_FILE, data_dir / KEY_FILE)
    fd = os.open(data_dir, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
