"""Loopback HTTP(S) servers standing in for the web that web_fetch and
web_search reach: each answers its routes (path -> ``Reply``, or a function
of the request) and records what reached it. Names reach them through
``STEAD_EGRESS_HOSTS`` pins to 127.0.0.1; nothing leaves loopback."""

from __future__ import annotations

import json
import ssl
import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

import trustme


@dataclass(frozen=True)
class Reply:
    status: int = 200
    body: bytes = b""
    content_type: str | None = "text/plain"
    headers: Mapping[str, str] = field(default_factory=dict)
    stall: bool = False
    """Take the request and never answer (until the origin stops)."""


@dataclass(frozen=True)
class Seen:
    host: str
    path: str
    query: dict[str, list[str]]


Route = Reply | Callable[[Seen], Reply]


@dataclass
class WebOrigin:
    port: int = 0
    seen: list[Seen] = field(default_factory=list)


def html(body: str, title: str = "A page") -> Reply:
    page = f"<!doctype html><html><head><title>{title}</title></head><body>{body}</body></html>"
    return Reply(body=page.encode(), content_type="text/html; charset=utf-8")


def searxng(results: list[dict[str, str]]) -> Route:
    """A SearXNG ``/search`` answering ``results`` to a ``format=json`` query."""

    def answer(seen: Seen) -> Reply:
        if seen.query.get("format") != ["json"]:
            return Reply(403, b"json format not enabled")
        query = seen.query.get("q", [""])[0]
        body = json.dumps({"query": query, "results": results}).encode()
        return Reply(body=body, content_type="application/json")

    return answer


@contextmanager
def web_origin(
    routes: Mapping[str, Route], *, ca: trustme.CA | None = None, names: tuple[str, ...] = ()
) -> Iterator[WebOrigin]:
    """Serves ``routes`` (HTTPS with a certificate from ``ca`` for ``names``
    when given) until the block ends; an unknown path is a 404."""
    found = WebOrigin()
    released = threading.Event()

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_GET(self) -> None:
            parts = urlsplit(self.path)
            seen = Seen(self.headers.get("Host", ""), parts.path, parse_qs(parts.query))
            found.seen.append(seen)
            route = routes.get(parts.path, Reply(404, b"not found"))
            reply = route(seen) if callable(route) else route
            if reply.stall:
                released.wait(30)
                return
            self.send_response(reply.status)
            if reply.content_type is not None:
                self.send_header("Content-Type", reply.content_type)
            for name, value in reply.headers.items():
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(reply.body)))
            self.end_headers()
            self.wfile.write(reply.body)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.block_on_close = False
    with serving(server, ca, names) as port:
        found.port = port
        try:
            yield found
        finally:
            released.set()


@contextmanager
def serving(
    server: ThreadingHTTPServer, ca: trustme.CA | None = None, names: tuple[str, ...] = ()
) -> Iterator[int]:
    """Runs ``server`` in a thread (over TLS with a certificate from ``ca`` for
    ``names`` when given) until the block ends; its port."""
    if ca is not None:
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        ca.issue_cert(*names).configure_cert(context)
        server.socket = context.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)
