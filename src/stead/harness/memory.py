"""How a session's memory stores are described to the model: a system prompt
block naming each store's mount, access, description and the instructions it
was attached with, and the memory search tool, offered only to a session that
has memory stores.

The search tool's name carries stead's prefix so no agent tool is likely to
share it; an agent whose own custom tool has that very name keeps its tool,
and the memory search is not offered to it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from html import escape

from stead.jsonvalues import Json

MEMORY_SEARCH = "stead_memory_search"


@dataclass(frozen=True, slots=True)
class MemoryPrompt:
    """A ``memory_store`` resource as the model is told of it."""

    name: str
    mount_path: str
    access: str
    description: str
    instructions: str | None


def memory_prompts(resources: Sequence[Json]) -> tuple[MemoryPrompt, ...]:
    """The session's ``memory_store`` resources (their stored shape), in order."""
    return tuple(
        MemoryPrompt(
            str(r.get("name") or ""),
            str(r["mount_path"]),
            str(r.get("access") or "read_write"),
            str(r.get("description") or ""),
            r.get("instructions"),
        )
        for r in resources
        if r.get("type") == "memory_store"
    )


def memory_search_offered(agent: Json, memory: Sequence[MemoryPrompt]) -> bool:
    custom = {t.get("name") for t in agent.get("tools", []) if t.get("type") == "custom"}
    return bool(memory) and MEMORY_SEARCH not in custom


def memory_prompt(memory: Sequence[MemoryPrompt], *, search: bool) -> str | None:
    """The system prompt text for ``memory`` (None when there are none)."""
    if not memory:
        return None
    listed = "\n".join(_store(m) for m in memory)
    found = (
        f" The {MEMORY_SEARCH} tool finds memories by meaning across these stores."
        if search
        else ""
    )
    return (
        "You have memory stores: directories of files that persist across sessions. "
        "Each file is one memory. Check them for what earlier sessions learned before "
        "you start a task. In a read_write store, create, change or remove files to "
        "remember, correct or forget something (each change is saved after the tool "
        "call that made it); a read_only store cannot be changed."
        f"{found}\n<memory_stores>\n{listed}\n</memory_stores>"
    )


def _store(memory: MemoryPrompt) -> str:
    parts = [
        f"<name>{escape(memory.name, quote=False)}</name>",
        f"<path>{escape(memory.mount_path, quote=False)}</path>",
        f"<access>{escape(memory.access, quote=False)}</access>",
    ]
    if memory.description:
        parts.append(f"<description>{escape(memory.description, quote=False)}</description>")
    if memory.instructions:
        parts.append(f"<instructions>{escape(memory.instructions, quote=False)}</instructions>")
    return "<memory_store>\n" + "\n".join(parts) + "\n</memory_store>"
