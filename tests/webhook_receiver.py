"""A real HTTP receiver on loopback for webhook tests: records every request
(headers and body) and answers with the status it is told to."""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from stead.testing.mcp_server import MCP_TEST_PIN

HOOKS_HOST = "hooks.test"
PINNED = json.dumps({**MCP_TEST_PIN, HOOKS_HOST: "127.0.0.1"})
"""``STEAD_EGRESS_HOSTS`` of a server whose webhooks reach a receiver on loopback
(and whose agents the fake MCP servers)."""


@dataclass(frozen=True)
class Received:
    headers: dict[str, str]
    body: str


class Receiver:
    def __init__(self, port: int = 0) -> None:
        self.received: list[Received] = []
        self.status = 200
        self.answering = threading.Event()
        """Cleared, the receiver holds each answer until it is set again."""
        self.answering.set()
        self._changed = threading.Condition()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("content-length", "0"))
                body = self.rfile.read(length).decode()
                headers = {k.lower(): v for k, v in self.headers.items()}
                with receiver._changed:
                    receiver.received.append(Received(headers, body))
                    receiver._changed.notify_all()
                receiver.answering.wait(timeout=60)
                self.send_response(receiver.status)
                self.send_header("content-length", "0")
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:
                return None

        self._server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        """The receiver by its pinned name (``PINNED``)."""
        return f"http://{HOOKS_HOST}:{self.port}/"

    def __enter__(self) -> Receiver:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.answering.set()
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=10)

    def wait_for(self, count: int, timeout: float = 30.0) -> list[Received]:
        """The first ``count`` requests, once that many have arrived (bounded wait)."""
        with self._changed:
            arrived = self._changed.wait_for(lambda: len(self.received) >= count, timeout)
            assert arrived, f"{len(self.received)} of {count} webhook deliveries arrived"
            return list(self.received[:count])
