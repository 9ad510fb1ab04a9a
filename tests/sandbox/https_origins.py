"""HTTPS servers on loopback standing in for the hosts a sandbox calls: each
records what reached it (host, path, Authorization, body) and answers ``ok``,
never an echo, since a reply would carry a secret into the sandbox."""

from __future__ import annotations

import ssl
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import trustme


@dataclass
class Origin:
    port: int
    seen: list[dict[str, str]] = field(default_factory=list)


@contextmanager
def https_origin(ca: trustme.CA, names: tuple[str, ...]) -> Iterator[Origin]:
    """Serves HTTPS for ``names`` with a certificate from ``ca`` until the block ends."""
    found = Origin(0)

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def _answer(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length).decode() if length else ""
            found.seen.append(
                {
                    "host": self.headers.get("Host", ""),
                    "path": self.path,
                    "authorization": self.headers.get("Authorization", ""),
                    "body": body,
                }
            )
            self.send_response(200)
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"ok")

        do_GET = do_POST = _answer

        def log_message(self, *args: object) -> None:
            pass

    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert(*names).configure_cert(context)
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    found.port = server.server_address[1]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield found
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)
