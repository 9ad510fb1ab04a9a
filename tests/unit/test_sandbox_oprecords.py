"""Exec results recorded per op key (DESIGN rule 5): durable, reused, never re-run."""

from __future__ import annotations

import json
import os
from functools import partial
from pathlib import Path

import anyio
import pytest

from stead.sandbox import ExecInDoubt, ExecResult, ExecStatus
from stead.sandbox.local.oprecords import OpRecords
from stead.sandbox.local.sandbox import UnsafeLocalSandbox
from tests.unit.conftest import WAIT, read_fifo

pytestmark = pytest.mark.anyio


async def test_exec_result_returns_what_exec_returned(sandbox: UnsafeLocalSandbox) -> None:
    assert await sandbox.exec_status("k") is ExecStatus.UNKNOWN
    assert await sandbox.exec_result("k") is None
    result = await sandbox.exec("echo hi; (exit 4)", op_key="k", timeout=5)
    assert await sandbox.exec_status("k") is ExecStatus.FINISHED
    assert await sandbox.exec_result("k") == result == ExecResult("hi\n", 4)


async def test_a_finished_op_key_is_not_run_again(sandbox: UnsafeLocalSandbox) -> None:
    first = await sandbox.exec("echo ran >> log; wc -l < log", op_key="k", timeout=5)
    again = await sandbox.exec("echo ran >> log; wc -l < log", op_key="k", timeout=5)
    assert first == again and first.output == "1\n"
    log = await sandbox.read_file("log", max_bytes=100)
    assert log == b"ran\n"


async def test_the_record_is_on_disk_before_exec_returns(tmp_path: Path) -> None:
    state = tmp_path / "state"
    async with UnsafeLocalSandbox(tmp_path / "ws", state) as sandbox:
        result = await sandbox.exec("echo durable", op_key="op-1", timeout=5)
        [record_file] = (state / "ops").iterdir()  # no temp file left behind
        record = json.loads(record_file.read_text())
        assert record["op_key"] == "op-1" and record["state"] == "finished"
        assert record["result"]["output"] == "durable\n"
    # A new process (here: a new sandbox over the same state) sees the result.
    async with UnsafeLocalSandbox(tmp_path / "ws", state) as restarted:
        assert await restarted.exec_result("op-1") == result
        assert await restarted.exec("echo other", op_key="op-1", timeout=5) == result


async def test_records_are_fsynced_file_and_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    synced: list[str] = []
    real_fsync = os.fsync

    def spy(fd: int) -> None:
        synced.append(os.readlink(f"/proc/self/fd/{fd}"))
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", spy)
    records = OpRecords(tmp_path / "ops")
    await records.mark_finished("k", ExecResult("x", 0))
    target = records.path("k")
    assert target.exists()
    assert synced[0].endswith(".tmp") and synced[1] == str(tmp_path / "ops")


async def test_status_is_started_while_running_and_in_doubt_after_a_crash(
    sandbox: UnsafeLocalSandbox, tmp_path: Path
) -> None:
    fifo = tmp_path / "ready"
    os.mkfifo(fifo)
    # A second sandbox over the same state stands for a restarted server that
    # finds the record of a command whose process is gone.
    other = UnsafeLocalSandbox(tmp_path / "ws", tmp_path / "state")
    async with other, anyio.create_task_group() as tg:
        run = partial(sandbox.exec, f"echo go > {fifo}; sleep 30", op_key="k", timeout=30)
        tg.start_soon(run)
        await read_fifo(fifo)
        assert await other.exec_status("k") is ExecStatus.STARTED
        assert await other.exec_result("k") is None
        with pytest.raises(ExecInDoubt):
            await other.exec("echo again", op_key="k", timeout=5)
        tg.cancel_scope.cancel()
    recorded = await sandbox.exec_result("k")
    assert recorded is not None and recorded.interrupted


async def test_a_second_call_with_a_running_op_key_waits_for_its_result(
    sandbox: UnsafeLocalSandbox, tmp_path: Path
) -> None:
    ready, gate = tmp_path / "ready", tmp_path / "gate"
    os.mkfifo(ready)
    os.mkfifo(gate)
    command = f"echo ran >> log; echo go > {ready}; cat {gate}"
    results: list[ExecResult] = []

    async def call() -> None:
        results.append(await sandbox.exec(command, op_key="k", timeout=30))

    async with anyio.create_task_group() as tg:
        tg.start_soon(call)
        await read_fifo(ready)
        tg.start_soon(call)
        await anyio.wait_all_tasks_blocked()
        with anyio.fail_after(WAIT):
            await anyio.to_thread.run_sync(gate.write_text, "done\n", abandon_on_cancel=True)
    assert results[0] == results[1] == ExecResult("done\n", 0)
    assert await sandbox.read_file("log", max_bytes=100) == b"ran\n"


async def test_any_op_key_makes_a_safe_file_name(tmp_path: Path) -> None:
    records = OpRecords(tmp_path / "ops")
    key = "../../etc/passwd\n\x00é"
    await records.mark_running(key)
    assert records.path(key).parent == tmp_path / "ops"
    assert await records.load(key) == (ExecStatus.STARTED, None)
