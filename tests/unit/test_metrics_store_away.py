"""``/metrics`` while the store cannot answer: every other figure is served,
the queued-runs gauge keeps its last value (before, the scrape failed)."""

from __future__ import annotations

from pathlib import Path

from starlette.testclient import TestClient

from stead.api import create_app
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
