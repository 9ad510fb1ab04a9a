"""The tables of memory stores: stores, memories, their versions, and what each
session has of them (its stores, the bases of its mounted files)."""

from __future__ import annotations

from sqlalchemy import (
    Column,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    String,
    Table,
    Text,
    UniqueConstraint,
)

from stead.store.column_types import JsonType, UTCDateTime
from stead.store.tables.core import metadata

PathText = Text().with_variant(Text(collation="C"), "postgresql")
"""Memory paths compare bytewise on every backend (SQLite's default; "C" on
PostgreSQL), so a listing's order and its prefix ranges agree."""

memory_stores = Table(
    "memory_stores",
    metadata,
    Column("id", String(64), primary_key=True),
    Column("workspace_id", String(64), ForeignKey("workspaces.id"), nullable=False),
    Column("name", Text, nullable=False),
    Column("description", Text, nullable=False),
    Column("metadata", JsonType, nullable=False),
    Column("created_at", UTCDateTime, nullable=False),
    Column("updated_at", UTCDateTime, nullable=False),
    Column("archived_at", UTCDateTime, nullable=True),
    Index("ix_memory_stores_workspace_created", "workspace_id", "created_at", "id"),
)

memories = Table(
    "memories",
    metadata,
    Column("id", String(64), primary_key=True),
    Column("memory_store_id", String(64), ForeignKey("memory_stores.id"), nullable=False),
    Column("path", PathText, nullable=False),
    Column("content_sha256", String(64), nullable=False),
    Column("content_size_bytes", Integer, nullable=False),
    Column("version_id", String(64), nullable=False),
    Column("blob_key", Text, nullable=False),
    Column("created_at", UTCDateTime, nullable=False),
    Column("updated_at", UTCDateTime, nullable=False),
    UniqueConstraint("memory_store_id", "path", name="uq_memories_store_path"),
)
"""The memories that exist now, each at its current version (``_memories.py``)."""

memory_versions = Table(
    "memory_versions",
    metadata,
    Column("id", String(64), primary_key=True),
    Column("workspace_id", String(64), nullable=False),
    Column("memory_store_id", String(64), nullable=False),
    Column("memory_id", String(64), nullable=False),
    Column("operation", String(16), nullable=False),
    Column("path", PathText, nullable=True),
    Column("content_sha256", String(64), nullable=True),
    Column("content_size_bytes", Integer, nullable=True),
    Column("blob_key", Text, nullable=True),
    Column("actor_type", String(32), nullable=True),
    Column("actor_id", String(64), nullable=True),
    Column("created_at", UTCDateTime, nullable=False),
    Column("committed_at", UTCDateTime, nullable=True),
    Column("blob_released_at", UTCDateTime, nullable=True),
    Column("redacted_at", UTCDateTime, nullable=True),
    Column("redacted_by_type", String(32), nullable=True),
    Column("redacted_by_id", String(64), nullable=True),
    Column("embedding", LargeBinary, nullable=True),
    Index("ix_memory_versions_store_created", "memory_store_id", "created_at", "id"),
    Index("ix_memory_versions_memory", "memory_id"),
    Index("ix_memory_versions_committed", "committed_at"),
    Index("ix_memory_versions_released", "blob_released_at"),
)
"""Every write of a memory (``_memories.py``), visible once ``committed_at`` is
set. Rows outlive their memory and, until the purger removed their blob
(``blob_released_at`` set), their store: so no foreign key to either.
``embedding`` is the content's vector (``runtime.minilm``, float16), cleared with
the content when the version is redacted."""

session_memory_stores = Table(
    "session_memory_stores",
    metadata,
    Column("session_id", String(64), primary_key=True),
    Column("memory_store_id", String(64), primary_key=True),
    Column("workspace_id", String(64), ForeignKey("workspaces.id"), nullable=False),
    Index("ix_session_memory_stores_store", "workspace_id", "memory_store_id"),
)
"""Which memory stores each session has as resources (written with the
session, removed with it): what ``sessions.list``'s ``memory_store_id`` filters on."""

memory_mounts = Table(
    "memory_mounts",
    metadata,
    Column("session_id", String(64), primary_key=True),
    Column("memory_store_id", String(64), primary_key=True),
    Column("path", String(1024), primary_key=True),
    Column("memory_id", String(64), nullable=False),
    Column("sha256", String(64), nullable=False),
    Column("workspace_id", String(64), ForeignKey("workspaces.id"), nullable=False),
    Column("updated_at", UTCDateTime, nullable=False),
)
"""The base of each memory file in a session's sandbox (``_memory_mounts.py``):
the memory at ``path`` and the content hash the file had when it was last put
there or written back. A file that differs from its base is the agent's change;
a write-back moves the base in the transaction that commits the change, so a
change is written back once, even when a crash cuts the write-back short."""
