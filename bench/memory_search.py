"""Memory search: ``MemoryKeeper.search`` over a store of 10,000 memories, against
the least a search can do.

What is measured: the wall time of one semantic search in a store of
``MEMORIES`` memories, as ``POST /v1/memory_stores/{id}/search`` runs it minus
HTTP: read every current version's vector from the store (SQLite), embed the
query with all-MiniLM-L6-v2 (numpy, one thread), score all vectors and sort.
The baseline embeds the same query with the same model and scores the same
vectors already in memory: the model's cost and a matrix product, nothing
stead adds. The two alternate per query, after a warm-up.

Seeding: ``DISTINCT`` real texts are embedded with the model; the memories are
then written straight into the store's tables in one transaction, each with the
vector of text ``i % DISTINCT`` (embedding 10,000 texts would take minutes on a
busy machine, and a search's cost does not depend on which vectors it scores).
No blobs are written: a search never reads content.
"""

from __future__ import annotations

import hashlib
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

import anyio
import numpy as np
from sqlalchemy import create_engine, insert

from stead.blobs import BlobConfig, open_blob_store
from stead.ids import new_id
from stead.runtime import Embedder, MemoryKeeper
from stead.runtime.memories import VECTOR_DTYPE
from stead.store import open_store
from stead.store.tables import memories, memory_versions

# isort: split
# The shared helpers sit next to this script (sys.path[0] when it is run).
from _common import ms, percentile, size

MEMORIES = size("MEMORIES", 10_000, 200)
DISTINCT = size("DISTINCT", 500, 20)
QUERIES = size("QUERIES", 60, 5)
WARMUP = size("WARMUP", 5, 1)
TOPICS = (
    "database backups",
    "on-call rotation",
    "release checklist",
    "customer refunds",
    "kubernetes upgrades",
    "team lunch",
    "quarterly planning",
    "security review",
    "password reset",
    "invoice numbering",
    "cache invalidation",
    "sourdough baking",
)


def text(i: int) -> str:
    topic = TOPICS[i % len(TOPICS)]
    return f"Note {i} about {topic}: what we decided, who owns it and when to look again."


def seed(url: str, workspace_id: str, store_id: str, vectors: np.ndarray) -> None:
    now = datetime.now(UTC)
    memory_rows, version_rows = [], []
    for i in range(MEMORIES):
        content = text(i)
        memory_id, version_id = new_id("memory"), new_id("memory_version")
        digest = hashlib.sha256(content.encode()).hexdigest()
        path = f"/notes/{i % 97}/{i}.md"
        key = f"memories/{workspace_id}/{store_id}/{version_id}"
        memory_rows.append(
            {
                "id": memory_id,
                "memory_store_id": store_id,
                "path": path,
                "content_sha256": digest,
                "content_size_bytes": len(content),
                "version_id": version_id,
                "blob_key": key,
                "created_at": now,
                "updated_at": now,
            }
        )
        version_rows.append(
            {
                "id": version_id,
                "workspace_id": workspace_id,
                "memory_store_id": store_id,
                "memory_id": memory_id,
                "operation": "created",
                "path": path,
                "content_sha256": digest,
                "content_size_bytes": len(content),
                "blob_key": key,
                "actor_type": "api_actor",
                "actor_id": "apikey_bench",
                "created_at": now,
                "committed_at": now,
                "embedding": vectors[i % len(vectors)].astype(VECTOR_DTYPE).tobytes(),
            }
        )
    engine = create_engine(url)
    with engine.begin() as conn:
        conn.execute(insert(memory_versions), version_rows)
        conn.execute(insert(memories), memory_rows)
    engine.dispose()


async def measure(tmp: Path) -> tuple[list[float], list[float]]:
    url = f"sqlite:///{tmp / 'stead.db'}"
    store = await open_store(url)
    embedder = Embedder()
    try:
        workspace = await store.create_workspace("bench")
        memory_store = await store.create_memory_store(workspace.id, "bench", "", {})
        distinct = await embedder.embed([text(i) for i in range(DISTINCT)])
        await anyio.to_thread.run_sync(seed, url, workspace.id, memory_store.id, distinct)
        blobs = open_blob_store(BlobConfig(url=f"file://{tmp / 'blobs'}"))
        keeper = MemoryKeeper(store, lambda: blobs, embedder, purge_interval=60, upload_grace=60)
        matrix = np.stack([distinct[i % DISTINCT] for i in range(MEMORIES)]).astype(VECTOR_DTYPE)
        stead_times: list[float] = []
        bare_times: list[float] = []
        for q in range(WARMUP + QUERIES):
            query = f"what did we decide about {TOPICS[q % len(TOPICS)]}?"
            for side in ("stead", "bare") if q % 2 == 0 else ("bare", "stead"):
                start = time.perf_counter()
                if side == "stead":
                    hits = await keeper.search(workspace.id, memory_store.id, query, 10)
                    if len(hits) != 10:
                        raise RuntimeError(f"search found {len(hits)} memories, not 10")
                else:
                    wanted = (await embedder.embed([query]))[0]
                    np.argsort(-(matrix.astype(np.float32) @ wanted))[:10]
                elapsed = time.perf_counter() - start
                if q >= WARMUP:
                    (stead_times if side == "stead" else bare_times).append(elapsed)
        return stead_times, bare_times
    finally:
        await store.close()


def run() -> str:
    with tempfile.TemporaryDirectory(prefix="stead-bench-") as tmp:
        stead_times, bare_times = anyio.run(measure, Path(tmp))
    stead_p50, bare_p50 = percentile(stead_times, 50), percentile(bare_times, 50)
    return (
        f"memory_search: stead p50 {ms(stead_p50)} p99 {ms(percentile(stead_times, 99))}"
        f" over {MEMORIES} memories | query embedding + in-memory scoring p50 {ms(bare_p50)}"
        f" | ratio {stead_p50 / bare_p50:.2f}x, stead adds {ms(stead_p50 - bare_p50)} at p50"
        f" | n={len(stead_times)} each"
    )


def main() -> None:
    print(run(), flush=True)


if __name__ == "__main__":
    main()
