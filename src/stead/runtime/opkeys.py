"""Op keys for the side-effect ledger (DESIGN rule 5).

``sha256(kind, canonical(args), run id, position)``: the same side effect asked
for again after a crash gets the same key; anything else gets another.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any


def canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def op_key(kind: str, args: Any, run_id: str, position: str | int) -> str:
    material = "\x1f".join((kind, canonical(args), run_id, str(position)))
    return hashlib.sha256(material.encode()).hexdigest()
