"""Which key a database's secrets are sealed under, kept in the database itself.

Every process that opens one database must seal with the same key. A server
started with another ``STEAD_SECRET_KEY``, or on a data directory whose key
file was lost and made anew, would seal what no other process can open, and
open nothing sealed before it; each vault credential would fail only when a
session first used it. So the first process to check keeps its key's id (8
bytes of the key's SHA-256, ``cipher.key_id``, which every sealed value already
carries in the clear) in the database, and a process that holds no key of that
id is refused at start. A rotation moves the kept id to the new key before it
re-seals anything; ``forget-key`` moves it after a key is lost. A process that
started before the move still holds the old key: the store refuses every sealed
value it would write under a key other than the kept one, in the write's own
transaction (``stead.store.StaleSecretKey``), so nothing is stored that the
dropped key alone opens.
"""

from __future__ import annotations

from typing import Protocol

from stead.vault.cipher import SecretBox
from stead.vault.keys import KeySetupError

KEPT_KEY = "secret_key_id"
"""The installation value (``installation_secrets`` row) that holds the key's id."""


class KeptValues(Protocol):
    """The store's installation values (``Store.installation_value``)."""

    async def installation_value(self, name: str, value: bytes) -> bytes: ...

    async def replace_installation_value(self, name: str, value: bytes) -> None: ...


async def kept_key_id(store: KeptValues, box: SecretBox) -> bytes:
    """The id of the key the database's secrets are sealed under (``box``'s, kept
    now, when the database kept none)."""
    return await store.installation_value(KEPT_KEY, box.key_id)


async def check_kept_key(store: KeptValues, box: SecretBox, source: str) -> None:
    """Raises ``KeySetupError`` naming ``source`` (where ``box``'s key came from)
    when ``box`` holds no key of the database's kept id."""
    kept = await kept_key_id(store, box)
    if not box.holds(kept):
        raise KeySetupError(
            f"{source} is key {box.key_id.hex()}, but this database's secrets are sealed "
            f"under key {kept.hex()}: every stead process of one database needs the same "
            "key. If that key is lost, `stead secrets forget-key --lost "
            f"{kept.hex()}` makes this one the database's (what the lost key sealed "
            "stays unreadable)"
        )


async def keep_key(store: KeptValues, box: SecretBox) -> None:
    """Makes ``box``'s key the database's (every secret is sealed under it now)."""
    await store.replace_installation_value(KEPT_KEY, box.key_id)
