"""Webhook signing secrets and signatures, in the Standard Webhooks scheme the
SDK's ``beta.webhooks.unwrap()`` verifies: the secret is ``whsec_`` + base64 of
the key; each delivery carries ``webhook-id``, ``webhook-timestamp`` (Unix
seconds) and ``webhook-signature`` = ``v1,`` + base64(HMAC-SHA256(key,
"{id}.{timestamp}.{body}")).

A secret is sealed (``stead.vault``) before the store sees it, bound to its
endpoint's id, and opened only to sign. Nothing here logs.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets

from stead.vault import SecretBox

PREFIX = "whsec_"
KEY_BYTES = 32


def new_secret() -> str:
    return PREFIX + base64.b64encode(secrets.token_bytes(KEY_BYTES)).decode()


def _bound_to(endpoint_id: str) -> str:
    return f"webhook:{endpoint_id}"


def seal_secret(box: SecretBox, endpoint_id: str, secret: str) -> bytes:
    return box.seal(_bound_to(endpoint_id), {"secret": secret})


def open_secret(box: SecretBox, endpoint_id: str, sealed: bytes) -> str:
    """Raises ``SealError`` when ``sealed`` is not this endpoint's secret under a
    key the box holds."""
    return str(box.open(_bound_to(endpoint_id), sealed)["secret"])


def resealed(box: SecretBox, endpoint_id: str, sealed: bytes) -> bytes | None:
    """``sealed`` sealed again under the box's current key, or None when it is
    already (``stead secrets rotate-key``)."""
    if box.sealed_by_current_key(sealed):
        return None
    return seal_secret(box, endpoint_id, open_secret(box, endpoint_id, sealed))


def signed_headers(secret: str, message_id: str, timestamp: int, body: str) -> dict[str, str]:
    key = base64.b64decode(secret.removeprefix(PREFIX))
    signed = f"{message_id}.{timestamp}.{body}".encode()
    signature = base64.b64encode(hmac.new(key, signed, hashlib.sha256).digest()).decode()
    return {
        "webhook-id": message_id,
        "webhook-timestamp": str(timestamp),
        "webhook-signature": f"v1,{signature}",
    }
