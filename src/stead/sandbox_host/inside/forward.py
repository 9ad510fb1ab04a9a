"""The egress forwarder: relays each TCP connection on 127.0.0.1:3128 inside the
sandbox to the egress proxy's Unix socket, the sandbox's only way out.

Runs inside the sandbox under ``python3 -I -S`` with the standard library only
(see ``__init__.py``), in background threads of the supervisor. It must never
take that process down: every error ends one connection, never the accept loop.
It enforces nothing; the proxy on the other end of the socket decides (DESIGN
rule 7). Each connection uses two threads, one per direction, so a peer that
writes without reading cannot stall the other direction.

It is loaded on every sandbox's start, so it uses the interpreter's built-in
modules (``_socket``, ``_thread``, ``select``) rather than ``socket``,
``threading`` and ``selectors``, whose imports (enum, collections, ...) would
cost the start a few milliseconds. Threads started with ``_thread`` do not keep
the process alive, like daemon threads.
"""

from __future__ import annotations

import _socket
import _thread
import select
import time

MAX_CONNECTIONS = 256
CONNECT_TIMEOUT = 10.0
CHUNK = 64 * 1024
ACCEPT_BACKOFF = 0.1
"""Pause after a failed ``accept`` (out of file descriptors) before the next one."""


class Forwarder:
    """The accept loop, on a thread of its own once started; ``address`` is where
    it listens, ``close()`` stops it."""

    def __init__(
        self,
        listener: _socket.socket,
        unix_path: str,
        max_connections: int,
        connect_timeout: float,
    ) -> None:
        self.listener = listener
        self.address: tuple[str, int] = listener.getsockname()[:2]
        self.unix_path = unix_path
        self.connect_timeout = connect_timeout
        self._free_slots = max_connections
        self._lock = _thread.allocate_lock()
        self._open: set[_socket.socket] = set()
        self._closed = False
        self._wake_read, self._wake_write = _socket.socketpair()

    def start(self) -> None:
        _thread.start_new_thread(self.run, ())

    def close(self) -> None:
        """Stops accepting and breaks every open relay; safe to call more than once."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            open_now = list(self._open)
        for sock in open_now:
            _shutdown(sock, _socket.SHUT_RDWR)
        try:
            self._wake_write.send(b"x")
        except OSError:
            pass

    def discard(self) -> None:
        """Releases what ``__init__`` opened, for a forwarder whose thread never ran."""
        for sock in (self.listener, self._wake_read, self._wake_write):
            sock.close()

    def run(self) -> None:
        try:
            poller = select.poll()
            poller.register(self.listener.fileno(), select.POLLIN)
            poller.register(self._wake_read.fileno(), select.POLLIN)
            while not self._closed:
                try:
                    if poller.poll():
                        self._accept_one()
                except Exception:  # keep serving: the sandbox has no other way out
                    time.sleep(ACCEPT_BACKOFF)
        except Exception:  # the supervisor must outlive its forwarder
            pass
        finally:
            self.discard()

    def _accept_one(self) -> None:
        try:
            fd, _ = self.listener._accept()  # type: ignore[attr-defined]
        except BlockingIOError:
            return
        except OSError:  # EMFILE and the like: back off, keep serving
            time.sleep(ACCEPT_BACKOFF)
            return
        client = _socket.socket(self.listener.family, _socket.SOCK_STREAM, 0, fd)
        if self._closed or not self._take_slot():
            client.close()
            return
        try:
            _thread.start_new_thread(self._relay, (client,))
        except Exception:  # no thread to spare: drop this connection only
            client.close()
            self._give_slot()

    def _take_slot(self) -> bool:
        with self._lock:
            if not self._free_slots:
                return False
            self._free_slots -= 1
            return True

    def _give_slot(self) -> None:
        with self._lock:
            self._free_slots += 1

    def _track(self, sock: _socket.socket) -> bool:
        with self._lock:
            if self._closed:
                return False
            self._open.add(sock)
            return True

    def _untrack(self, *socks: _socket.socket) -> None:
        with self._lock:
            self._open.difference_update(socks)

    def _relay(self, client: _socket.socket) -> None:
        upstream: _socket.socket | None = None
        try:
            client.setblocking(True)
            try:
                client.setsockopt(_socket.IPPROTO_TCP, _socket.TCP_NODELAY, 1)
            except OSError:
                pass
            upstream = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
            upstream.settimeout(self.connect_timeout)
            upstream.connect(self.unix_path)
            upstream.settimeout(None)
            if not (self._track(client) and self._track(upstream)):
                return
            other_done = _thread.allocate_lock()
            other_done.acquire()
            _thread.start_new_thread(_pump_then_release, (upstream, client, other_done))
            _pump(client, upstream)
            other_done.acquire()
        except Exception:  # a proxy that is down closes this client, nothing more
            pass
        finally:
            if upstream is not None:
                self._untrack(upstream)
                upstream.close()
            self._untrack(client)
            client.close()
            self._give_slot()


def _pump_then_release(
    source: _socket.socket, sink: _socket.socket, done: _thread.LockType
) -> None:
    try:
        _pump(source, sink)
    finally:
        done.release()


def _pump(source: _socket.socket, sink: _socket.socket) -> None:
    """Copies until ``source`` ends (then half-closes ``sink``) or either side fails
    (then breaks both, which ends the other direction too)."""
    try:
        while True:
            data = source.recv(CHUNK)
            if not data:
                _shutdown(sink, _socket.SHUT_WR)
                return
            sink.sendall(data)
    except Exception:
        _shutdown(source, _socket.SHUT_RDWR)
        _shutdown(sink, _socket.SHUT_RDWR)


def _shutdown(sock: _socket.socket, how: int) -> None:
    try:
        sock.shutdown(how)
    except OSError:
        pass


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
    are closed at once. The accept thread runs until ``close()``.
    """
    listener = _socket.socket(_socket.AF_INET, _socket.SOCK_STREAM)
    forwarder: Forwarder | None = None
    try:
        listener.setsockopt(_socket.SOL_SOCKET, _socket.SO_REUSEADDR, 1)
        listener.bind((listen_host, listen_port))
        listener.listen(min(max_connections, _socket.SOMAXCONN))
        listener.setblocking(False)
        forwarder = Forwarder(listener, unix_path, max_connections, connect_timeout)
        forwarder.start()
    except BaseException:
        listener.close()
        if forwarder is not None:
            forwarder.discard()
        raise
    return forwarder
