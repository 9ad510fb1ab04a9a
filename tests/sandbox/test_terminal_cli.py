"""``stead exec`` and ``stead shell`` as a user runs them: real processes, a
real tty (tmux) for the shell."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from stead.testing import ServerProcess
from tests.sandbox.conftest import WAIT, requires_isolation

pytestmark = requires_isolation


def cli_env(gateway: ServerProcess) -> dict[str, str]:
    assert gateway.first_key
    return {**os.environ, "STEAD_URL": gateway.url, "STEAD_API_KEY": gateway.first_key}


def test_stead_exec_streams_and_exits_with_the_commands_code(
    gateway: ServerProcess, session_id: str
) -> None:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "stead",
            "exec",
            session_id,
            "--",
            "sh",
            "-c",
            "echo out; echo err >&2; exit 5",
        ],
        env=cli_env(gateway),
        capture_output=True,
        timeout=60,
    )
    assert (done.returncode, done.stdout, done.stderr) == (5, b"out\n", b"err\n")


@pytest.mark.parametrize(("signal", "status"), [("KILL", 137), ("TERM", 143)])
def test_stead_exec_of_a_command_killed_by_a_signal_exits_as_a_shell_says(
    gateway: ServerProcess, session_id: str, signal: str, status: int
) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "stead", "exec", session_id, "--", "sh", "-c", f"kill -{signal} $$"],
        env=cli_env(gateway),
        capture_output=True,
        timeout=60,
    )
    assert done.returncode == status, done.stderr


def test_stead_shell_reads_its_input_from_a_file(
    gateway: ServerProcess, session_id: str, tmp_path: Path
) -> None:
    """epoll refuses a regular file (or /dev/null): waiting on one was a traceback."""
    script = tmp_path / "script"
    script.write_bytes(b"echo $((6*7))-from-file\nexit 4\n")
    with script.open("rb") as stdin:
        done = subprocess.run(
            [sys.executable, "-m", "stead", "shell", session_id],
            env=cli_env(gateway),
            stdin=stdin,
            capture_output=True,
            timeout=60,
        )
    assert done.returncode == 4, done.stderr
    assert b"42-from-file" in done.stdout
    assert b"Traceback" not in done.stderr


def test_stead_exec_of_a_command_that_reads_its_input_ends(
    gateway: ServerProcess, session_id: str
) -> None:
    """The exec's stdin stayed open with nothing ever sent to it: ``cat``
    waited forever, and so did ``stead exec``."""
    done = subprocess.run(
        [sys.executable, "-m", "stead", "exec", session_id, "--", "sh", "-c", "cat; exit 6"],
        env=cli_env(gateway),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        timeout=60,
    )
    assert (done.returncode, done.stdout) == (6, b"")


def test_stead_exec_without_a_key_says_so(gateway: ServerProcess, session_id: str) -> None:
    env = {k: v for k, v in cli_env(gateway).items() if k != "STEAD_API_KEY"}
    done = subprocess.run(
        [sys.executable, "-m", "stead", "exec", session_id, "--", "true"],
        env=env,
        capture_output=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert b"API key" in done.stdout + done.stderr


@pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")
def test_stead_shell_in_a_real_terminal(gateway: ServerProcess, session_id: str) -> None:
    name = f"stead-{uuid.uuid4().hex[:8]}"
    env = cli_env(gateway)
    command = f"{sys.executable} -m stead shell {session_id}"
    tmux = ["tmux", "-L", name]
    subprocess.run(
        [*tmux, "new-session", "-d", "-s", name, "-x", "100", "-y", "30", command],
        env=env,
        check=True,
        timeout=30,
    )
    try:
        screen = wait_for_screen(tmux, name, "~$")  # the prompt (tmux trims its space)
        subprocess.run(
            [*tmux, "send-keys", "-t", name, "echo $((6*7))-answer; stty size", "Enter"],
            check=True,
            timeout=30,
        )
        screen = wait_for_screen(tmux, name, "42-answer")
        assert "30 100" in wait_for_screen(tmux, name, "30 100")
        subprocess.run(
            [*tmux, "resize-window", "-t", name, "-x", "120", "-y", "40"], check=True, timeout=30
        )
        time.sleep(0.5)
        subprocess.run(
            [*tmux, "send-keys", "-t", name, "stty size", "Enter"], check=True, timeout=30
        )
        assert "40 120" in wait_for_screen(tmux, name, "40 120")
        subprocess.run([*tmux, "send-keys", "-t", name, "exit", "Enter"], check=True, timeout=30)
        deadline = time.monotonic() + WAIT
        while has_session(tmux, name):  # the client ends when the shell does
            assert time.monotonic() < deadline, screen
            time.sleep(0.1)
    finally:
        subprocess.run([*tmux, "kill-server"], capture_output=True, timeout=30)


def wait_for_screen(tmux: list[str], name: str, text: str) -> str:
    deadline = time.monotonic() + WAIT
    screen = ""
    while time.monotonic() < deadline:
        screen = subprocess.run(
            [*tmux, "capture-pane", "-p", "-t", name], capture_output=True, text=True, timeout=30
        ).stdout
        if text in screen:
            return screen
        time.sleep(0.1)
    raise AssertionError(f"{text!r} never showed:\n{screen}")


def has_session(tmux: list[str], name: str) -> bool:
    found = subprocess.run([*tmux, "has-session", "-t", name], capture_output=True, timeout=30)
    return found.returncode == 0
