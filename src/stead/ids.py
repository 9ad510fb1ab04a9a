"""Public identifiers: ``<prefix>_<24 base58 characters>``, random and opaque to clients."""

from __future__ import annotations

import secrets

_ALPHABET = "123456789ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz"
_BODY_LENGTH = 24

PREFIXES = {
    "agent": "agent",
    "environment": "env",
    "session": "sesn",
    "event": "sevt",
    "workspace": "wrkspc",
    "api_key": "apikey",
    "request": "req",
    "run": "run",
    "vault": "vlt",
    "credential": "vcrd",
    "work": "work",
    "environment_key": "envkey",
    "file": "file",
    "session_resource": "sesrsc",
    "skill": "skill",
    "webhook": "whk",
    "webhook_event": "wevt",
    "webhook_delivery": "whmsg",
    "memory_store": "memstore",
    "memory": "mem",
    "memory_version": "memver",
}


_RANDOM_BYTES = 18
"""144 random bits, more than 24 base58 digits can show, so every digit is uniform."""


def new_id(kind: str) -> str:
    """A fresh id of ``kind`` (a key of ``PREFIXES``)."""
    number = int.from_bytes(secrets.token_bytes(_RANDOM_BYTES), "big")
    digits = []
    for _ in range(_BODY_LENGTH):
        number, digit = divmod(number, 58)
        digits.append(_ALPHABET[digit])
    return f"{PREFIXES[kind]}_{''.join(digits)}"
