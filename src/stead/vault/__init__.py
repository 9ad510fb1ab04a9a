"""The vault room: credential secrets sealed at rest, and the key that seals them.

Secrets arrive through the vaults API, are sealed (``SecretBox``, AES-256-GCM,
bound to their credential's id) before the store sees them, and are opened only
to hand a session's sandbox its egress credentials or to call an MCP server.
Nothing here logs, and no type here shows a secret in its ``repr``. Imports
only the shared modules.
"""

from stead.vault.cipher import SealError, SecretBox, sealed_key_id
from stead.vault.kept_key import KEPT_KEY, check_kept_key, keep_key, kept_key_id
from stead.vault.keys import KeySetupError, key_source, load_secret_box

__all__ = [
    "KEPT_KEY",
    "KeySetupError",
    "SealError",
    "SecretBox",
    "check_kept_key",
    "keep_key",
    "kept_key_id",
    "key_source",
    "load_secret_box",
    "sealed_key_id",
]
