"""The vault's sealing and its key: AES-GCM bound to a row, and where the key lives."""

from __future__ import annotations

import base64
from pathlib import Path

import pytest

from stead.config import Settings
from stead.store import SqlStore
from stead.store.inmemory import InMemoryStore
from stead.vault import (
    KeySetupError,
    SealError,
    SecretBox,
    check_kept_key,
    keep_key,
    kept_key_id,
    load_secret_box,
)
from stead.vault.keys import begin_file_rotation, finish_file_rotation, new_key
from tests.databases import STORES

SECRET = {"token": "sk-unit-secret"}


def test_a_sealed_secret_opens_only_for_its_row_and_key() -> None:
    box = SecretBox(new_key())
    sealed = box.seal("vcrd_1", SECRET)
    assert b"sk-unit-secret" not in sealed
    assert box.open("vcrd_1", sealed) == SECRET
    with pytest.raises(SealError, match="another row"):
        box.open("vcrd_2", sealed)
    altered = sealed[:-1] + bytes([sealed[-1] ^ 1])
    with pytest.raises(SealError, match="altered"):
        box.open("vcrd_1", altered)
    with pytest.raises(SealError, match="not this installation's secret key"):
        SecretBox(new_key()).open("vcrd_1", sealed)
    assert box.seal("vcrd_1", SECRET) != sealed  # a fresh nonce each time
    assert "sk-unit-secret" not in repr(box)


def test_an_older_key_still_opens_during_a_rotation() -> None:
    old, new = new_key(), new_key()
    sealed = SecretBox(old).seal("vcrd_1", SECRET)
    rotating = SecretBox(new, (old,))
    assert rotating.open("vcrd_1", sealed) == SECRET
    assert not rotating.sealed_by_current_key(sealed)
    assert rotating.sealed_by_current_key(rotating.seal("vcrd_1", SECRET))


def test_the_key_file_is_made_once_with_mode_0600(tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path)
    first = load_secret_box(settings)
    key_file = tmp_path / "secret.key"
    assert key_file.stat().st_mode & 0o777 == 0o600
    assert load_secret_box(settings).key_id == first.key_id
    key_file.chmod(0o644)
    with pytest.raises(KeySetupError, match="chmod 600"):
        load_secret_box(settings)


@pytest.mark.parametrize(
    ("value", "problem"),
    [("not base64 at all!", "base64"), (base64.b64encode(b"short").decode(), "32 bytes")],
)
def test_a_bad_secret_key_setting_is_named(tmp_path: Path, value: str, problem: str) -> None:
    with pytest.raises(KeySetupError, match=f"STEAD_SECRET_KEY: .*{problem}"):
        load_secret_box(Settings(data_dir=tmp_path, secret_key=value))
    assert not (tmp_path / "secret.key").exists()


def test_the_setting_wins_over_the_file(tmp_path: Path) -> None:
    key = new_key()
    box = load_secret_box(Settings(data_dir=tmp_path, secret_key=base64.b64encode(key).decode()))
    assert box.key_id == SecretBox(key).key_id


def test_an_interrupted_file_rotation_leaves_every_secret_readable(tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path)
    sealed_old = load_secret_box(settings).seal("vcrd_1", SECRET)
    rotating = begin_file_rotation(tmp_path)
    sealed_new = rotating.seal("vcrd_1", SECRET)
    # Interrupted here: a start sees both keys.
    during = load_secret_box(settings)
    assert during.open("vcrd_1", sealed_old) == during.open("vcrd_1", sealed_new) == SECRET
    assert begin_file_rotation(tmp_path).key_id == rotating.key_id  # resumed, not restarted
    finish_file_rotation(tmp_path)
    after = load_secret_box(settings)
    assert after.key_id == rotating.key_id
    assert after.open("vcrd_1", sealed_new) == SECRET
    assert not (tmp_path / "secret.key.next").exists()


@pytest.mark.anyio
@pytest.mark.parametrize("database_url", STORES, indirect=True)
async def test_the_database_keeps_the_key_its_secrets_are_sealed_under(
    store: SqlStore | InMemoryStore,
) -> None:
    old = new_key()
    first, second = SecretBox(old), SecretBox(new_key())
    await check_kept_key(store, first, "STEAD_SECRET_KEY")  # kept now
    await check_kept_key(store, first, "STEAD_SECRET_KEY")
    with pytest.raises(KeySetupError) as refused:
        await check_kept_key(store, second, "STEAD_SECRET_KEY")
    assert str(refused.value).startswith(
        f"STEAD_SECRET_KEY is key {second.key_id.hex()}, but this database's secrets are "
        f"sealed under key {first.key_id.hex()}"
    )
    # Mid-rotation, a process with the new key and the old one starts; once every
    # secret is sealed under the new one, a process with only the old is refused.
    rotating = SecretBox(new_key(), (old,))
    await check_kept_key(store, rotating, "STEAD_SECRET_KEY")
    await keep_key(store, rotating)
    assert await kept_key_id(store, first) == rotating.key_id
    with pytest.raises(KeySetupError):
        await check_kept_key(store, first, "STEAD_SECRET_KEY")
