"""``stead serve`` with span export on stops within a bound of its own when the
collector takes the connection and never answers (a wedged collector, a proxy
that holds the request): the spans not yet sent are dropped, not waited for."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from stead.testing import FakeModel, ServeForker, ServerProcess
from tests.conftest import loop_env

EXPORT_TIMEOUT = "60"
"""The exporter's own timeout for one export, in seconds: far past any wait here."""
STOPPED_WITHIN = 20.0
"""Longest this test waits for the server to end after SIGTERM."""


@contextlib.contextmanager
def silent_collector() -> Iterator[int]:
    """A loopback port that accepts connections and never answers."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    listener.settimeout(0.1)
    held: list[socket.socket] = []
    done = threading.Event()

    def accept() -> None:
        while not done.is_set():
            with contextlib.suppress(TimeoutError):
                held.append(listener.accept()[0])

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield int(listener.getsockname()[1])
    finally:
        done.set()
        thread.join(5)
        for connection in held:
            connection.close()
        listener.close()


def test_a_collector_that_never_answers_holds_the_stop_briefly(
    tmp_path: Path, fake_model: FakeModel, forker: ServeForker
) -> None:
    """Before, the stop waited the exporter's whole timeout (10 s by default)."""
    pytest.importorskip("opentelemetry.exporter.otlp.proto.http", reason="needs stead[otlp]")
    with silent_collector() as port:
        env = {
            **loop_env(fake_model),
            "STEAD_SANDBOX": "off",
            "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{port}",
            "OTEL_EXPORTER_OTLP_TIMEOUT": EXPORT_TIMEOUT,
        }
        server = ServerProcess(tmp_path / "data", env=env, forker=forker).start()
        try:
            # The start's requests left spans to export; the stop sends them.
            os.kill(server.pid, signal.SIGTERM)
            assert server.wait_exit(STOPPED_WITHIN), server.log_text()
        finally:
            server.stop()
    assert "spans not exported" in server.log_text()
