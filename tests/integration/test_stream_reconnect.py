"""Resuming a stream: a reader drops mid-stream while 500 events arrive, then
reconnects with Last-Event-ID (or ?after=) and gets the rest exactly once, in order."""

from __future__ import annotations

import os
import signal
import threading
from typing import Any

import anthropic
import httpx2
import pytest

from stead.testing import ServerProcess, client_tls
from tests.conftest import STOPPED_WITHIN, make_client
from tests.integration.helpers import message, new_session, sse_frames

TOTAL = 500


def _read(
    url: str,
    headers: dict[str, str],
    stop_after: int | None,
    want: set[str],
    opened: threading.Event | None = None,
) -> list[Any]:
    """Reads user.message frames until ``stop_after`` of them (or every id in ``want``)."""
    got: list[Any] = []
    with httpx2.stream("GET", url, headers=headers, timeout=60, verify=client_tls()) as response:
        assert response.status_code == 200
        if opened is not None:
            opened.set()  # the server subscribes before it sends the headers
        for frame in sse_frames(response):
            # Only logged events carry an SSE id; queued echoes (processed_at null)
            # reach live readers too and are followed by their logged form.
            if frame["event"] != "user.message" or "id" not in frame:
                continue
            got.append(frame)
            if stop_after is not None and len(got) >= stop_after:
                break
            if want and want <= {f["data"]["id"] for f in got}:
                break
    return got


@pytest.mark.parametrize("resume_with", ["header", "query"])
def test_reconnect_gets_every_event_once_in_order(
    server: ServerProcess, api_key: str, client: anthropic.Anthropic, resume_with: str
) -> None:
    session_id = new_session(client)
    url = f"{server.url}/v1/sessions/{session_id}/events/stream"
    headers = {"x-api-key": api_key}
    sent_ids: list[str] = []

    def send_all() -> None:
        with httpx2.Client(verify=client_tls(), headers=headers, timeout=30) as http:
            for i in range(TOTAL):
                response = http.post(
                    f"{server.url}/v1/sessions/{session_id}/events",
                    json={"events": [message(f"m{i}")]},
                )
                response.raise_for_status()
                sent_ids.append(response.json()["data"][0]["id"])

    with httpx2.stream("GET", url, headers=headers, timeout=60, verify=client_tls()):
        pass  # a stream that opens and closes at once does no harm
    reader_first: list[Any] = []
    opened = threading.Event()

    def first_reader() -> None:
        reader_first.extend(_read(url, headers, stop_after=100, want=set(), opened=opened))

    reader = threading.Thread(target=first_reader)
    reader.start()
    assert opened.wait(30)
    sender = threading.Thread(target=send_all)
    sender.start()
    reader.join(60)
    assert len(reader_first) == 100
    last_id = reader_first[-1]["id"]
    assert last_id == reader_first[-1]["data"]["id"]
    sending_at_resume = sender.is_alive()
    # Resume while the sender is (normally) still going: backlog, then live, no seam.
    remaining = TOTAL - len(reader_first)
    if resume_with == "header":
        resumed = _read(url, {**headers, "Last-Event-ID": last_id}, remaining, set())
    else:
        resumed = _read(f"{url}?after={last_id}", headers, remaining, set())
    sender.join(120)
    assert len(sent_ids) == TOTAL
    seen = [f["data"]["id"] for f in reader_first + resumed]
    assert len(seen) == len(set(seen)), "an event was delivered twice"
    assert seen == sent_ids, "events missing or out of order"
    print(
        f"reconnect ({resume_with}): {len(reader_first)} before the drop, {len(resumed)} after, "
        f"sender still sending at resume: {sending_at_resume}"
    )


def test_resume_from_unknown_event_is_a_400(
    server: ServerProcess, api_key: str, client: anthropic.Anthropic
) -> None:
    session_id = new_session(client)
    response = httpx2.get(
        f"{server.url}/v1/sessions/{session_id}/events/stream",
        headers={"x-api-key": api_key, "Last-Event-ID": "sevt_nope"},
        verify=client_tls(),
    )
    assert response.status_code == 400
    message = response.json()["error"]["message"]
    # Not "no such event" alone: a queued event's id is not in the log yet.
    assert message.startswith("Last-Event-ID: no event 'sevt_nope' in this session's log")
    assert "still queued" in message


def test_a_stopping_server_ends_its_streams_at_once_and_quietly(
    fresh_server: ServerProcess,
) -> None:
    """uvicorn waits for open responses before it stops; an event stream ends
    only when its reader leaves, so a server with one open took its whole
    graceful-shutdown time to stop and logged an error and a traceback."""
    assert fresh_server.first_key
    with make_client(fresh_server.url, fresh_server.first_key) as client:
        session_id = new_session(client)
    url = f"{fresh_server.url}/v1/sessions/{session_id}/events/stream"
    headers = {"x-api-key": fresh_server.first_key}
    with httpx2.stream("GET", url, headers=headers, timeout=30, verify=client_tls()) as response:
        assert response.status_code == 200
        chunks = response.iter_bytes()
        next(chunks)  # the stream is open
        os.kill(fresh_server.pid, signal.SIGTERM)
        # The server ended it: a stream uvicorn cancels at its graceful limit is
        # cut mid-body, which httpx raises as an incomplete chunked read.
        rest = b"".join(chunks)
        assert fresh_server.wait_exit(STOPPED_WITHIN), "the server did not stop by itself"
    assert b"event:" not in rest
    log = fresh_server.log_text()
    assert "graceful shutdown exceeded" not in log  # nothing was left for uvicorn to cancel
    assert "Traceback" not in log
