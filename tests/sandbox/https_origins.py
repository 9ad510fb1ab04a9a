"""HTTPS servers on loopback standing in for the hosts a sandbox calls: each
records what reached it (host, path, Authorization, body) and answers ``ok``,
never an echo, since a reply would carry a secret into the sandbox."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import trustme

from tests.web_origins import serving


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

    with serving(ThreadingHTTPServer(("127.0.0.1", 0), Handler), ca, names) as port:
        found.port = port
        yield found
