"""Send -> stream: from POSTing a user event to an SSE reader of the session seeing it.

What is measured: a real ``stead serve`` (``stead.testing.ServerProcess``) on
loopback, one session, one SSE reader (``GET /v1/sessions/{id}/events/stream``,
a raw streaming httpx2 client in a thread of this process). The main thread
sends ``user.message`` events one at a time (``POST /v1/sessions/{id}/events``)
and, for each, takes three clock readings on one monotonic clock: just before
the POST (t0), when its response is in (t1), and when the reader has parsed the
frame carrying the event id the POST returned (t2; it may come before t1).
Reported: p50/p99 of send->SSE (t2 - t0) and of the POST alone (t1 - t0), and
the latency the stream adds over the POST, p50(send->SSE) - p50(POST). The
DESIGN budget is that added latency at most 1 ms at p50.

The baseline, measured in the same run with the same client code, is a bare
server (``_bare_server.py``): the same uvicorn + uvloop + httptools stack with
a raw ASGI app that stamps the events, fans the same SSE framing out in memory
and answers the same JSON, with no auth, validation or storage. So the ratio
(stead's send->SSE p50 over the bare one) is what stead's own work costs on top
of the HTTP stack both share; the bare server's POST time is the loopback HTTP
round-trip floor. Both servers run at once and are driven in alternating rounds
(which goes first swaps each round) after a warm-up, so drift hits both alike.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

import httpx2

from stead.testing import ServerProcess, client_tls, free_port

# isort: split
# The shared helpers sit next to this script (sys.path[0] when it is run).
from _common import BareServer, ms, percentile, size, stead_session, user_message, verdict
from _stream import STOP_TEXT, WAIT_S, StreamReader

SENDS = size("SENDS", 300, 10)
ROUNDS = size("ROUNDS", 10, 1)
WARMUP = size("WARMUP", 20, 2)
BUDGET_ADDED_S = 0.001


class Target:
    """One server under test: its send URL, its stream reader and the samples taken."""

    def __init__(self, name: str, send_url: str, stream_url: str, headers: dict[str, str]) -> None:
        self.name = name
        self.send_url = send_url
        self.headers = headers
        self.reader = StreamReader(stream_url, headers)
        self.sse: list[float] = []
        self.post: list[float] = []

    def send(self, client: httpx2.Client, text: str) -> tuple[float, float]:
        """Returns (send->SSE, POST) seconds for one event."""
        body = {"events": [user_message(text)]}
        start = time.perf_counter()
        response = client.post(self.send_url, json=body, headers=self.headers)
        posted = time.perf_counter()
        response.raise_for_status()
        event_id = response.json()["data"][0]["id"]
        return self.reader.seen_at(event_id) - start, posted - start


def measure(targets: list[Target]) -> None:
    for target in targets:
        target.reader.start()
        target.reader.wait_open()
    with httpx2.Client(verify=client_tls(), timeout=WAIT_S) as client:
        for target in targets:
            for i in range(WARMUP):
                target.send(client, f"warm-up {i}")
        per_round = SENDS // ROUNDS
        for r in range(ROUNDS):
            for target in targets if r % 2 == 0 else targets[::-1]:
                for i in range(per_round):
                    sse, post = target.send(client, f"round {r} event {i}")
                    target.sse.append(sse)
                    target.post.append(post)
        for target in targets:
            client.post(
                target.send_url, json={"events": [user_message(STOP_TEXT)]}, headers=target.headers
            ).raise_for_status()
    for target in targets:
        target.reader.join(WAIT_S)


def describe(target: Target) -> str:
    sse50, post50 = percentile(target.sse, 50), percentile(target.post, 50)
    return (
        f"send->SSE p50 {ms(sse50)} p99 {ms(percentile(target.sse, 99))},"
        f" POST p50 {ms(post50)} p99 {ms(percentile(target.post, 99))},"
        f" added p50 {ms(sse50 - post50)}"
    )


def run() -> str:
    with tempfile.TemporaryDirectory(prefix="stead-bench-") as tmp:
        server = ServerProcess(Path(tmp) / "data").start()
        try:
            key, session_id = stead_session(server)
            headers = {"x-api-key": key}
            base = f"{server.url}/v1/sessions/{session_id}/events"
            stead = Target("stead", base, f"{base}/stream", headers)
            with BareServer(free_port()) as bare_server:
                bare = Target(
                    "bare", f"{bare_server.url}/events", f"{bare_server.url}/stream", headers
                )
                measure([stead, bare])
        finally:
            server.stop()
    added = percentile(stead.sse, 50) - percentile(stead.post, 50)
    ratio = percentile(stead.sse, 50) / percentile(bare.sse, 50)
    return (
        f"send_to_stream: stead {describe(stead)}"
        f" (budget <= {ms(BUDGET_ADDED_S, 0)}, {verdict(added <= BUDGET_ADDED_S)})"
        f" | bare uvicorn {describe(bare)}"
        f" | ratio send->SSE {ratio:.2f}x | n={len(stead.sse)} each"
    )


def main() -> None:
    print(run(), flush=True)


if __name__ == "__main__":
    main()
