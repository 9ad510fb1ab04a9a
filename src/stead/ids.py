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
    "session_thread": "sthr",
}


_ACCEPTED = 4 * len(_ALPHABET)
"""Random bytes below this (232) are kept, each giving the digit ``byte % 58``:
an exactly uniform digit, and the rest (about one byte in eleven) are dropped."""
_DIGITS = bytes.maketrans(bytes(range(_ACCEPTED)), (_ALPHABET * 4).encode())
_DROPPED = bytes(range(_ACCEPTED, 256))
_DRAW = 32
"""Random bytes drawn at a time: 24 digits need a 25th draw about once in 3000 ids."""


def new_id(kind: str) -> str:
    """A fresh id of ``kind`` (a key of ``PREFIXES``)."""
    # Bytes mapped to digits by one C call each (``translate``): a base58
    # conversion of a big number took 24 divisions in Python, and every event,
    # request and run gets an id.
    body = b""
    while len(body) < _BODY_LENGTH:
        body += secrets.token_bytes(_DRAW).translate(_DIGITS, _DROPPED)
    return f"{PREFIXES[kind]}_{body[:_BODY_LENGTH].decode()}"


def primary_thread_id(session_id: str) -> str:
    """The id of a session's primary thread: the session's, under the thread
    prefix (``api/threads.py``), the same wherever it is worked out."""
    session = PREFIXES["session"] + "_"
    return f"{PREFIXES['session_thread']}_{session_id.removeprefix(session)}"
