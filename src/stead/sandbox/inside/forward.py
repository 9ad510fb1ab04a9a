"""The egress forwarder: relays each TCP connection on 127.0.0.1:3128 inside the
sandbox to the egress proxy's Unix socket, the sandbox's only way out.

Runs inside the sandbox under ``python3 -I -S`` with the standard library only
(see ``__init__.py``), in daemon threads of the supervisor. It must never take
that process down: every error ends one connection, never the accept loop. It
enforces nothing; the proxy on the other end of the socket decides (DESIGN
rule 7). Each connection uses two threads, one per direction, so a peer that
writes without reading cannot stall the other direction.
"""

from __future__ import annotations

import contextlib
import selectors
import socket
import threading
import time

MAX_CONNECTIONS = 256
CONNECT_TIMEOUT = 10.0
CHUNK = 64 * 1024
ACCEPT_BACKOFF = 0.1
"""Pause after a failed ``accept`` (out of file descriptors) before the next one."""


class Forwarder(threading.Thread):
    """The accept loop; ``address`` is where it listens, ``close()`` stops it."""

    def __init__(
        self,
        listener: socket.socket,
        unix_path: str,
        max_connections: int,
        connect_timeout: float,
    ) -> None:
        super().__init__(name="stead-egress-forwarder", daemon=True)
        self.listener = listener
        self.address: tuple[str, int] = listener.getsockname()[:2]
        self.unix_path = unix_path
        self.connect_timeout = connect_timeout
        self._slots = threading.BoundedSemaphore(max_connections)
        self._lock = threading.Lock()
        self._open: set[socket.socket] = set()
        self._closed = False
        self._wake_read, self._wake_write = socket.socketpair()

    def close(self) -> None:
        """Stops accepting and breaks every open relay; safe to call more than once."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            open_now = list(self._open)
        for sock in open_now:
            _shutdown(sock, socket.SHUT_RDWR)
        with contextlib.suppress(OSError):
            self._wake_write.send(b"x")

    def discard(self) -> None:
        """Releases what ``__init__`` opened, for a forwarder whose thread never ran."""
        for sock in (self.listener, self._wake_read, self._wake_write):
            sock.close()

    def run(self) -> None:
        try:
            with selectors.DefaultSelector() as selector:
                selector.register(self.listener, selectors.EVENT_READ)
                selector.register(self._wake_read, selectors.EVENT_READ)
                while not self._closed:
                    try:
                        if selector.select():
                            self._accept_one()
                    except Exception:  # keep serving: the sandbox has no other way out
                        time.sleep(ACCEPT_BACKOFF)
        except Exception:  # the supervisor must outlive its forwarder
            pass
        finally:
            self.discard()

    def _accept_one(self) -> None:
        try:
            client, _ = self.listener.accept()
        except BlockingIOError:
            return
        except OSError:  # EMFILE and the like: back off, keep serving
            time.sleep(ACCEPT_BACKOFF)
            return
        if self._closed or not self._slots.acquire(blocking=False):
            client.close()
            return
        try:
            threading.Thread(
                target=self._relay, args=(client,), name="stead-egress-relay", daemon=True
            ).start()
        except Exception:  # no thread to spare: drop this connection only
            client.close()
            self._slots.release()

    def _track(self, sock: socket.socket) -> bool:
        with self._lock:
            if self._closed:
                return False
            self._open.add(sock)
            return True

    def _untrack(self, *socks: socket.socket) -> None:
        with self._lock:
            self._open.difference_update(socks)

    def _relay(self, client: socket.socket) -> None:
        upstream: socket.socket | None = None
        try:
            client.setblocking(True)
            with contextlib.suppress(OSError):
                client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            upstream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            upstream.settimeout(self.connect_timeout)
            upstream.connect(self.unix_path)
            upstream.settimeout(None)
            if not (self._track(client) and self._track(upstream)):
                return
            other = threading.Thread(
                target=_pump, args=(upstream, client), name="stead-egress-relay", daemon=True
            )
            other.start()
            _pump(client, upstream)
            other.join()
        except Exception:  # a proxy that is down closes this client, nothing more
            pass
        finally:
            if upstream is not None:
                self._untrack(upstream)
                upstream.close()
            self._untrack(client)
            client.close()
            self._slots.release()


def _pump(source: socket.socket, sink: socket.socket) -> None:
    """Copies until ``source`` ends (then half-closes ``sink``) or either side fails
    (then breaks both, which ends the other direction too)."""
    try:
        while True:
            data = source.recv(CHUNK)
            if not data:
                _shutdown(sink, socket.SHUT_WR)
                return
            sink.sendall(data)
    except Exception:
        _shutdown(source, socket.SHUT_RDWR)
        _shutdown(sink, socket.SHUT_RDWR)


def _shutdown(sock: socket.socket, how: int) -> None:
    with contextlib.suppress(OSError):
        sock.shutdown(how)


def start_forwarder(
    listen_host: str,
    listen_port: int,
    unix_path: str,
    *,
    max_connections: int = MAX_CONNECTIONS,
    connect_timeout: float = CONNECT_TIMEOUT,
) -> Forwarder:
    """Listens on ``listen_host:listen_port`` (port 0: any free port, see ``address``)
    and relays every connection to the Unix socket at ``unix_path``.

    Binding happens before this returns, so a process started afterwards can connect
    at once; a bind failure raises ``OSError`` and starts no thread. After that
    nothing raises: a connection the proxy does not accept (socket missing, refused,
    ``connect_timeout`` passed) is closed, and beyond ``max_connections`` new ones
    are closed at once. The returned thread is a daemon; ``close()`` stops it.
    """
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    forwarder: Forwarder | None = None
    try:
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind((listen_host, listen_port))
        listener.listen(min(max_connections, socket.SOMAXCONN))
        listener.setblocking(False)
        forwarder = Forwarder(listener, unix_path, max_connections, connect_timeout)
        forwarder.start()
    except BaseException:
        listener.close()
        if forwarder is not None:
            forwarder.discard()
        raise
    return forwarder
