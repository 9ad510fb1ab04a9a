"""events.list of 10,000 events: paging through a long session log over the API.

What is measured: a real ``stead serve`` on loopback with one session holding
10,000 ``user.message`` events (sent through the API, 1,000 per POST, the
server's cap). One listing is ``GET /v1/sessions/{id}/events?limit=1000`` and
then the ``next_page`` cursor until there is none (10 pages), each response
parsed with ``.json()``; the median of 5 listings is reported, with events/s.

Baselines, in the same run, interleaved with stead's listings after a warm-up:

- sqlite3: the same 10,000 rows read straight from stead's own database file
  (``data_dir/stead.db``, table ``events``, ``WHERE session_id = ? ORDER BY
  seq``) on a plain ``sqlite3`` connection, with ``json.loads`` of each body.
  This is the floor for getting the log out of storage into Python objects.
- bare HTTP: the exact bytes of stead's own 10 response pages, stored in and
  served back by the bare server (``_bare_server.py``: the same uvicorn + uvloop
  + httptools stack, no database), fetched and parsed by the same client code.
  This is the floor for moving those bytes over loopback HTTP and decoding them.

The ratios say how far stead is from each floor and from their sum (the time a
server that did nothing but read SQLite and send bytes would roughly need).
"""

from __future__ import annotations

import json
import sqlite3
import tempfile
import time
from collections.abc import Callable
from contextlib import closing
from pathlib import Path

import httpx2

from stead.testing import ServerProcess, client_tls, free_port

# isort: split
# The shared helpers sit next to this script (sys.path[0] when it is run).
from _common import BareServer, median, ms, size, stead_session, user_message

EVENTS = size("EVENTS", 10_000, 200)
BATCH = min(1000, EVENTS)
PAGE = min(1000, EVENTS)
REPEATS = size("REPEATS", 5, 1)
TIMEOUT_S = 30.0


def fill(client: httpx2.Client, url: str, headers: dict[str, str]) -> None:
    for start in range(0, EVENTS, BATCH):
        events = [
            user_message(f"event {i}: a short user message")
            for i in range(start, min(start + BATCH, EVENTS))
        ]
        response = client.post(url, json={"events": events}, headers=headers)
        response.raise_for_status()
        wait_idle(client, url.removesuffix("/events"), headers)


def wait_idle(client: httpx2.Client, session_url: str, headers: dict[str, str]) -> None:
    """Each batch starts a turn; the next waits for it, as the pending queue is bounded."""
    deadline = time.monotonic() + TIMEOUT_S
    while client.get(session_url, headers=headers).json()["status"] != "idle":
        if time.monotonic() > deadline:
            raise RuntimeError("the session stayed busy")
        time.sleep(0.01)


def list_stead(client: httpx2.Client, url: str, headers: dict[str, str]) -> list[bytes]:
    """Every page of the log, as raw bodies; each is also parsed, as a client would."""
    pages: list[bytes] = []
    count = 0
    # Only the benchmark's own messages: the agent loop adds its events to the session.
    params: dict[str, str | int] = {"limit": PAGE, "types[]": "user.message"}
    while True:
        response = client.get(url, params=params, headers=headers)
        response.raise_for_status()
        body = response.json()
        pages.append(response.content)
        count += len(body["data"])
        if not body["next_page"]:
            break
        params = {"limit": PAGE, "types[]": "user.message", "page": body["next_page"]}
    if count != EVENTS:
        raise RuntimeError(f"listed {count} events, expected {EVENTS}")
    return pages


def list_sqlite(conn: sqlite3.Connection, session_id: str) -> None:
    rows = conn.execute(
        "SELECT session_id, seq, id, type, body, processed_at FROM events "
        "WHERE session_id = ? AND type = 'user.message' ORDER BY seq",
        (session_id,),
    ).fetchall()
    bodies = [json.loads(row[4]) for row in rows]
    if len(bodies) != EVENTS:
        raise RuntimeError(f"read {len(bodies)} rows, expected {EVENTS}")


def list_bare(client: httpx2.Client, urls: list[str]) -> None:
    for url in urls:
        response = client.get(url)
        response.raise_for_status()
        response.json()


def timed(fn: Callable[..., object], *args: object) -> float:
    start = time.perf_counter()
    fn(*args)
    return time.perf_counter() - start


def run() -> str:
    with tempfile.TemporaryDirectory(prefix="stead-bench-") as tmp:
        data_dir = Path(tmp) / "data"
        server = ServerProcess(data_dir).start()
        try:
            key, session_id = stead_session(server)
            headers = {"x-api-key": key}
            url = f"{server.url}/v1/sessions/{session_id}/events"
            with (
                httpx2.Client(verify=client_tls(), timeout=TIMEOUT_S) as client,
                BareServer(free_port()) as bare,
                closing(sqlite3.connect(f"file:{data_dir / 'stead.db'}?mode=ro", uri=True)) as db,
            ):
                fill(client, url, headers)
                pages = list_stead(client, url, headers)
                blob_urls = [f"{bare.url}/blobs/{i}" for i in range(len(pages))]
                for blob_url, page in zip(blob_urls, pages, strict=True):
                    client.put(blob_url, content=page).raise_for_status()
                list_sqlite(db, session_id)
                list_bare(client, blob_urls)
                stead_s, sqlite_s, bare_s = [], [], []
                for _ in range(REPEATS):
                    stead_s.append(timed(list_stead, client, url, headers))
                    sqlite_s.append(timed(list_sqlite, db, session_id))
                    bare_s.append(timed(list_bare, client, blob_urls))
        finally:
            server.stop()
    stead_m, sqlite_m, bare_m = median(stead_s), median(sqlite_s), median(bare_s)
    return (
        f"events_list: stead {EVENTS} events in {len(pages)} pages {ms(stead_m, 1)}"
        f" ({EVENTS / stead_m:,.0f} events/s)"
        f" | sqlite3+json.loads {ms(sqlite_m, 1)} ({EVENTS / sqlite_m:,.0f} events/s)"
        f" | bare HTTP same bytes {ms(bare_m, 1)}"
        f" | ratio {stead_m / sqlite_m:.1f}x sqlite3, {stead_m / bare_m:.1f}x bare HTTP,"
        f" {stead_m / (sqlite_m + bare_m):.1f}x both | median of {REPEATS}"
    )


def main() -> None:
    print(run(), flush=True)


if __name__ == "__main__":
    main()
