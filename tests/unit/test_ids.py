"""Public ids: their form, and digits drawn uniformly from the base58 alphabet."""

from __future__ import annotations

from collections import Counter

from stead.ids import PREFIXES, new_id

ALPHABET = set("123456789ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz")


def test_an_id_is_its_kinds_prefix_and_24_base58_digits() -> None:
    for kind, prefix in PREFIXES.items():
        made = new_id(kind)
        head, _, body = made.partition("_")
        assert head == prefix and len(body) == 24 and set(body) <= ALPHABET


def test_ids_differ_and_every_digit_is_drawn_evenly() -> None:
    made = [new_id("event") for _ in range(3000)]
    assert len(set(made)) == len(made)
    counts = Counter("".join(m.partition("_")[2] for m in made))
    expected = 3000 * 24 / len(ALPHABET)  # about 1241, give or take 35
    assert set(counts) == ALPHABET
    assert all(0.8 * expected < n < 1.2 * expected for n in counts.values())
