"""The persistent shell of the unsafe_local sandbox: state, framing, limits, kills."""

from __future__ import annotations

import os
from pathlib import Path

import anyio
import pytest

from stead.sandbox import EXEC_OUTPUT_LIMIT, InvalidArgument, SandboxUnavailable
from stead.sandbox.local.sandbox import UnsafeLocalSandbox
from tests.unit.conftest import WAIT, read_fifo

pytestmark = pytest.mark.anyio


def process_gone(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return True
    return stat.rsplit(")", 1)[1].split()[0] in ("Z", "X")


GIVE_UP_SECONDS = 10.0
"""Bounds a wait that ends in milliseconds, a third of the ``sleep 30`` it
must not wait for: a loaded machine never makes it fail, a stuck exec does."""


async def wait_gone(pid: int, within: float) -> None:
    """Polls /proc (nothing to wait on for a process that is not our child), bounded."""
    with anyio.fail_after(within):
        while not process_gone(pid):  # noqa: ASYNC110
            await anyio.sleep(0.002)


async def test_cwd_and_exports_persist_between_calls(sandbox: UnsafeLocalSandbox) -> None:
    await sandbox.exec("mkdir -p sub && cd sub && export GREETING=hello", op_key="a", timeout=5)
    result = await sandbox.exec('pwd; echo "$GREETING"', op_key="b", timeout=5)
    assert result.output == f"{sandbox.workspace_path}/sub\nhello\n"
    assert result.exit_code == 0


async def test_exit_codes_and_interleaved_stderr(sandbox: UnsafeLocalSandbox) -> None:
    assert (await sandbox.exec("false", op_key="a", timeout=5)).exit_code == 1
    assert (await sandbox.exec("(exit 7)", op_key="b", timeout=5)).exit_code == 7
    mixed = await sandbox.exec("echo a; echo b >&2; echo c", op_key="c", timeout=5)
    assert mixed.output == "a\nb\nc\n"


async def test_exit_ends_the_shell_and_the_next_call_gets_a_fresh_one(
    sandbox: UnsafeLocalSandbox,
) -> None:
    await sandbox.exec("cd / && export X=1", op_key="a", timeout=5)
    ended = await sandbox.exec("echo bye; exit 3", op_key="b", timeout=5)
    assert (ended.output, ended.exit_code, ended.shell_exited) == ("bye\n", 3, True)
    fresh = await sandbox.exec('pwd; echo "[$X]"', op_key="c", timeout=5)
    assert fresh.output == f"{sandbox.workspace_path}\n[]\n"


@pytest.mark.parametrize(
    ("command", "code"), [("echo bye; exit 3", 3), ("echo bye; kill -9 $$", 128 + 9)]
)
async def test_a_shell_that_ends_with_a_job_in_the_background_ends_the_call(
    sandbox: UnsafeLocalSandbox, tmp_path: Path, command: str, code: int
) -> None:
    """The job holds the shell's output open: the call still ends when the
    shell does, however it ends, and the job goes with it."""
    pid_file = tmp_path / "pid"
    await sandbox.exec(f"sleep 30 & echo $! > {pid_file}", op_key="a", timeout=5)
    ended = await sandbox.exec(command, op_key="b", timeout=GIVE_UP_SECONDS)
    assert (ended.output, ended.exit_code, ended.shell_exited) == ("bye\n", code, True)
    await wait_gone(int(pid_file.read_text()), GIVE_UP_SECONDS)
    assert (await sandbox.exec("echo fresh", op_key="c", timeout=5)).output == "fresh\n"


async def test_a_command_that_redirects_the_shells_output_ends_and_later_calls_show_theirs(
    sandbox: UnsafeLocalSandbox,
) -> None:
    """A redirect of the shell's own output, or a function named ``printf``,
    holds for the rest of the command's call; the call ends when its command
    does, and the next one shows its output and errors."""
    logged = await sandbox.exec("echo shown; exec >log; echo logged", op_key="a", timeout=5)
    assert (logged.output, logged.exit_code, logged.timed_out) == ("shown\n", 0, False)
    quiet = await sandbox.exec("exec 2>/dev/null; ls /nowhere", op_key="b", timeout=5)
    assert (quiet.output, quiet.exit_code) == ("", 2)
    named = await sandbox.exec("printf() { :; }; cat log; ls /nowhere", op_key="c", timeout=5)
    assert named.output.startswith("logged\nls: ") and named.exit_code == 2
    assert (await sandbox.exec("echo next", op_key="d", timeout=5)).output == "next\n"


@pytest.mark.parametrize(
    ("command", "output", "code"),
    [
        ("printf '%s\\n' 'it'\"'\"'s' \"a\\\\b\"", "it's\na\\b\n", 0),
        ("cat <<'EOF'\nhé $HOME\nEOF", "hé $HOME\n", 0),
        ("cat; echo read-eof", "read-eof\n", 0),
        ("printf 'no newline'", "no newline", 0),
        ("echo '__STEAD_fake__0'; echo done", "__STEAD_fake__0\ndone\n", 0),
    ],
)
async def test_commands_reach_bash_verbatim(
    sandbox: UnsafeLocalSandbox, command: str, output: str, code: int
) -> None:
    result = await sandbox.exec(command, op_key="a", timeout=5)
    assert (result.output, result.exit_code) == (output, code)


async def test_a_syntax_error_is_reported_and_the_shell_survives(
    sandbox: UnsafeLocalSandbox,
) -> None:
    await sandbox.exec("export KEPT=yes", op_key="a", timeout=5)
    broken = await sandbox.exec('echo "unbalanced', op_key="b", timeout=5)
    assert broken.exit_code == 2 and "unexpected EOF" in broken.output
    traced = await sandbox.exec("set -xv; echo traced; set +xv", op_key="c", timeout=5)
    assert traced.exit_code == 0 and "traced" in traced.output
    assert (await sandbox.exec("echo $KEPT", op_key="d", timeout=5)).output == "yes\n"


async def test_output_over_the_cap_keeps_the_tail_and_says_so(
    sandbox: UnsafeLocalSandbox,
) -> None:
    command = "head -c 5000000 /dev/zero | tr '\\0' a; echo; echo END"
    result = await sandbox.exec(command, op_key="a", timeout=20)
    assert result.truncated and result.exit_code == 0
    assert len(result.output.encode()) <= EXEC_OUTPUT_LIMIT
    assert result.output.endswith("a\nEND\n")
    small = await sandbox.exec("echo small", op_key="b", timeout=5)
    assert not small.truncated


async def test_timeout_kills_the_shell_group_and_the_next_call_works(
    sandbox: UnsafeLocalSandbox, tmp_path: Path
) -> None:
    fifo = tmp_path / "pid"
    os.mkfifo(fifo)
    async with anyio.create_task_group() as tg:
        results = []

        async def run() -> None:
            command = f"export GONE=1; sleep 30 & echo $! > {fifo}; wait"
            results.append(await sandbox.exec(command, op_key="a", timeout=1.0))

        tg.start_soon(run)
        pid = int(await read_fifo(fifo))
    [result] = results
    assert result.timed_out and result.exit_code is None and result.shell_reset
    await wait_gone(pid, 1.0)
    after = await sandbox.exec('echo "ok[$GONE]"', op_key="b", timeout=5)
    assert after.output == "ok[]\n"


async def test_cancellation_kills_the_group_and_propagates(
    sandbox: UnsafeLocalSandbox, tmp_path: Path
) -> None:
    """The cancelled exec gives up at once, not when its command would end (a
    background ``sleep 30``), and takes the command's whole group with it."""
    fifo = tmp_path / "pid"
    os.mkfifo(fifo)
    scope = anyio.CancelScope()
    reraised = []

    async def run() -> None:
        with scope:
            try:
                await sandbox.exec(f"sleep 30 & echo $! > {fifo}; wait", op_key="a", timeout=60)
            except anyio.get_cancelled_exc_class():
                reraised.append(True)
                raise

    with anyio.fail_after(GIVE_UP_SECONDS):
        async with anyio.create_task_group() as tg:
            tg.start_soon(run)
            pid = int(await read_fifo(fifo))
            assert not process_gone(pid)
            scope.cancel()
    assert reraised == [True]
    await wait_gone(pid, GIVE_UP_SECONDS)
    recorded = await sandbox.exec_result("a")
    assert recorded is not None and recorded.interrupted and recorded.exit_code is None
    assert (await sandbox.exec("echo again", op_key="b", timeout=5)).output == "again\n"


async def test_close_kills_background_jobs_and_refuses_later_calls(
    sandbox: UnsafeLocalSandbox, tmp_path: Path
) -> None:
    pid_file = tmp_path / "pid"
    await sandbox.exec(f"sleep 30 & echo $! > {pid_file}", op_key="a", timeout=5)
    pid = int(pid_file.read_text())
    assert not process_gone(pid)
    await sandbox.close()
    await wait_gone(pid, 1.0)
    with pytest.raises(SandboxUnavailable):
        await sandbox.exec("echo", op_key="b", timeout=5)
    await sandbox.close()  # idempotent


async def test_restart_shell_resets_state(sandbox: UnsafeLocalSandbox) -> None:
    await sandbox.exec("export X=1; cd /", op_key="a", timeout=5)
    await sandbox.restart_shell()
    result = await sandbox.exec('echo "[$X]"; pwd', op_key="b", timeout=5)
    assert result.output == f"[]\n{sandbox.workspace_path}\n"


async def test_the_shell_environment_is_scrubbed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-never-leak")
    monkeypatch.setenv("STEAD_DATABASE_URL", "sqlite:///secret.db")
    env = {"EXTRA": "given"}
    async with UnsafeLocalSandbox(tmp_path / "ws", tmp_path / "state", env) as sandbox:
        result = await sandbox.exec("env", op_key="a", timeout=5)
    variables = dict(line.split("=", 1) for line in result.output.splitlines() if "=" in line)
    assert "sk-ant-never-leak" not in result.output and "secret.db" not in result.output
    assert "ANTHROPIC_API_KEY" not in variables
    assert variables["HOME"] == sandbox.workspace_path
    assert variables["TERM"] == "dumb" and variables["EXTRA"] == "given"
    assert set(variables) <= {"PATH", "HOME", "LANG", "TERM", "EXTRA", "PWD", "SHLVL", "_"}


async def test_bad_arguments_are_refused_before_running(sandbox: UnsafeLocalSandbox) -> None:
    with pytest.raises(InvalidArgument):
        await sandbox.exec("echo \x00", op_key="a", timeout=5)
    with pytest.raises(InvalidArgument):
        await sandbox.exec("echo", op_key="a", timeout=0)
    assert (await sandbox.exec("echo fine", op_key="a", timeout=5)).output == "fine\n"


async def test_close_during_a_command_interrupts_it(
    sandbox: UnsafeLocalSandbox, tmp_path: Path
) -> None:
    fifo = tmp_path / "ready"
    os.mkfifo(fifo)
    results = []

    async def run() -> None:
        results.append(await sandbox.exec(f"echo go > {fifo}; sleep 30", op_key="a", timeout=60))

    async with anyio.create_task_group() as tg:
        tg.start_soon(run)
        await read_fifo(fifo)
        with anyio.fail_after(WAIT):
            await sandbox.close()
    [result] = results
    assert result.interrupted and result.exit_code is None
    assert await sandbox.exec_result("a") == result
