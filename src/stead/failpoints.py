"""Crash injection for tests: SIGKILL this process at a named point in the code.

``STEAD_FAILPOINTS="tool.after_run:2,store.before_commit:7"`` kills the process
the 2nd time a tool finished running and the 7th time a write transaction is
about to commit. Without the setting every ``hit`` is a dictionary lookup.
Crash tests use it to stop the server at exact points a timer could not reach.
"""

from __future__ import annotations

import os
import signal
import threading

SITES = frozenset(
    {
        "model.before_request",
        "model.after_answer",
        "compaction.before_request",
        "compaction.after_answer",
        "tool.before_run",
        "tool.after_run",
        "mcp.before_call",
        "mcp.after_call",
        "mcp.after_refresh",
        "turn.before_start",
        "turn.before_idle",
        "store.before_commit",
        "files.blob_chunk",
        "outputs.after_begin",
        "outputs.after_capture",
        "memories.before_writeback",
        "memories.after_writeback",
        "skills.after_stage",
        "webhook.before_send",
        "webhook.after_send",
        "work.after_stop",
        "snapshot.mid_upload",
    }
)


class FailPoints:
    def __init__(self, spec: str | None) -> None:
        self._targets: dict[str, int] = {}
        for item in (spec or "").split(","):
            if not item.strip():
                continue
            name, _, count = item.strip().partition(":")
            if name not in SITES:
                raise ValueError(f"unknown failpoint {name!r}; known: {', '.join(sorted(SITES))}")
            self._targets[name] = int(count or "1")
        self._counts: dict[str, int] = {}
        self._lock = threading.Lock()

    @property
    def armed(self) -> bool:
        return bool(self._targets)

    def hit(self, name: str) -> None:
        target = self._targets.get(name)
        if target is None:
            return
        with self._lock:
            self._counts[name] = count = self._counts.get(name, 0) + 1
        if count == target:
            os.kill(os.getpid(), signal.SIGKILL)
