"""Terminals in the sandbox host (rule 10): PTYs and execs that keep running
while nobody is attached, with a 1 MiB scrollback replayed on attach."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from stead.sandbox import HostClient, HostSandbox
from stead.sandbox.client import (
    HostTerminal,
    TerminalEnded,
    TerminalEvent,
    TerminalExited,
    TerminalOutput,
    TerminalReplayed,
)
from stead.sandbox_host.lifecycle import KEPT_EXITED
from stead.testing import HostProcess, ServeForker
from tests.sandbox.conftest import WAIT, client_of, config, new_id, requires_isolation

FLOOD = 6_000_000

pytestmark = [pytest.mark.anyio, requires_isolation]


async def read_until(terminal: HostTerminal, text: bytes) -> list[TerminalEvent]:
    """Events until the output so far contains ``text`` (bounded)."""
    events: list[TerminalEvent] = []
    seen = b""
    with anyio.fail_after(WAIT):
        while text not in seen:
            event = await terminal.receive()
            events.append(event)
            assert not isinstance(event, TerminalEnded), events
            if isinstance(event, TerminalOutput):
                seen += event.data
    return events


async def read_to_end(terminal: HostTerminal) -> list[TerminalEvent]:
    events: list[TerminalEvent] = []
    with anyio.fail_after(WAIT):
        while not isinstance(event := await terminal.receive(), TerminalEnded):
            events.append(event)
    events.append(event)
    return events


def output(events: list[TerminalEvent], channel: int | None = None) -> bytes:
    return b"".join(
        e.data
        for e in events
        if isinstance(e, TerminalOutput) and (channel is None or e.channel == channel)
    )


async def test_an_exec_sends_output_one_replay_marker_and_one_exit(sandbox: HostSandbox) -> None:
    terminal = await sandbox.terminal(
        "exec-1", kind="exec", command="echo out; echo err >&2; exit 3"
    )
    events = await read_to_end(terminal)
    assert output(events, 1) == b"out\n"
    assert output(events, 2) == b"err\n"
    assert sum(isinstance(e, TerminalReplayed) for e in events) == 1
    assert [e.exit_code for e in events if isinstance(e, TerminalExited)] == [3]
    assert events[-1] == TerminalEnded("exited")
    # Attaching again after the exit: the whole output again, then the exit once.
    again = await read_to_end(await sandbox.terminal("exec-1", kind="exec"))
    assert output(again) == output(events)
    assert [e.exit_code for e in again if isinstance(e, TerminalExited)] == [3]


async def test_an_exec_that_closes_its_output_and_goes_on_reports_its_exit(
    sandbox: HostSandbox,
) -> None:
    """Its output closed, a process was waited for 5 s and then counted as
    exited with no exit code while it still ran."""
    terminal = await sandbox.terminal(
        "exec-quiet", kind="exec", command="echo before; exec >&- 2>&-; sleep 5.5; exit 2"
    )
    events = await read_to_end(terminal)
    assert output(events) == b"before\n"
    assert [e.exit_code for e in events if isinstance(e, TerminalExited)] == [2]
    assert events[-1] == TerminalEnded("exited")


async def test_two_ptys_are_independent_and_two_clients_see_one_pty(
    sandbox: HostSandbox,
) -> None:
    first = await sandbox.terminal("pty-a")
    second = await sandbox.terminal("pty-b")
    await first.send_input(b"export MARK=only-a; echo set-$MARK\n")
    await read_until(first, b"set-only-a")
    await second.send_input(b"echo mark=[$MARK]\n")
    await read_until(second, b"mark=[]")

    watcher = await sandbox.terminal("pty-a")
    await first.send_input(b"echo shared-$((6*7))\n")
    await read_until(first, b"shared-42")
    await read_until(watcher, b"shared-42")
    for terminal in (first, second, watcher):
        await terminal.aclose()


async def test_output_made_while_detached_is_replayed_once(sandbox: HostSandbox) -> None:
    terminal = await sandbox.terminal("pty-replay")
    # Markers the shell computes, so the terminal's echo of the input never matches.
    await terminal.send_input(b"echo $((20+1))-ready\n")
    events = await read_until(terminal, b"21-ready")
    resume = max(e.offset + len(e.data) for e in events if isinstance(e, TerminalOutput))
    await terminal.send_input(b"sleep 0.5; echo $((1+1))-away\n")
    await terminal.detach()
    await read_to_end(terminal)
    await anyio.sleep(1.0)  # the command prints while nobody is attached

    again = await sandbox.terminal("pty-replay", offset=resume)
    events = []
    with anyio.fail_after(WAIT):
        while not isinstance(event := await again.receive(), TerminalReplayed):
            events.append(event)
    replayed = output(events)
    assert b"21-ready" not in replayed  # already seen: not sent twice
    assert replayed.count(b"2-away") == 1
    assert event.offset == resume + len(replayed)
    await again.aclose()


async def test_an_offset_from_a_terminal_gone_with_its_sandbox_replays_the_new_one(
    sandbox: HostSandbox, client: HostClient
) -> None:
    """A client redials with the offset it counted; if the sandbox went away
    meanwhile (destroyed, released), a new shell of the same id starts from
    zero and the client sees it from its first byte, not once it has written
    as many bytes as the old one did."""
    terminal = await sandbox.terminal("pty-again")
    await terminal.send_input(b"head -c 5000 /dev/zero | tr '\\0' x; echo $((4+4))-old\n")
    events = await read_until(terminal, b"8-old")
    counted = max(e.offset + len(e.data) for e in events if isinstance(e, TerminalOutput))
    await terminal.aclose()
    await client.destroy(sandbox.sandbox_id)

    again = await sandbox.terminal("pty-again", offset=counted)
    await again.send_input(b"echo $((5+5))-new\n")
    events = await read_until(again, b"10-new")
    first = next(e for e in events if isinstance(e, TerminalOutput))
    assert first.offset == 0
    assert b"8-old" not in output(events)
    await again.aclose()


async def test_the_scrollback_keeps_the_last_mebibyte(sandbox: HostSandbox) -> None:
    terminal = await sandbox.terminal(
        "exec-big", kind="exec", command="head -c 3000000 /dev/zero | tr '\\0' x; echo; echo tail"
    )
    live = await read_to_end(terminal)
    # A client that keeps up sees every byte: the exec runs at its pace.
    assert live[-1] == TerminalEnded("exited")
    assert len(output(live)) == 3000000 + 6
    events = await read_to_end(await sandbox.terminal("exec-big", kind="exec"))
    replay = output(events)
    assert len(replay) == 1024 * 1024
    assert replay.endswith(b"tail\n")
    first = next(e for e in events if isinstance(e, TerminalOutput))
    assert first.offset == 3000000 + 6 - 1024 * 1024


async def test_resize_reaches_the_pty(sandbox: HostSandbox) -> None:
    terminal = await sandbox.terminal("pty-size", rows=30, cols=90)
    await terminal.send_input(b"stty size\n")
    await read_until(terminal, b"30 90")
    await terminal.resize(40, 100)
    await terminal.send_input(b"stty size\n")
    await read_until(terminal, b"40 100")
    await terminal.aclose()


async def test_a_slow_client_is_dropped_without_holding_back_a_fast_one(
    tmp_path: Path, forker: ServeForker
) -> None:
    process = HostProcess(
        tmp_path / "state", env={"STEAD_TERMINAL_SEND_TIMEOUT_SECONDS": "1"}, forker=forker
    ).start()
    client = client_of(process)
    sandbox = HostSandbox(client, new_id(), config())
    try:
        await sandbox.exec("true", op_key="wake", timeout=30)
        # Output waits for input, so both clients are attached before it flows.
        # Far more than the slow one's socket holds, and little enough for the
        # fast one to read well within the host's wait for the slow one's
        # goodbye (GOODBYE_SECONDS), even on a loaded machine.
        command = f"read go; head -c {FLOOD} /dev/zero; echo done"
        fast = await sandbox.terminal("exec-flood", kind="exec", command=command)
        slow = await sandbox.terminal("exec-flood", kind="exec")
        await fast.send_input(b"go\n")
        events = await read_to_end(fast)  # the slow one never reads meanwhile
        assert events[-1] == TerminalEnded("exited")
        assert len(output(events)) == FLOOD + 5
        with anyio.fail_after(WAIT):
            while not isinstance(event := await slow.receive(), TerminalEnded):
                pass
        assert event == TerminalEnded("too_slow")
    finally:
        await client.destroy(sandbox.sandbox_id)
        await client.aclose()
        process.stop()


async def test_a_sandbox_keeps_only_the_newest_exited_terminals(sandbox: HostSandbox) -> None:
    """Each holds up to a mebibyte of output; a sandbox a terminal keeps awake
    never sleeps them away, so past ``KEPT_EXITED`` the oldest go."""
    ids = [f"exec-old-{n}" for n in range(KEPT_EXITED + 3)]
    for terminal_id in ids:
        await read_to_end(await sandbox.terminal(terminal_id, kind="exec", command="echo hi"))
    listed = [p["id"] for p in (await sandbox.status())["processes"]]
    assert set(listed) >= set(ids[-KEPT_EXITED + 1 :]) and ids[0] not in listed
    assert len([i for i in listed if i.startswith("exec-old-")]) <= KEPT_EXITED
    gone = await read_to_end(await sandbox.terminal(ids[0], kind="exec"))
    assert isinstance(gone[-1], TerminalEnded) and "needs a command" in (gone[-1].error or "")
