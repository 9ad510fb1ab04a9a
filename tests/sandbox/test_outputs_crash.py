"""SIGKILL of ``stead serve`` while a turn's outputs are being filed: after a
restart on the same data directory the turn finishes, and every file the agent
wrote to ``/mnt/session/outputs`` is in the Files API exactly once, with its
bytes. Killed at exact points (``STEAD_FAILPOINTS``): after an output's file was
begun and before its bytes were written, after one was filed, and just before
the turn's end (with all three filed)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from stead.testing import FakeModel, HostProcess, ServeForker
from tests.conftest import make_client
from tests.integration.helpers import message, wait_idle
from tests.sandbox.conftest import requires_isolation, serve_with_failpoints, shell, tool_session

pytestmark = requires_isolation

OUTPUTS = "/mnt/session/outputs"
WRITTEN = {"a.txt": b"alpha", "b.csv": b"1,2\n", "c.bin": bytes(range(256))}


def _printf(data: bytes) -> str:
    """``data`` as a printf format of octal escapes (any byte, shell-safe)."""
    return "".join("\\" + format(b, "03o") for b in data)


COMMAND = " && ".join(
    f"printf '{_printf(data)}' > {OUTPUTS}/{name}" for name, data in WRITTEN.items()
)


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeModel]:
    with FakeModel(shell) as model:
        yield model


@pytest.mark.parametrize(
    "point",
    [
        "outputs.after_begin:1",
        "outputs.after_begin:2",
        "outputs.after_capture:1",
        "outputs.after_capture:3",
        "turn.before_idle:1",
    ],
)
def test_outputs_are_filed_once_across_a_kill(
    point: str, fake: FakeModel, host: HostProcess, forker: ServeForker, tmp_path: Path
) -> None:
    server = serve_with_failpoints(tmp_path / "data", fake, host, forker, point)
    assert server.first_key
    with make_client(server.url, server.first_key) as client:
        session_id = tool_session(client)
        client.beta.sessions.events.send(session_id, events=[message(f"$ {COMMAND}")])
        assert server.wait_exit(timeout=60), f"not killed at {point}"
    server.kill()  # already dead: closes its log
    server = serve_with_failpoints(tmp_path / "data", fake, host, forker, None)
    try:
        assert server.first_key
        with make_client(server.url, server.first_key) as client:
            wait_idle(client, session_id, timeout=60)
            filed = list(client.beta.files.list(scope_id=session_id))
            assert sorted(f.filename for f in filed) == sorted(WRITTEN)
            for record in filed:
                assert client.beta.files.download(record.id).read() == WRITTEN[record.filename]
            results = [
                e
                for e in client.beta.sessions.events.list(session_id)
                if e.type == "agent.tool_result"
            ]
            assert len(results) == 1
    finally:
        server.stop()
