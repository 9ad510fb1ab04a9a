"""Durable records of exec op keys (DESIGN rule 5): one JSON file per op key.

A record is written whole or not at all (temp file, rename), so after a crash
it holds either the old state or the new one. ``running`` is written before a
command starts; it survives the death of the process, and a machine crash
takes the command with it (the agent loop's own ledger says ``started``
durably). ``finished`` (with the result) is made durable before ``exec``
returns: the file and then its directory are fsynced.
File names are the SHA-256 of the op key, so any op key is a safe name.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import secrets
from dataclasses import asdict
from pathlib import Path
from typing import Any

from anyio import to_thread

from stead.sandbox.base import ExecResult, ExecStatus
from stead.sandbox.errors import SandboxUnavailable

RUNNING = "running"
FINISHED = "finished"


class OpRecords:
    def __init__(self, directory: Path) -> None:
        self._directory = directory

    async def mark_running(self, op_key: str) -> None:
        record = {"op_key": op_key, "state": RUNNING}
        await to_thread.run_sync(self._write, op_key, record, False)

    async def mark_finished(self, op_key: str, result: ExecResult) -> None:
        record = {"op_key": op_key, "state": FINISHED, "result": asdict(result)}
        await to_thread.run_sync(self._write, op_key, record, True)

    async def load(self, op_key: str) -> tuple[ExecStatus, ExecResult | None]:
        record = await to_thread.run_sync(self._read, op_key)
        if record is None:
            return ExecStatus.UNKNOWN, None
        if record.get("state") == FINISHED:
            return ExecStatus.FINISHED, ExecResult(**record["result"])
        return ExecStatus.STARTED, None

    def path(self, op_key: str) -> Path:
        return self._directory / f"{hashlib.sha256(op_key.encode()).hexdigest()}.json"

    def _read(self, op_key: str) -> dict[str, Any] | None:
        try:
            data = self.path(op_key).read_bytes()
        except FileNotFoundError:
            return None
        record: dict[str, Any] = json.loads(data)
        return record if record.get("op_key") == op_key else None

    def _write(self, op_key: str, record: dict[str, Any], durable: bool) -> None:
        try:
            self._replace(op_key, record, durable)
        except OSError as exc:
            raise SandboxUnavailable(f"cannot record the exec: {exc.strerror or exc}") from exc

    def _replace(self, op_key: str, record: dict[str, Any], durable: bool) -> None:
        target = self.path(op_key)
        self._directory.mkdir(parents=True, exist_ok=True)
        temp = self._directory / f".{target.name}.{secrets.token_hex(4)}.tmp"
        data = memoryview(json.dumps(record).encode("ascii"))
        fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
        try:
            try:
                while data:
                    data = data[os.write(fd, data) :]
                if durable:
                    os.fsync(fd)
            finally:
                os.close(fd)
            os.replace(temp, target)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(temp)
            raise
        if durable:
            _fsync_directory(self._directory)


def _fsync_directory(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
