"""This process as a brain of a shared store: its row, its heartbeat, and the
recovery of runs whose brain died (``stead.store.brains`` says what a brain is).

Only on PostgreSQL: on SQLite one process owns the store under the data
directory's lock (``brainlock.py``) and treats every other owner as dead.
"""

from __future__ import annotations

import hashlib
import logging
import os
import socket
from pathlib import Path

import anyio
from anyio.abc import TaskStatus

from stead.config import Settings
from stead.store import BrainStore

log = logging.getLogger("stead.runtime")

PRUNE_AFTER_SECONDS = 24 * 3600.0
"""A dead brain's row stays this long for ``stead db brains`` to show."""
STOP_TIMEOUT_SECONDS = 5.0


def machine() -> str:
    """What processes that see each other's pids share: the boot and the pid namespace."""
    parts = []
    for path in ("/proc/sys/kernel/random/boot_id", "/proc/self/ns/pid"):
        try:
            parts.append(os.readlink(path) if path.endswith("/pid") else Path(path).read_text())
        except OSError:
            parts.append(socket.gethostname())
    return hashlib.sha256("|".join(parts).encode()).hexdigest()[:32]


def pid_alive(pid: int) -> bool:
    """Whether process ``pid`` of this machine still runs (a zombie does not)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    except (OSError, IndexError):
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True
    return state not in ("Z", "X")


class Brain:
    def __init__(self, settings: Settings, store: BrainStore, brain_id: str) -> None:
        self.id = brain_id
        self._settings = settings
        self._store = store
        self._machine = machine()

    async def serve(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Registers, then beats until cancelled; marks the brain stopped on the way out.
        A registration the database cannot take now is made at the next beat."""
        try:
            await self._register()
        except Exception as exc:  # the database is away: the next beat registers
            log.warning("brain %s: not registered now: %s", self.id, exc)
        task_status.started()
        try:
            while True:
                await anyio.sleep(self._settings.brain_heartbeat_seconds)
                try:
                    if not await self._store.brain_heartbeat(self.id):
                        await self._register()
                except Exception as exc:  # the database is away: beat again later
                    log.warning("brain %s: heartbeat not written: %s", self.id, exc)
        finally:
            with anyio.CancelScope(shield=True), anyio.move_on_after(STOP_TIMEOUT_SECONDS):
                try:
                    await self._store.stop_brain(self.id)
                except Exception as exc:
                    log.warning("brain %s: not marked stopped: %s", self.id, exc)

    async def _register(self) -> None:
        host = socket.gethostname()
        await self._store.register_brain(self.id, host, self._machine, os.getpid())

    async def recover(self) -> list[tuple[str, str]]:
        """Re-queues the runs of dead brains; (run id, session id) of each."""
        return await self._store.requeue_runs_of_dead_brains(
            self._settings.brain_stale_seconds, self._machine, pid_alive, PRUNE_AFTER_SECONDS
        )
