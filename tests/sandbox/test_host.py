"""The sandbox host through its client: exec at most once per op key, files,
background processes, idempotent acquire, and the host's own restart."""

from __future__ import annotations

import signal
from functools import partial
from pathlib import Path
from typing import Any

import anyio
import pytest

from stead.sandbox import (
    PROTOCOL_VERSION,
    ExecInDoubt,
    ExecStatus,
    FileKind,
    HostClient,
    HostSandbox,
    HostUnreachable,
    InvalidArgument,
    PathOutsideWorkspace,
    VersionMismatch,
    parse_address,
)
from stead.sandbox.protocol import raise_error
from stead.testing import HostProcess, ServeForker, free_port
from tests.sandbox.conftest import (
    WAIT,
    client_of,
    config,
    new_id,
    requires_isolation,
    workspace_on_host,
)

pytestmark = [pytest.mark.anyio, requires_isolation]


async def test_exec_runs_as_the_sandbox_user_in_a_persistent_shell(sandbox: HostSandbox) -> None:
    first = await sandbox.exec("id -u; pwd; export MARK=kept; cd /tmp", op_key="a", timeout=10)
    assert first.exit_code == 0
    assert first.output.split() == ["1000", "/workspace"]
    second = await sandbox.exec('echo "$MARK"; pwd; hostname', op_key="b", timeout=10)
    assert second.output.split() == ["kept", "/tmp", "sandbox"]


async def test_an_op_key_runs_once_and_its_result_is_kept(sandbox: HostSandbox) -> None:
    command = "echo run >> /workspace/count; wc -l < /workspace/count"
    first = await sandbox.exec(command, op_key="once", timeout=10)
    again = await sandbox.exec(command, op_key="once", timeout=10)
    assert first == again
    assert first.output.strip() == "1"
    assert await sandbox.exec_status("once") is ExecStatus.FINISHED
    assert await sandbox.exec_result("once") == first
    assert await sandbox.exec_result("never") is None
    assert await sandbox.exec_status("never") is ExecStatus.UNKNOWN


async def test_a_timeout_is_a_result_and_the_next_exec_gets_a_fresh_shell(
    sandbox: HostSandbox,
) -> None:
    slow = await sandbox.exec("export GONE=1; sleep 30", op_key="slow", timeout=0.5)
    assert slow.timed_out
    after = await sandbox.exec('echo "[$GONE]"', op_key="after", timeout=10)
    assert after.output.strip() == "[]"


async def test_files_written_by_the_host_belong_to_the_sandbox(
    sandbox: HostSandbox, host: HostProcess
) -> None:
    await sandbox.write_file("src/deep/app.py", b"print('hi')\nneedle here\n")
    info = await sandbox.stat("src/deep/app.py")
    assert info.kind is FileKind.FILE
    assert await sandbox.read_file("src/deep/app.py", max_bytes=100) == (
        b"print('hi')\nneedle here\n"
    )
    assert await sandbox.read_lines("src/deep/app.py", 2, 2, max_bytes=100) == b"needle here\n"
    owners = await sandbox.exec(
        "stat -c %u src src/deep src/deep/app.py && echo more >> src/deep/app.py",
        op_key="own",
        timeout=10,
    )
    assert owners.exit_code == 0, owners.output
    assert owners.output.split() == ["1000", "1000", "1000"]
    assert (await sandbox.glob("**/*.py")).paths == ("/workspace/src/deep/app.py",)
    assert (await sandbox.grep("needle")).lines == ("/workspace/src/deep/app.py:2:needle here",)
    on_host = workspace_on_host(host, sandbox.sandbox_id) / "src/deep/app.py"
    assert on_host.stat().st_uid != 0


async def test_a_directory_lists_through_the_host(sandbox: HostSandbox) -> None:
    made = await sandbox.exec(
        "mkdir -p d/sub && printf abc > d/file && ln -s /etc/shadow d/link", op_key="mk", timeout=10
    )
    assert made.exit_code == 0, made.output
    listing = await sandbox.list_dir("/workspace/d")
    assert listing.path == "/workspace/d" and listing.total == 3
    assert [
        (e.name, e.kind, e.size) for e in listing.entries if e.kind is not FileKind.DIRECTORY
    ] == [
        ("file", FileKind.FILE, 3),
        ("link", FileKind.SYMLINK, len("/etc/shadow")),
    ]
    with pytest.raises(PathOutsideWorkspace):
        await sandbox.list_dir("d/link")  # followed, it leads out
    with pytest.raises(PathOutsideWorkspace):
        await sandbox.list_dir("/etc")


async def test_background_processes_keep_their_output(sandbox: HostSandbox) -> None:
    started = await sandbox.start_process("echo hello; echo oops >&2; exit 3", name="short")
    with anyio.fail_after(WAIT):
        while True:
            (listed,) = [p for p in await sandbox.list_processes() if p["id"] == started["id"]]
            if not listed["running"]:
                break
            await anyio.sleep(0.05)
    assert listed["exit_code"] == 3
    output, offset = await sandbox.read_process(started["id"])
    assert offset == 0
    assert output == b"hello\noops\n"

    long = await sandbox.start_process("sleep 600", name="long")
    await sandbox.kill_process(long["id"], signal.SIGTERM)
    with anyio.fail_after(WAIT):
        while await still_running(sandbox, long["id"]):  # noqa: ASYNC110 - another process
            await anyio.sleep(0.05)
    with pytest.raises(InvalidArgument):
        await sandbox.kill_process("proc_missing")


async def test_concurrent_acquires_of_one_id_make_one_sandbox(client: HostClient) -> None:
    sandbox_id = new_id()
    uids: list[int] = []

    async def acquire() -> None:
        status = await HostSandbox(client, sandbox_id, config()).acquire()
        uids.append(status["uid"])

    async with anyio.create_task_group() as tasks:
        for _ in range(100):
            tasks.start_soon(acquire)
    assert len(uids) == 100
    assert len(set(uids)) == 1
    assert await client.destroy(sandbox_id) is not None
    assert await client.destroy(sandbox_id) is None


@pytest.mark.parametrize(
    ("frame", "field"),
    [
        ({"op": "acquire", "sandbox_id": "../etc", "config": {}}, "sandbox_id"),
        ({"op": "acquire", "sandbox_id": "s", "config": {"memory_bytes": "lots"}}, "memory_bytes"),
        ({"op": "explode"}, "op: unknown operation 'explode'"),
        ({"sandbox_id": "s"}, "op: unknown operation None"),
        ({"op": "hello", "version": PROTOCOL_VERSION}, "op: 'hello' is not a call"),
        ({"op": "exec", "sandbox_id": "s", "command": "true", "op_key": "k"}, "timeout: Field"),
        ({"op": "exec", "sandbox_id": "s", "command": 1, "op_key": "k", "timeout": 1}, "command"),
        ({"op": "write_file", "sandbox_id": "s", "path": "a", "data": "%%"}, "data: Value error"),
        ({"op": "status", "sandbox_id": "s", "extra": 1}, "extra: Extra inputs"),
    ],
)
async def test_a_bad_request_gets_a_typed_error_and_the_host_stays_up(
    host: HostProcess, client: HostClient, frame: dict[str, Any], field: str
) -> None:
    reply = await anyio.to_thread.run_sync(host.call, frame)
    assert reply["error"] == "InvalidArgument"
    assert field in reply["message"]
    assert (await client.ping())["version"] == PROTOCOL_VERSION


async def test_a_brain_of_another_protocol_version_is_refused_naming_both(
    host: HostProcess,
) -> None:
    reply = await anyio.to_thread.run_sync(
        partial(host.call, {"op": "ping"}, version=PROTOCOL_VERSION - 1)
    )
    assert reply["error"] == "VersionMismatch"
    assert f"version {PROTOCOL_VERSION - 1}" in reply["message"]
    assert f"version {PROTOCOL_VERSION}:" in reply["message"]
    with pytest.raises(VersionMismatch, match="run the same stead version"):
        raise_error(reply)


async def test_a_killed_host_leaves_files_and_reports_the_interrupted_exec_in_doubt(
    tmp_path: Path, forker: ServeForker
) -> None:
    root = tmp_path
    process = HostProcess(root / "state", forker=forker).start()
    client = client_of(process)
    sandbox = HostSandbox(client, new_id(), config())
    try:
        await sandbox.exec("echo kept > note", op_key="write", timeout=10)
        async with anyio.create_task_group() as tasks:

            async def run_long() -> None:
                with pytest.raises(Exception):  # noqa: B017 - the host dies under the call
                    await sandbox.exec("sleep 600", op_key="long", timeout=900)

            tasks.start_soon(run_long)
            with anyio.fail_after(WAIT):
                while await sandbox.exec_status("long") is not ExecStatus.STARTED:  # noqa: ASYNC110
                    await anyio.sleep(0.05)
            process.kill()
        await client.aclose()
        process = HostProcess(root / "state", work_dir=process.work_dir, forker=forker).start()
        client = client_of(process)
        sandbox = HostSandbox(client, sandbox.sandbox_id, config())
        assert (await sandbox.read_file("note", max_bytes=100)) == b"kept\n"
        with pytest.raises(ExecInDoubt):
            await sandbox.exec("sleep 600", op_key="long", timeout=900)
        assert (await sandbox.exec("cat note", op_key="read", timeout=10)).output == "kept\n"
    finally:
        await client.destroy(sandbox.sandbox_id)
        await client.aclose()
        process.stop()


async def test_old_exec_records_are_pruned_but_never_a_running_one(
    tmp_path: Path, forker: ServeForker
) -> None:
    process = HostProcess(
        tmp_path / "state",
        env={
            "STEAD_SANDBOX_EXEC_RECORD_SECONDS": "0.3",
            "STEAD_SNAPSHOT_GC_INTERVAL_SECONDS": "0.1",
        },
        forker=forker,
    ).start()
    client = client_of(process)
    sandbox = HostSandbox(client, new_id(), config())
    try:
        await sandbox.exec("true", op_key="quick", timeout=10)
        wait_for_go = "while [ ! -e go ]; do sleep 0.05; done; echo went"
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(partial(sandbox.exec, wait_for_go, op_key="slow", timeout=60))
            with anyio.fail_after(WAIT):
                while await sandbox.exec_status("slow") is not ExecStatus.STARTED:  # noqa: ASYNC110
                    await anyio.sleep(0.05)
                while await sandbox.exec_status("quick") is not ExecStatus.UNKNOWN:  # noqa: ASYNC110
                    await anyio.sleep(0.1)
            await anyio.sleep(0.5)  # several collections, all past the slow one's retention
            assert await sandbox.exec_status("slow") is ExecStatus.STARTED
            await sandbox.write_file("go", b"")
    finally:
        await client.destroy(sandbox.sandbox_id)
        await client.aclose()
        process.stop()


async def still_running(sandbox: HostSandbox, process_id: str) -> bool:
    return any(p["running"] for p in await sandbox.list_processes() if p["id"] == process_id)


async def test_exec_output_streams_while_the_command_runs(
    sandbox: HostSandbox, host: HostProcess
) -> None:
    seen: list[bytes] = []
    gate = workspace_on_host(host, sandbox.sandbox_id) / "gate"
    await sandbox.exec("true", op_key="wake", timeout=10)

    async def open_gate_after_first_output() -> None:
        with anyio.fail_after(WAIT):
            # Only the last 64 bytes are held back (they may hold the end marker).
            while not b"".join(seen).startswith(b"x" * 100):  # noqa: ASYNC110
                await anyio.sleep(0.02)
        gate.touch()

    async with anyio.create_task_group() as tasks:
        tasks.start_soon(open_gate_after_first_output)
        result = await sandbox.exec(
            "printf 'x%.0s' $(seq 200); while [ ! -e gate ]; do sleep 0.02; done; echo; echo end",
            op_key="stream",
            timeout=30,
            on_output=seen.append,
        )
    assert result.output == "x" * 200 + "\nend\n"
    assert result.output.encode().startswith(b"".join(seen))


async def test_a_remote_brain_needs_the_token(tmp_path: Path, forker: ServeForker) -> None:
    port = free_port()
    process = HostProcess(
        tmp_path / "state",
        env={
            "STEAD_SANDBOX_HOST_LISTEN_TCP": f"127.0.0.1:{port}",
            "STEAD_SANDBOX_HOST_TOKEN": "s3cret-token-of-the-hosts",
        },
        forker=forker,
    ).start()
    try:
        remote = HostClient(parse_address(f"tcp://127.0.0.1:{port}", "s3cret-token-of-the-hosts"))
        sandbox = HostSandbox(remote, new_id(), config())
        assert (await sandbox.exec("echo far", op_key="k", timeout=10)).output == "far\n"
        await remote.destroy(sandbox.sandbox_id)
        await remote.aclose()
        # Its TLS is keyed by the token: a guess cannot even trust the host.
        intruder = HostClient(parse_address(f"tcp://127.0.0.1:{port}", "guess"))
        with pytest.raises(HostUnreachable, match="another token"):
            await intruder.ping()
        await intruder.aclose()
    finally:
        process.stop()
