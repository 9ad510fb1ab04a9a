"""Op keys for the side-effect ledger (DESIGN rule 5).

``sha256(kind, canonical(args), run id, position)``: the same side effect asked
for again after a crash gets the same key; anything else gets another.
"""

from __future__ import annotations

import hashlib
from typing import Any

from stead.jsonvalues import canonical


def op_key(kind: str, args: Any, run_id: str, position: str | int) -> str:
    return op_key_of(kind, canonical(args), run_id, position)


def op_key_of(kind: str, canonical_args: str, run_id: str, position: str | int) -> str:
    """``op_key`` of args whose ``canonical`` form the caller has already made."""
    material = "\x1f".join((kind, canonical_args, run_id, str(position)))
    return hashlib.sha256(material.encode()).hexdigest()
