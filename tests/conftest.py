from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import anthropic
import httpx2
import pytest

from stead.blobs import BlobConfig
from stead.testing import FakeModel, ServeForker, ServerProcess, client_tls, echo
from stead.testing.mcp_server import MCP_TEST_PIN
from stead.testing.seaweed import S3Server, seaweed_s3
from tests.databases import PostgresRun, database_url, postgres_run, serve_env

__all__ = ["database_url", "postgres_run"]  # fixtures for every test module

STOPPED_WITHIN = 30.0
"""Longest a test waits for a server to end after SIGTERM: a hang guard, far
past uvicorn's graceful limit (3 s), after which it cancels what is left."""


@pytest.fixture(scope="session")
def s3_server() -> Iterator[S3Server]:
    """A SeaweedFS S3 server on loopback, started on first use."""
    with seaweed_s3() as server:
        yield server


def s3_config(server: S3Server, url: str, **options: float) -> BlobConfig:
    return BlobConfig(
        url=url,
        s3_endpoint=server.endpoint,
        s3_region=server.region,
        s3_access_key_id=server.access_key_id,
        s3_secret_access_key=server.secret_access_key,
        **options,
    )


def loop_env(fake: FakeModel, **extra: str) -> dict[str, str]:
    """Environment for a ``stead serve`` whose agent loop talks to ``fake``, never a
    real API, and may reach the fake MCP servers by their pinned name."""
    return {
        "STEAD_UPSTREAM_BASE_URL": fake.url,
        "ANTHROPIC_API_KEY": "test-key-for-the-fake-model",
        "STEAD_SANDBOX": "unsafe_local",
        "STEAD_EGRESS_HOSTS": json.dumps(MCP_TEST_PIN),
        **extra,
    }


@pytest.fixture(scope="session")
def fake_model() -> Iterator[FakeModel]:
    """An upstream that answers every turn by echoing the user's words."""
    with FakeModel(echo) as fake:
        yield fake


@pytest.fixture(scope="session")
def forker() -> Iterator[ServeForker]:
    """Starts servers in a fraction of a second (a fresh interpreter spends seconds
    of CPU importing stead): every test server is forked from it."""
    with ServeForker() as opened:
        yield opened


def serving(data: Path, env: dict[str, str], forker: ServeForker) -> Iterator[ServerProcess]:
    """A started ``stead serve`` for a fixture to yield from, stopped afterwards."""
    process = ServerProcess(data, env=env, forker=forker).start()
    yield process
    process.stop()


@pytest.fixture(scope="session")
def server(
    tmp_path_factory: pytest.TempPathFactory, fake_model: FakeModel, forker: ServeForker
) -> Iterator[ServerProcess]:
    """One real ``stead serve`` shared by the tests that do not kill it."""
    yield from serving(tmp_path_factory.mktemp("stead-data"), loop_env(fake_model), forker)


@pytest.fixture(scope="session")
def api_key(server: ServerProcess) -> str:
    assert server.first_key, server.log_text()
    return server.first_key


def sdk_of(server: ServerProcess) -> anthropic.Anthropic:
    """The SDK as the server's first key (printed at its first start)."""
    assert server.first_key, server.log_text()
    return make_client(server.url, server.first_key)


def make_client(url: str, key: str, **options: object) -> anthropic.Anthropic:
    defaults: dict[str, object] = {"max_retries": 0, "timeout": 30.0}
    return anthropic.Anthropic(
        base_url=url,
        api_key=key,
        http_client=anthropic.DefaultHttpxClient(verify=client_tls()),
        _strict_response_validation=True,
        **(defaults | options),  # type: ignore[arg-type]
    )


@pytest.fixture
def client(server: ServerProcess, api_key: str) -> Iterator[anthropic.Anthropic]:
    with make_client(server.url, api_key) as sdk:
        yield sdk


@pytest.fixture
def fresh_server(
    request: pytest.FixtureRequest, tmp_path: Path, fake_model: FakeModel, forker: ServeForker
) -> Iterator[ServerProcess]:
    """A server of the test's own, for tests that kill or restart it: on SQLite,
    or on each store with ``parametrize("fresh_server", BACKENDS, indirect=True)``."""
    with store_env(request) as extra:
        env = loop_env(fake_model, **extra)
        process = ServerProcess(tmp_path / "data", env=env, forker=forker).start()
        yield process
        process.kill()


@pytest.fixture(scope="module")
def server_on_each_store(
    request: pytest.FixtureRequest,
    tmp_path_factory: pytest.TempPathFactory,
    fake_model: FakeModel,
    forker: ServeForker,
) -> Iterator[ServerProcess]:
    """A ``stead serve`` of the module's own, on the store its parameter names
    (parametrise with ``tests.databases.BACKENDS``, ``indirect=True``). A module's
    ``SERVER_ENV`` (a dict of settings) is added to the server's environment."""
    data = tmp_path_factory.mktemp("stead-data")
    extra: dict[str, str] = dict(getattr(request.module, "SERVER_ENV", {}))
    with store_env(request) as on_store:
        env = loop_env(fake_model, **extra, **on_store)
        process = ServerProcess(data, env=env, forker=forker).start()
        yield process
        process.stop()


@contextmanager
def store_env(request: pytest.FixtureRequest) -> Iterator[dict[str, str]]:
    """The settings that put a ``stead serve`` on the store ``request.param`` names
    (one of ``tests.databases.BACKENDS``): none for SQLite, a schema of its own
    (dropped afterwards) and a shared sealing key for PostgreSQL."""
    if getattr(request, "param", "sqlite") != "postgres":
        yield {}
        return
    run: PostgresRun = request.getfixturevalue("postgres_run")
    schema = run.new_schema()
    try:
        yield serve_env(run.url(schema))
    finally:
        run.drop_schema(schema)


@pytest.fixture
def client_on_each_store(server_on_each_store: ServerProcess) -> Iterator[anthropic.Anthropic]:
    with sdk_of(server_on_each_store) as sdk:
        yield sdk


@pytest.fixture(scope="module")
def admin(served: ServerProcess) -> Iterator[httpx2.Client]:
    """A client with an operator's key (``stead keys create --admin``) of the
    module's ``served`` server."""
    key = served.create_key(admin=True)
    with httpx2.Client(
        verify=client_tls(), base_url=served.url, headers={"x-api-key": key}, timeout=30
    ) as http:
        yield http
