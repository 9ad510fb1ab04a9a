from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import anthropic
import pytest

from stead.testing import ServerProcess


@pytest.fixture(scope="session")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """One real ``stead serve`` shared by the tests that do not kill it."""
    process = ServerProcess(tmp_path_factory.mktemp("stead-data")).start()
    yield process
    process.stop()


@pytest.fixture(scope="session")
def api_key(server: ServerProcess) -> str:
    assert server.first_key, server.log_text()
    return server.first_key


def make_client(url: str, key: str, **options: object) -> anthropic.Anthropic:
    return anthropic.Anthropic(
        base_url=url,
        api_key=key,
        max_retries=0,
        timeout=30.0,
        _strict_response_validation=True,
        **options,  # type: ignore[arg-type]
    )


@pytest.fixture
def client(server: ServerProcess, api_key: str) -> Iterator[anthropic.Anthropic]:
    with make_client(server.url, api_key) as sdk:
        yield sdk


@pytest.fixture
def fresh_server(tmp_path: Path) -> Iterator[ServerProcess]:
    """A server of the test's own, for tests that kill or restart it."""
    process = ServerProcess(tmp_path / "data").start()
    yield process
    process.kill()
