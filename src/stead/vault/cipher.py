"""Sealing credential secrets at rest: AES-256-GCM under the installation's key.

A sealed value is ``VERSION | key id | nonce | ciphertext+tag``. The key id (the
first bytes of the key's SHA-256) says which key sealed it, so after a rotation
the CLI can tell what is still under the old key, and opening under the wrong key
fails with a message that says so instead of "bad tag". The associated data
binds a sealed value to the row it was written for: a ciphertext copied onto
another credential does not open.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping
from typing import TYPE_CHECKING

from stead.jsonvalues import Json

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

VERSION = b"\x01"
KEY_BYTES = 32
KEY_ID_BYTES = 8
NONCE_BYTES = 12


class SealError(Exception):
    """A sealed secret cannot be opened: another key sealed it, or it was altered."""


def key_id(key: bytes) -> bytes:
    return hashlib.sha256(key).digest()[:KEY_ID_BYTES]


def sealed_key_id(sealed: bytes) -> bytes:
    """The id of the key that sealed ``sealed`` (carried in the clear; reading it
    opens nothing)."""
    return sealed[1 : 1 + KEY_ID_BYTES]


class SecretBox:
    """Seals with one key; opens with it or any of ``older`` (during a rotation)."""

    def __init__(self, key: bytes, older: tuple[bytes, ...] = ()) -> None:
        for k in (key, *older):
            if len(k) != KEY_BYTES:
                raise ValueError(f"a secret key is {KEY_BYTES} bytes, got {len(k)}")
        self._key_id = key_id(key)
        self._keys = {key_id(k): k for k in (*older, key)}
        self._ciphers: dict[bytes, AESGCM] = {}

    def __repr__(self) -> str:
        return f"SecretBox(key_id={self._key_id.hex()})"

    @property
    def key_id(self) -> bytes:
        return self._key_id

    def holds(self, kid: bytes) -> bool:
        """Whether a key of id ``kid`` opens here (this box's or an older one)."""
        return kid in self._keys

    def _cipher(self, kid: bytes) -> AESGCM | None:
        # cryptography costs a server 6 MB: loaded when a secret is first sealed
        # or opened, not at start.
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM

        key = self._keys.get(kid)
        if key is None:
            return None
        if kid not in self._ciphers:
            self._ciphers[kid] = AESGCM(key)
        return self._ciphers[kid]

    def seal(self, bound_to: str, secret: Mapping[str, object]) -> bytes:
        nonce = os.urandom(NONCE_BYTES)
        plain = json.dumps(secret, separators=(",", ":"), sort_keys=True).encode()
        cipher = self._cipher(self._key_id)
        assert cipher is not None
        sealed: bytes = cipher.encrypt(nonce, plain, bound_to.encode())
        return VERSION + self._key_id + nonce + sealed

    def open(self, bound_to: str, sealed: bytes) -> Json:
        if sealed[:1] != VERSION or len(sealed) < 1 + KEY_ID_BYTES + NONCE_BYTES:
            raise SealError("not a sealed secret of a version this stead knows")
        kid = sealed_key_id(sealed)
        cipher = self._cipher(kid)
        if cipher is None:
            raise SealError(
                f"sealed under key {kid.hex()}, which is not this installation's secret key "
                "(STEAD_SECRET_KEY or <data dir>/secret.key)"
            )
        nonce = sealed[1 + KEY_ID_BYTES : 1 + KEY_ID_BYTES + NONCE_BYTES]
        from cryptography.exceptions import InvalidTag

        try:
            plain = cipher.decrypt(
                nonce, sealed[1 + KEY_ID_BYTES + NONCE_BYTES :], bound_to.encode()
            )
        except InvalidTag:
            raise SealError("the sealed secret was altered or belongs to another row") from None
        value = json.loads(plain)
        if not isinstance(value, dict):
            raise SealError("the sealed secret is not an object")
        return value

    def sealed_by_current_key(self, sealed: bytes) -> bool:
        return sealed_key_id(sealed) == self._key_id
