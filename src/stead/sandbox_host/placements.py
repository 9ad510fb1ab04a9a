"""Which copy of a sandbox is current when sandboxes move between hosts.

A sandbox's lease counts its placements (``ops.SandboxRequest.placement``):
one more each time it is put on a host, first or after its host was lost. A
host's copy belongs to the placement it was made or taken at. Every snapshot
a host takes is named in a manifest in the shared blob store, beside the
snapshot itself, under the placement it belongs to: so the latest snapshot of a
sandbox is found without the host that took it (which may be gone for good),
by any host that shares the blob store, and a host that was thought gone and
snapshots late writes under its old placement, which never shadows a newer one.

The manifests live in the blob store rather than the brain's database because
the host snapshots on its own (an idle sandbox sleeps with no brain running),
the blob store is what hosts already share, and a manifest is written right
after the snapshot it names, by the only process that knows it exists.
"""

from __future__ import annotations

import json
import urllib.parse
from dataclasses import dataclass

from stead.blobs import BlobNotFound, BlobStore
from stead.sandbox_host.catalogue import SnapshotRow

DIGITS = 20
"""Placement numbers are zero-padded so that names sort as numbers."""
SANDBOXES = "sandboxes"
"""Where every sandbox's blobs live, each under its own ``sandbox_prefix``."""


@dataclass(frozen=True, slots=True)
class Manifest:
    placement: int
    snapshot: SnapshotRow
    """The placement's latest snapshot (``deleted_at`` is None)."""


def sandbox_prefix(sandbox_id: str) -> str:
    """Where every blob of the sandbox lives: its snapshots and their manifests."""
    return f"{SANDBOXES}/{urllib.parse.quote(sandbox_id, safe='')}"


def erased_key(sandbox_id: str) -> str:
    """The marker an erase leaves (``workspace.erase_snapshots``), so a host that
    still holds a stale copy deletes what it saves of it later. The only blob of
    the sandbox that stays: it holds no data, and its id is never used again."""
    return f"{sandbox_prefix(sandbox_id)}/erased"


def _prefix(sandbox_id: str) -> str:
    return f"{sandbox_prefix(sandbox_id)}/placements"


def manifest_key(sandbox_id: str, placement: int) -> str:
    return f"{_prefix(sandbox_id)}/{placement:0{DIGITS}d}.json"


async def write_manifest(blobs: BlobStore, placement: int, snapshot: SnapshotRow) -> None:
    """Names ``snapshot`` (verified, recorded) as the latest of its sandbox at
    ``placement``; raises the blob store's errors."""
    body = {
        "placement": placement,
        "id": snapshot.id,
        "blob_key": snapshot.blob_key,
        "size": snapshot.size,
        "sha256": snapshot.sha256,
        "created_at": snapshot.created_at,
        "expires_at": snapshot.expires_at,
    }
    await blobs.put_bytes(manifest_key(snapshot.sandbox_id, placement), json.dumps(body).encode())


def claim_key(sandbox_id: str, placement: int) -> str:
    return f"{_prefix(sandbox_id)}/{placement:0{DIGITS}d}.claim"


async def claim_placement(blobs: BlobStore, sandbox_id: str, placement: int) -> None:
    """Marks ``placement`` as taken before the host taking it reads which
    snapshot is the latest: a host holding a copy of an earlier placement then
    sees its copy is stale (``newest_placement``) and deletes no snapshot the
    new placement may be about to restore. A claim names no snapshot (readers
    of the latest manifest pass it by) and never replaces a manifest. Raises
    the blob store's errors."""
    await blobs.put_bytes(claim_key(sandbox_id, placement), b"")


async def newest_placement(blobs: BlobStore, sandbox_id: str) -> int | None:
    """The highest placement any host claimed or snapshotted the sandbox at;
    None if none did. Raises the blob store's errors."""
    numbers = [_number(info.key) for info in await blobs.list(_prefix(sandbox_id))]
    return max((n for n in numbers if n is not None), default=None)


def _number(key: str) -> int | None:
    name, _, kind = key.rpartition("/")[2].partition(".")
    return int(name) if kind in ("json", "claim") and name.isascii() and name.isdigit() else None


async def latest_manifest(blobs: BlobStore, sandbox_id: str) -> Manifest | None:
    """The manifest of the sandbox's highest placement; None if no host ever
    snapshotted it. A manifest that does not parse is skipped for the one
    before it (a torn write on a store without atomic puts)."""
    listed = sorted(
        info.key for info in await blobs.list(_prefix(sandbox_id)) if info.key.endswith(".json")
    )
    for key in reversed(listed):
        try:
            found = _parse(sandbox_id, await blobs.get_bytes(key))
        except BlobNotFound:
            continue
        if found is not None:
            return found
    return None


def _parse(sandbox_id: str, data: bytes) -> Manifest | None:
    try:
        body = json.loads(data)
        snapshot = SnapshotRow(
            id=str(body["id"]),
            sandbox_id=sandbox_id,
            blob_key=str(body["blob_key"]),
            size=int(body["size"]),
            sha256=str(body["sha256"]),
            created_at=float(body["created_at"]),
            expires_at=float(body["expires_at"]),
            deleted_at=None,
        )
        return Manifest(int(body["placement"]), snapshot)
    except (ValueError, TypeError, KeyError):
        return None
