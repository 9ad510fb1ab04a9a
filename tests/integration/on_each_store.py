"""What a module of API tests imports to run once on SQLite and once on PostgreSQL,
each on a ``stead serve`` of its own (``server_on_each_store``)::

    from tests.integration.on_each_store import ON_EACH_STORE, client

    pytestmark = ON_EACH_STORE
    __all__ = ["client"]

``client``, ``server`` and ``api_key`` (import the ones the module uses) stand
in for the shared SQLite server's fixtures of the same names.
"""

from __future__ import annotations

import anthropic
import pytest

from stead.testing import ServerProcess
from tests.databases import BACKENDS

ON_EACH_STORE = pytest.mark.parametrize(
    "server_on_each_store", BACKENDS, indirect=True, scope="module"
)


@pytest.fixture
def client(client_on_each_store: anthropic.Anthropic) -> anthropic.Anthropic:
    """The SDK on this module's server, once on SQLite and once on PostgreSQL."""
    return client_on_each_store


@pytest.fixture
def server(server_on_each_store: ServerProcess) -> ServerProcess:
    return server_on_each_store


@pytest.fixture
def api_key(server_on_each_store: ServerProcess) -> str:
    assert server_on_each_store.first_key, server_on_each_store.log_text()
    return server_on_each_store.first_key
