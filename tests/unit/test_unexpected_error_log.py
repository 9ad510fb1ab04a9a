"""A request that fails on an error nothing expected: its log line names the
request by ``request_id``, as its access line does and as the 500 tells the
client to quote (before, the id was only in the message's text)."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

from stead.api import create_app
from stead.config import Settings
from stead.store.inmemory import InMemoryStore
from stead.telemetry import configure_logging


class BrokenStore(InMemoryStore):
    """A store whose agent listing fails as no store error does."""

    async def list_agents(self, *args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("a bug")


@pytest.fixture
def log_stream() -> Iterator[io.StringIO]:
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    stream = io.StringIO()
    configure_logging("info", "json", stream)
    try:
        yield stream
    finally:
        for handler in list(root.handlers):
            root.removeHandler(handler)
        for handler in handlers:
            root.addHandler(handler)
        root.setLevel(level)


def test_an_unhandled_error_s_line_carries_the_request_id(
    tmp_path: Path, log_stream: io.StringIO
) -> None:
    store = BrokenStore()
    settings = Settings(data_dir=tmp_path, sandbox="off")
    app = create_app(settings, store=store)
    with TestClient(app, raise_server_exceptions=False) as client:
        key = client.portal.call(_key, store)  # type: ignore[union-attr]
        answer = client.get("/v1/agents", headers={"x-api-key": key})
    assert answer.status_code == 500
    request_id = answer.headers["request-id"]
    lines = [json.loads(line) for line in log_stream.getvalue().splitlines()]
    failed = [line for line in lines if line["message"].startswith("unhandled error")]
    assert len(failed) == 1
    assert failed[0]["request_id"] == request_id
    assert "RuntimeError" in failed[0]["exception"]


async def _key(store: InMemoryStore) -> str:
    workspace = await store.create_workspace("w")
    return (await store.create_api_key(workspace.id, "k"))[1]
