"""The bash tool's persistent shell as an agent meets it: the official SDK
against a real ``stead serve`` and sandbox host (bubblewrap), the fake model
making the calls. Each call ends when its command does, whatever the command
left running or redirected, and says how it ended."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import anthropic
import pytest

from stead.testing import FakeModel, HostProcess, ServeForker, ServerProcess
from tests.conftest import sdk_of
from tests.sandbox.conftest import (
    calling,
    requires_isolation,
    sweepless_server,
    tool_session,
    turn_events,
)

pytestmark = requires_isolation

HANG_GUARD_MS = 10_000
"""Each call's timeout_ms: a call that does not see its command end says it
timed out after this, far later than any of these commands takes."""


@pytest.fixture(scope="module")
def server(
    host: HostProcess, tmp_path_factory: pytest.TempPathFactory, forker: ServeForker
) -> Iterator[ServerProcess]:
    with FakeModel(calling) as fake:
        data = tmp_path_factory.mktemp("bash-tool") / "data"
        with sweepless_server(host, fake, data, forker) as started:
            yield started


@pytest.fixture
def client(server: ServerProcess) -> Iterator[anthropic.Anthropic]:
    with sdk_of(server) as opened:
        yield opened


def bash(client: anthropic.Anthropic, session_id: str, command: str) -> Any:
    """The result of one bash call of ``command``."""
    tool_input = {"command": command, "timeout_ms": HANG_GUARD_MS}
    events = turn_events(client, session_id, f"call bash {json.dumps(tool_input)}")
    [result] = [e for e in events if e.type == "agent.tool_result"]
    return result


@pytest.mark.parametrize(("command", "code"), [("exit 3", 3), ("kill -9 $$", 128 + 9)])
def test_a_shell_that_exits_with_a_job_in_the_background_ends_the_call(
    client: anthropic.Anthropic, command: str, code: int
) -> None:
    """The job holds the shell's output open: the call still ends when the
    shell does, with its exit code, and the job goes with the shell; also
    when the shell is killed, and runs nothing more."""
    session_id = tool_session(client)
    assert bash(client, session_id, "sleep 600 & echo started").content[0].text == "started"

    ended = bash(client, session_id, f"echo bye; {command}")
    assert ended.is_error
    assert ended.content[0].text == (
        f"bye\n[the shell exited with code {code}; the next command starts a new shell]"
    )
    assert bash(client, session_id, "pgrep -x sleep || echo none").content[0].text == "none"


def test_a_shell_that_exits_with_a_job_outside_its_group_ends_the_call(
    client: anthropic.Anthropic,
) -> None:
    """A job that left the shell's group (``setsid``) outlives it and holds its
    output open for good: the call ends all the same."""
    session_id = tool_session(client)
    bash(client, session_id, "setsid sleep 600 & echo started")
    ended = bash(client, session_id, "exit 4")
    assert ended.content[0].text == (
        "[the shell exited with code 4; the next command starts a new shell]"
    )
    assert bash(client, session_id, "echo fresh").content[0].text == "fresh"


def test_a_command_that_redirects_the_shells_output_ends_and_the_next_call_shows_its_output(
    client: anthropic.Anthropic,
) -> None:
    """``exec >file`` and ``exec 2>/dev/null`` change the persistent shell's
    own output: the call still ends when its command does, and the next call's
    output and errors reach the model again."""
    session_id = tool_session(client)
    logged = bash(client, session_id, "echo shown; exec > log.txt; echo logged; export KEPT=1")
    assert (logged.is_error, logged.content[0].text) == (False, "shown")
    after = bash(client, session_id, 'cat log.txt; echo "kept=$KEPT"')
    assert after.content[0].text == "logged\nkept=1"

    quiet = bash(client, session_id, "exec 2>/dev/null; ls /nowhere")
    assert quiet.is_error and quiet.content[0].text == "[exit code 2]"
    failed = bash(client, session_id, "ls /nowhere")
    assert "No such file or directory" in failed.content[0].text
