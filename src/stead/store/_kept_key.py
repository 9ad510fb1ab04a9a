"""A secret is stored only sealed under the database's kept key (``stead.vault.kept_key``).

A process checks its key against the kept id when it starts; ``stead secrets
rotate-key`` moves the id while other processes run (on PostgreSQL nothing stops
it). A process left on the old key would go on sealing what only the old key
opens, lost once the operator drops it. So every write that stores a sealed value
reads the kept id in its own transaction and refuses a value sealed under
another key (``StaleSecretKey``). On PostgreSQL the read holds the kept row
shared until commit: a rotation's move of the id waits for the writes that read
the old id, and its re-sealing, which follows the move, sees what they wrote.
A database that kept no id yet (a store opened by no server) takes any key.
"""

from __future__ import annotations

from collections.abc import Iterable

from sqlalchemy import Connection, select

from stead.store.errors import StaleSecretKey
from stead.store.tables import installation_secrets
from stead.vault import KEPT_KEY, sealed_key_id


def kept(conn: Connection) -> bytes | None:
    """The kept key's id, held (shared) until commit on PostgreSQL."""
    found = conn.execute(
        select(installation_secrets.c.value)
        .where(installation_secrets.c.name == KEPT_KEY)
        .with_for_update(read=True)
    ).scalar_one_or_none()
    return None if found is None else bytes(found)


def check(conn: Connection, *sealed: bytes | None) -> None:
    """Raises ``StaleSecretKey`` unless each of ``sealed`` (None: no value) is
    sealed under the kept key. Call it in the transaction that stores them."""
    if any(value is not None for value in sealed):
        refuse_others(kept(conn), sealed)


def refuse_others(kept: bytes | None, sealed: Iterable[bytes | None]) -> None:
    """Raises ``StaleSecretKey`` for the first of ``sealed`` (None: no value) not
    sealed under ``kept`` (the kept key's id; None: none is kept, any key will do)."""
    if kept is None:
        return
    for value in sealed:
        under = None if value is None else sealed_key_id(value)
        if under is not None and under != kept:
            raise StaleSecretKey(under, kept)
