"""The sandbox-provider conformance suite: the same behaviours against every
provider behind ``SandboxProvider`` (the sandbox host, ``unsafe_local``,
``off``) and the in-memory fake, ``stead.testing.MemoryProvider``. A new
provider (a remote one) joins by adding a fixture case here."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from stead.sandbox import (
    EgressCredential,
    FileNotFound,
    MountFile,
    MountListing,
    NoSandbox,
    PathOutsideWorkspace,
    SandboxConfig,
    SandboxProvider,
    TerminalEnded,
    TerminalExited,
    TerminalOutput,
    TerminalRequest,
)
from stead.sandbox.address import HostAddress
from stead.sandbox.providers.host import HostProvider
from stead.sandbox.providers.off import OffProvider
from stead.sandbox.providers.unsafe_local import UnsafeLocalProvider
from stead.testing import HostProcess, MemoryProvider, ServeForker
from tests.sandbox.conftest import config, new_id, requires_isolation

pytestmark = pytest.mark.anyio


@dataclass(frozen=True)
class Case:
    provider: SandboxProvider
    sandboxes: bool = True
    """Gives sessions sandboxes at all (``off`` does not)."""
    terminals: bool = False
    secrets: bool = False
    """Can hold credentials out of the sandbox's reach."""
    egress_log: bool = False
    """Keeps an audit log of what its sandboxes send out."""
    mounts: bool = False
    """Puts API content under /mnt in its sandboxes."""


@pytest.fixture(scope="module")
def host_process(
    tmp_path_factory: pytest.TempPathFactory, forker: ServeForker
) -> Iterator[HostProcess]:
    process = HostProcess(tmp_path_factory.mktemp("providers") / "state", forker=forker).start()
    yield process
    process.stop()


@pytest.fixture(
    params=[
        pytest.param("host", marks=requires_isolation),
        "unsafe_local",
        "off",
        "memory",
    ]
)
async def case(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Case]:
    if request.param == "host":
        process = request.getfixturevalue("host_process")
        made = Case(
            HostProvider(HostAddress(unix_path=process.socket_path)),
            terminals=True,
            secrets=True,
            egress_log=True,
            mounts=True,
        )
    elif request.param == "unsafe_local":
        made = Case(UnsafeLocalProvider(tmp_path / "sandboxes"))
    elif request.param == "off":
        made = Case(OffProvider(), sandboxes=False)
    else:
        made = Case(MemoryProvider(), secrets=True)
    try:
        yield made
    finally:
        await made.provider.aclose()


WANTED: SandboxConfig = config()


async def test_acquire_is_idempotent_and_keeps_the_workspace(case: Case) -> None:
    sandbox_id = new_id()
    if not case.sandboxes:
        with pytest.raises(NoSandbox, match="STEAD_SANDBOX"):
            await case.provider.acquire(sandbox_id, WANTED)
        return
    try:
        first = await case.provider.acquire(sandbox_id, WANTED)
        await first.write_file("notes/a.txt", b"kept\n")
        second = await case.provider.acquire(sandbox_id, WANTED)
        assert await second.read_file("notes/a.txt", max_bytes=100) == b"kept\n"
        assert (await second.stat("notes/a.txt")).size == 5
        with pytest.raises(PathOutsideWorkspace):
            await second.read_file("../../etc/passwd", max_bytes=100)
    finally:
        await case.provider.release(sandbox_id)


async def test_an_exec_runs_at_most_once_per_op_key(case: Case) -> None:
    if not case.sandboxes:
        return
    sandbox_id = new_id()
    try:
        sandbox = await case.provider.acquire(sandbox_id, WANTED)
        first = await sandbox.exec("echo one", op_key="k", timeout=30)
        assert (first.output, first.exit_code) == ("one\n", 0)
        again = await sandbox.exec("echo two", op_key="k", timeout=30)
        assert again.output == "one\n"  # recorded, not run again
        failed = await sandbox.exec("exit 3", op_key="k2", timeout=30)
        assert failed.exit_code == 3
        assert await sandbox.exec_result("k2") == failed
    finally:
        await case.provider.release(sandbox_id)


async def test_status_is_none_until_acquired_and_after_release(case: Case) -> None:
    sandbox_id = new_id()
    assert await case.provider.status(sandbox_id) is None
    if not case.sandboxes:
        assert await case.provider.release(sandbox_id) is None
        return
    sandbox = await case.provider.acquire(sandbox_id, WANTED)
    await sandbox.exec("echo awake", op_key="wake", timeout=30)
    status = await case.provider.status(sandbox_id)
    assert status is not None and status["state"] == "active"
    seconds = await case.provider.release(sandbox_id)
    assert seconds is not None and seconds >= 0
    assert await case.provider.status(sandbox_id) is None
    assert await case.provider.release(sandbox_id) is None
    again = await case.provider.acquire(sandbox_id, WANTED)
    try:
        with pytest.raises(FileNotFound):
            await again.read_file("anything", max_bytes=10)
    finally:
        await case.provider.release(sandbox_id)


async def test_an_erased_sandbox_comes_back_empty(case: Case) -> None:
    """What a deleted session's sandbox gets: nothing of it is kept, not even by
    a provider that restores a released sandbox from its snapshot."""
    sandbox_id = new_id()
    assert await case.provider.release(sandbox_id, erase=True) is None
    if not case.sandboxes:
        return
    try:
        sandbox = await case.provider.acquire(sandbox_id, WANTED)
        await sandbox.write_file("private.txt", b"private\n")
        await sandbox.exec("sleep 0", op_key="wake", timeout=30)
        assert await case.provider.release(sandbox_id, erase=True) is not None
        assert await case.provider.status(sandbox_id) is None
        again = await case.provider.acquire(sandbox_id, WANTED)
        with pytest.raises(FileNotFound):
            await again.read_file("private.txt", max_bytes=100)
    finally:
        await case.provider.release(sandbox_id, erase=True)


async def test_unsafe_local_erases_what_an_earlier_server_made(tmp_path: Path) -> None:
    root = tmp_path / "sandboxes"
    earlier, sandbox_id = UnsafeLocalProvider(root), new_id()
    await (await earlier.acquire(sandbox_id, WANTED)).write_file("a.txt", b"a")
    await earlier.aclose()
    later = UnsafeLocalProvider(root)
    assert await later.release(sandbox_id) is None  # not this server's: kept
    assert (root / sandbox_id / "workspace" / "a.txt").exists()
    assert await later.release(sandbox_id, erase=True) is None
    assert not (root / sandbox_id).exists() and root.is_dir()
    with pytest.raises(ValueError, match="not a sandbox id"):
        await later.release("..", erase=True)
    assert root.is_dir()


async def test_forgetting_a_sandbox_destroys_nothing(case: Case) -> None:
    """What another process's destroy asks of this one: the provider lets go of
    the sandbox, and the sandbox (anyone else's now) is as it was."""
    sandbox_id = new_id()
    case.provider.forget(sandbox_id)  # one it never held
    if not case.sandboxes:
        return
    try:
        sandbox = await case.provider.acquire(sandbox_id, WANTED)
        await sandbox.write_file("kept.txt", b"kept\n")
        if case.secrets:
            credential = EgressCredential("api.example", "authorization", "Bearer forgotten")
            await case.provider.set_secrets(sandbox_id, WANTED, [credential])
        case.provider.forget(sandbox_id)
        status = await case.provider.status(sandbox_id)
        assert status is not None and status["state"] == "active"
        again = await case.provider.acquire(sandbox_id, WANTED)
        assert await again.read_file("kept.txt", max_bytes=100) == b"kept\n"
    finally:
        await case.provider.release(sandbox_id)


async def test_secrets_are_held_only_where_the_sandbox_cannot_read_them(case: Case) -> None:
    sandbox_id = new_id()
    secret = f"secret-{new_id()}"
    credential = EgressCredential("api.example", "authorization", f"Bearer {secret}")
    assert secret not in repr(credential)
    if not case.secrets:
        with pytest.raises(NoSandbox):
            await case.provider.set_secrets(sandbox_id, WANTED, [credential])
        return
    try:
        await case.provider.set_secrets(sandbox_id, WANTED, [credential])
        sandbox = await case.provider.acquire(sandbox_id, WANTED)
        assert not (await sandbox.grep(secret)).lines
    finally:
        await case.provider.release(sandbox_id)


async def test_the_egress_log_is_read_without_acquiring(case: Case) -> None:
    sandbox_id = new_id()
    assert await case.provider.egress_audit(sandbox_id, 0, 10) is None
    assert await case.provider.status(sandbox_id) is None  # reading made nothing
    if not case.sandboxes:
        return
    sandbox = await case.provider.acquire(sandbox_id, WANTED)
    try:
        await sandbox.exec("true", op_key="wake", timeout=30)
        log = await case.provider.egress_audit(sandbox_id, 0, 10)
        if case.egress_log:
            assert log == {"entries": [], "last_seq": 0}
        else:
            assert log is None
    finally:
        await case.provider.release(sandbox_id)


async def test_mounts_where_the_provider_has_them(case: Case) -> None:
    mounts = case.provider.mounts()
    if not case.mounts:
        assert mounts is None
        return
    assert mounts is not None
    sandbox_id = new_id()
    assert await mounts.listing(sandbox_id, "/mnt/session/outputs") == MountListing([])
    assert await case.provider.status(sandbox_id) is None  # listing made nothing
    try:
        await mounts.put(sandbox_id, WANTED, "/mnt/m", [MountFile("a/b.txt", b"hi")], writable=True)
        status = await case.provider.status(sandbox_id)
        assert status is not None and status["state"] == "cold"  # made, never woken
        sandbox = await case.provider.acquire(sandbox_id, WANTED)
        wrote = await sandbox.exec(
            "cat /mnt/m/a/b.txt && echo more > /mnt/m/c.txt", op_key="w", timeout=30
        )
        assert wrote.output == "hi"
        found = await mounts.listing(sandbox_id, "/mnt/m")
        assert [(f.path, f.size) for f in found.files] == [("a/b.txt", 2), ("c.txt", 5)]
        assert not found.truncated
        assert await mounts.read(sandbox_id, "/mnt/m", "c.txt", max_bytes=10) == b"more\n"
        await mounts.remove(sandbox_id, "/mnt/m", ["a"])
        assert [f.path for f in (await mounts.listing(sandbox_id, "/mnt/m")).files] == ["c.txt"]
    finally:
        await case.provider.release(sandbox_id)
    assert await mounts.listing(sandbox_id, "/mnt/m") == MountListing([])  # gone with the sandbox


async def test_terminals_where_the_provider_has_them(case: Case) -> None:
    sandbox_id = new_id()
    request = TerminalRequest("t1", "exec", "echo from-a-terminal")
    if not case.terminals:
        with pytest.raises(NoSandbox):
            await case.provider.terminal(sandbox_id, WANTED, request)
        return
    try:
        terminal = await case.provider.terminal(sandbox_id, WANTED, request)
        output = b""
        while True:
            event = await terminal.receive()
            if isinstance(event, TerminalOutput):
                output += event.data
            if isinstance(event, TerminalExited):
                assert event.exit_code == 0
            if isinstance(event, TerminalEnded):
                break
        await terminal.aclose()
        assert b"from-a-terminal" in output
    finally:
        await case.provider.release(sandbox_id)
