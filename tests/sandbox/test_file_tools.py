"""The built-in tools as an agent meets them: the official SDK against a real
``stead serve`` and sandbox host (bubblewrap), the fake model calling the tool.
What a call leaves in the session must keep the session's next requests
acceptable to the model API."""

from __future__ import annotations

from collections.abc import Iterator

import anthropic
import pytest

from stead.testing import FakeModel, HostProcess, ServeForker, ServerProcess
from tests.conftest import sdk_of
from tests.images import png
from tests.sandbox.conftest import (
    calling,
    requires_isolation,
    sweepless_server,
    tool_session,
    turn_events,
)

pytestmark = requires_isolation


@pytest.fixture(scope="module")
def server(
    host: HostProcess, tmp_path_factory: pytest.TempPathFactory, forker: ServeForker
) -> Iterator[ServerProcess]:
    with FakeModel(calling) as fake:
        data = tmp_path_factory.mktemp("file-tools") / "data"
        with sweepless_server(host, fake, data, forker) as started:
            yield started


@pytest.fixture
def client(server: ServerProcess) -> Iterator[anthropic.Anthropic]:
    with sdk_of(server) as opened:
        yield opened


def put(client: anthropic.Anthropic, session_id: str, name: str, data: bytes) -> None:
    """Puts ``data`` at ``name`` in the workspace (a bash call printing it)."""
    printed = "".join(f"\\x{b:02x}" for b in data)
    events = turn_events(client, session_id, f"$ printf '{printed}' > {name} && echo put")
    assert [e.content[0].text for e in events if e.type == "agent.tool_result"] == ["put"]


def test_an_image_larger_than_the_model_takes_is_refused_and_the_session_goes_on(
    client: anthropic.Anthropic,
) -> None:
    """The Messages API refuses a request holding an image over 8000 pixels on
    a side, and every later request of the session holds the tool result: read
    as an image, it would leave the session unable to take another turn."""
    session_id = tool_session(client)
    put(client, session_id, "tall.png", png(64, 9000))
    put(client, session_id, "fine.png", png(64, 64))

    events = turn_events(client, session_id, 'call read {"file_path": "tall.png"}')
    [result] = [e for e in events if e.type == "agent.tool_result"]
    assert result.is_error
    assert "64x9000 pixels" in result.content[0].text
    assert not [e for e in events if e.type == "session.error"]
    assert events[-1].stop_reason.type == "end_turn"

    events = turn_events(client, session_id, 'call read {"file_path": "fine.png"}')
    [result] = [e for e in events if e.type == "agent.tool_result"]
    assert not result.is_error and result.content[0].type == "image"
    assert events[-1].stop_reason.type == "end_turn"
