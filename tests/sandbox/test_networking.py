"""An environment's ``networking`` as a session's sandbox lives it, through the
official SDK against a real ``stead serve`` and a real sandbox host: what bash
inside may reach, before and after ``environments.update``. The hosts are
names pinned to an HTTP server on loopback (``STEAD_EGRESS_HOSTS``)."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from typing import Any

import anthropic
import pytest

from stead.testing import FakeModel, HostProcess, ServeForker, ServerProcess
from tests.conftest import loop_env, sdk_of
from tests.sandbox.conftest import bash_turn, requires_isolation, shell

pytestmark = requires_isolation

NAMES = ("first.net.test", "second.net.test")


@pytest.fixture(scope="module")
def server(
    tmp_path_factory: pytest.TempPathFactory, forker: ServeForker
) -> Iterator[ServerProcess]:
    root = tmp_path_factory.mktemp("networking")
    pinned = {"STEAD_EGRESS_HOSTS": json.dumps(dict.fromkeys(NAMES, "127.0.0.1"))}
    host = HostProcess(root / "state", env=pinned, forker=forker).start()
    try:
        with FakeModel(shell) as fake:
            # The brain resolves the names too: it lists the tools of MCP servers named so.
            env = loop_env(fake, **host.settings_env, **pinned)
            started = ServerProcess(root / "data", env=env, forker=forker).start()
            try:
                yield started
            finally:
                started.stop()
    finally:
        host.stop()


def _limited(*hosts: str) -> dict[str, Any]:
    return {"type": "cloud", "networking": {"type": "limited", "allowed_hosts": list(hosts)}}


def _session(client: anthropic.Anthropic, environment_id: str, **agent: Any) -> str:
    created = client.beta.agents.create(
        name="net",
        model="claude-sonnet-4-6",
        **({"tools": [{"type": "agent_toolset_20260401"}]} | agent),
    )
    return client.beta.sessions.create(agent=created.id, environment_id=environment_id).id


def _mcp(name: str, port: int) -> dict[str, Any]:
    """An agent's ``mcp_servers`` and ``tools`` for one MCP server at ``name``
    (the loopback server, which is no MCP server: its tools fail to list, the
    turn goes on without them)."""
    return {
        "mcp_servers": [{"type": "url", "name": "probe", "url": f"http://{name}:{port}/mcp"}],
        "tools": [
            {"type": "agent_toolset_20260401"},
            {"type": "mcp_toolset", "mcp_server_name": "probe"},
        ],
    }


def _reached(client: anthropic.Anthropic, session_id: str, port: int) -> list[str]:
    """Which of ``NAMES`` bash in the session's sandbox reaches through its proxy."""
    probes = "; ".join(
        f'curl -s -m 10 http://{name}:{port}/ | grep -q reached && echo "got {name}"'
        for name in NAMES
    )
    output = bash_turn(client, session_id, f"{probes}; true")
    return [line.removeprefix("got ") for line in output.split() if line in NAMES]


def test_an_update_reaches_the_awake_sandbox_of_an_earlier_session(
    server: ServerProcess, web: int
) -> None:
    with sdk_of(server) as client:
        environment = client.beta.environments.create(
            name=f"net-{uuid.uuid4().hex[:8]}", config=_limited(NAMES[0])
        )
        earlier = _session(client, environment.id)
        assert _reached(client, earlier, web) == [NAMES[0]]

        client.beta.environments.update(environment.id, config=_limited(NAMES[1]))
        # The earlier session's sandbox is still awake: the update applies to
        # its next call, as to a session created now, not at some later wake.
        assert _reached(client, earlier, web) == [NAMES[1]]
        assert _reached(client, _session(client, environment.id), web) == [NAMES[1]]

        client.beta.environments.update(
            environment.id, config={"type": "cloud", "networking": {"type": "unrestricted"}}
        )
        assert _reached(client, earlier, web) == list(NAMES)


def test_allow_mcp_servers_opens_the_agents_mcp_server_hosts_to_its_sandbox(
    server: ServerProcess, web: int
) -> None:
    """``allow_mcp_servers`` lets the sandbox reach the hosts of the MCP servers
    of the session's agent, beyond ``allowed_hosts``, and follows a session
    update that changes them (before, it opened nothing in the sandbox)."""
    with sdk_of(server) as client:
        opened = {"type": "limited", "allowed_hosts": [], "allow_mcp_servers": True}
        environment = client.beta.environments.create(
            name=f"net-{uuid.uuid4().hex[:8]}", config={"type": "cloud", "networking": opened}
        )
        session = _session(client, environment.id, **_mcp(NAMES[0], web))
        assert _reached(client, session, web) == [NAMES[0]]

        client.beta.sessions.update(session, agent=_mcp(NAMES[1], web))  # type: ignore[arg-type]
        assert _reached(client, session, web) == [NAMES[1]]

        closed = {"type": "limited", "allow_mcp_servers": False}
        client.beta.environments.update(
            environment.id, config={"type": "cloud", "networking": closed}
        )
        assert _reached(client, session, web) == []
        # Not beyond the agent's servers: another session's are its own.
        assert _reached(client, _session(client, environment.id), web) == []
