"""A session's SSE stream read in a thread, noting when each event's frame was
complete: what the latency benchmarks time a send against. Not a benchmark itself.

Each moment is noted twice: on ``time.perf_counter`` (against a moment of this
process) and on the wall clock (against a server's stamp, such as an event's
``processed_at``: one machine, one clock).
"""

from __future__ import annotations

import json
import threading
import time

import httpx2

from stead.testing import client_tls

WAIT_S = 10.0
STOP_TEXT = "bench: stop reading"
"""A ``user.message`` with this text ends the reader."""


class StreamReader(threading.Thread):
    """Reads one SSE stream and notes when each event id's frame was complete."""

    def __init__(self, url: str, headers: dict[str, str]) -> None:
        super().__init__(daemon=True)
        self._url = url
        self._headers = headers
        self._seen: dict[str, tuple[float, float]] = {}
        self._cond = threading.Condition()
        self._open = threading.Event()
        self._error: BaseException | None = None

    def run(self) -> None:
        try:
            timeout = httpx2.Timeout(WAIT_S, read=60.0)
            with (
                httpx2.Client(verify=client_tls(), timeout=timeout) as client,
                client.stream("GET", self._url, headers=self._headers) as response,
            ):
                response.raise_for_status()
                self._open.set()
                self._read(response)
        except Exception as exc:  # surfaced to the main thread by seen_at / wait_open
            self._error = exc
        finally:
            self._open.set()
            with self._cond:
                self._cond.notify_all()

    def _read(self, response: httpx2.Response) -> None:
        data: str | None = None
        for line in response.iter_lines():
            if line.startswith("data:"):
                data = line[5:].strip()
            elif line == "" and data is not None:
                seen_at = time.perf_counter(), time.time()
                event = json.loads(data)
                data = None
                event_id = event.get("id")
                if event_id is None:
                    continue
                with self._cond:
                    self._seen[event_id] = seen_at
                    self._cond.notify_all()
                if any(block.get("text") == STOP_TEXT for block in event.get("content", ())):
                    return

    def wait_open(self) -> None:
        if not self._open.wait(WAIT_S) or self._error is not None:
            raise RuntimeError(f"stream {self._url} did not open: {self._error!r}")

    def seen_at(self, event_id: str) -> float:
        """When the frame of ``event_id`` was complete, on ``time.perf_counter``."""
        return self.seen(event_id)[0]

    def seen(self, event_id: str) -> tuple[float, float]:
        """When the frame of ``event_id`` was complete: (``time.perf_counter``,
        ``time.time``); waits for it (bounded)."""
        deadline = time.monotonic() + WAIT_S
        with self._cond:
            while event_id not in self._seen:
                left = deadline - time.monotonic()
                if left <= 0 or self._error is not None or not self.is_alive():
                    raise RuntimeError(f"no frame for {event_id} on {self._url}: {self._error!r}")
                self._cond.wait(left)
            return self._seen.pop(event_id)
