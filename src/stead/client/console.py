"""``stead exec`` and ``stead shell``: a session's sandbox in the user's own
terminal, through ``Terminal`` (so both survive a dropped line)."""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import termios
import tty

import anyio

from stead.client.terminal import STDOUT, Terminal

READ_CHUNK = 65536


async def run_exec(url: str, api_key: str, session_id: str, command: str) -> int:
    """Streams the command's stdout and stderr to ours; its exit code (1 if
    it never reported one). Ours is not its input: it reads end of file at
    once (one that read its input waited for it forever)."""
    async with Terminal(url, api_key, session_id, kind="exec", command=command) as term:
        await term.close_input()
        async for item in term.output():
            out = sys.stdout.buffer if item.channel == STDOUT else sys.stderr.buffer
            out.write(item.data)
            out.flush()
    _report_skipped(term)
    return exit_status(term.exit_code) if term.exit_code is not None else 1


async def run_shell(url: str, api_key: str, session_id: str, terminal_id: str | None) -> int:
    """An interactive PTY in the user's tty (raw mode, resized on SIGWINCH);
    the shell's exit code when it exits. Leaving (closing the window) leaves
    the shell running: ``--id`` attaches to it again."""
    stdin = sys.stdin.fileno()
    rows, cols = _size()
    saved = termios.tcgetattr(stdin) if os.isatty(stdin) else None
    async with Terminal(
        url, api_key, session_id, kind="pty", terminal_id=terminal_id, rows=rows, cols=cols
    ) as term:
        sys.stderr.write(f"stead: attached to {term.terminal_id}\r\n")
        sys.stderr.flush()
        try:
            if saved is not None:
                tty.setraw(stdin)
            async with anyio.create_task_group() as tasks:
                tasks.start_soon(_forward_keys, term, stdin)
                tasks.start_soon(_forward_resizes, term)
                async for item in term.output():
                    sys.stdout.buffer.write(item.data)
                    sys.stdout.buffer.flush()
                tasks.cancel_scope.cancel()
        finally:
            if saved is not None:
                termios.tcsetattr(stdin, termios.TCSADRAIN, saved)
    _report_skipped(term)
    return exit_status(term.exit_code) if term.exit_code is not None else 0


def exit_status(code: int) -> int:
    """What a shell reports for a command that ended with ``code`` (the
    terminal's exit code, negative for the signal that killed it): 128 plus
    the signal, as ``$?`` says. Passed on as it was, -9 became 247."""
    return 128 - code if code < 0 else code


def _report_skipped(term: Terminal) -> None:
    if term.skipped_bytes:
        sys.stderr.write(
            f"stead: {term.skipped_bytes} bytes of output were lost while reconnecting\n"
        )
        sys.stderr.flush()


async def _forward_keys(term: Terminal, stdin: int) -> None:
    os.set_blocking(stdin, False)
    try:
        while True:
            # A file or /dev/null (``< file``): epoll refuses it (a traceback,
            # it was), and a read of it never blocks.
            with contextlib.suppress(PermissionError):
                await anyio.wait_readable(stdin)
            try:
                data = os.read(stdin, READ_CHUNK)
            except BlockingIOError:
                continue
            if not data:
                return  # stdin closed: leave, the shell goes on
            await term.send(data)
    finally:
        with contextlib.suppress(OSError):
            os.set_blocking(stdin, True)


async def _forward_resizes(term: Terminal) -> None:
    with anyio.open_signal_receiver(signal.SIGWINCH) as signals:
        async for _ in signals:
            await term.resize(*_size())


def _size() -> tuple[int, int]:
    try:
        size = os.get_terminal_size(sys.stdout.fileno())
    except OSError:
        return 24, 80
    return size.lines, size.columns
