"""``/metrics`` while the store cannot answer: every other figure is served,
the queued-runs gauge keeps its last value (before, the scrape failed)."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest
from starlette.testclient import TestClient

from stead import sandbox
from stead.api import create_app, health
from stead.config import Settings
from stead.store import DatabaseBusy
from stead.store.inmemory import InMemoryStore


class AwayStore(InMemoryStore):
    """A store whose queued runs cannot be read once ``away`` is set."""

    away = False

    async def queued_runs(self, session_id: str | None = None) -> list[tuple[str, str]]:
        if self.away:
            raise DatabaseBusy("the database is away")
        return await super().queued_runs(session_id)


def test_a_scrape_while_the_store_is_away_serves_the_rest(tmp_path: Path) -> None:
    store = AwayStore()
    settings = Settings(data_dir=tmp_path, sandbox="off", metrics="open")
    with TestClient(create_app(settings, store=store)) as client:
        assert "stead_queued_runs 0.0" in client.get("/metrics").text
        store.away = True
        scraped = client.get("/metrics")
    assert scraped.status_code == 200
    assert "stead_queued_runs 0.0" in scraped.text
    assert "stead_http_requests_total" in scraped.text


@pytest.mark.timeout(20)
def test_a_host_that_never_answers_holds_neither_a_scrape_nor_a_probe(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A sandbox host that takes the hello and never answers its ping (its loop
    blocked) held each scrape and readiness probe for the client's whole call
    timeout (10 s: a Prometheus scrape's default timeout), past CHECK_SECONDS.
    Now each waits CHECK_SECONDS at most, as for the store."""

    async def never(address: object) -> object:
        await anyio.sleep_forever()

    monkeypatch.setattr(health, "CHECK_SECONDS", 0.05)
    monkeypatch.setattr(sandbox, "host_status", never)
    settings = Settings(
        data_dir=tmp_path,
        metrics="open",
        sandbox_host_token="t" * 32,
        sandbox_host="tcp://127.0.0.1:9",
    )
    with TestClient(create_app(settings, store=InMemoryStore())) as client:
        scraped = client.get("/metrics")
        ready = client.get("/readyz")
    assert scraped.status_code == 200
    assert "stead_sandboxes{" not in scraped.text
    assert "stead_http_requests_total" in scraped.text
    assert ready.status_code == 503
    assert ready.json()["checks"]["sandbox_host"] == "no answer within 0.05s"
