"""A real sandbox host (bubblewrap, cgroups, the blob store) for the sandbox tests.

Every test gets a fresh sandbox id, so tests sharing the module's host never
see each other's workspace. The host runs as root, as it must: it needs to
create cgroups and start sandboxes under their own uids.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
import threading
import uuid
from collections.abc import AsyncIterator, Iterator
from functools import partial
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import anthropic
import anyio
import pytest

from stead.blobs import BlobConfig
from stead.sandbox import HostAddress, HostClient, HostSandbox, SandboxConfig
from stead.sandbox_host.clock import ManualClock
from stead.sandbox_host.config import HostOptions
from stead.sandbox_host.manager import SandboxManager
from stead.sandbox_host.server import serve_host
from stead.testing import FakeModel, HostProcess, ServeForker, ServerProcess, Text, ToolCall, Turn
from tests.conftest import loop_env, make_client
from tests.integration.helpers import message, wait_idle

WAIT = 30.0
"""Longest a test waits for something the host does in the background."""


def isolation_missing() -> str | None:
    if os.geteuid() != 0:
        return "the sandbox host must run as root"
    if shutil.which("bwrap") is None:
        return "bubblewrap is not installed (./scripts/setup installs it)"
    return None


requires_isolation = pytest.mark.skipif(
    isolation_missing() is not None, reason=str(isolation_missing())
)


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="module")
def host(tmp_path_factory: pytest.TempPathFactory, forker: ServeForker) -> Iterator[HostProcess]:
    root = tmp_path_factory.mktemp("host")
    env = {"STEAD_SANDBOX_IDLE_CHECK_SECONDS": "0.2"}
    process = HostProcess(root / "state", env=env, forker=forker).start()
    yield process
    process.stop()


@pytest.fixture
async def client(host: HostProcess) -> AsyncIterator[HostClient]:
    opened = HostClient(HostAddress(unix_path=host.socket_path))
    yield opened
    await opened.aclose()


def config(**given: Any) -> SandboxConfig:
    defaults: dict[str, Any] = {"memory_bytes": 512 * 1024**2, "pids": 256, "sleep_after": 600}
    return SandboxConfig.from_json(defaults | given)


def new_id() -> str:
    return f"sbx_{uuid.uuid4().hex[:12]}"


@pytest.fixture
async def sandbox(client: HostClient) -> AsyncIterator[HostSandbox]:
    opened = HostSandbox(client, new_id(), config())
    yield opened
    await client.destroy(opened.sandbox_id)


@contextlib.asynccontextmanager
async def host_on_a_manual_clock(
    tmp_path: Path, **options_given: Any
) -> AsyncIterator[tuple[SandboxManager, ManualClock, HostClient, HostOptions]]:
    """A host run in this process on a clock the test moves: idleness is
    measured, never waited for. Its idle sleeper runs when the test says.
    Run under uvloop, as ``stead sandbox-host`` is (anyio's asyncio Unix
    sockets race a cancelled read against readiness: ``stead/sandbox/unix.py``)."""
    clock = ManualClock()
    work_dir = Path(tempfile.mkdtemp(prefix="stead-work-", dir="/tmp"))
    os.chmod(work_dir, 0o711)
    options = HostOptions(
        state_dir=tmp_path / "state",
        work_dir=work_dir,
        blobs=BlobConfig(url=f"file://{tmp_path / 'blobs'}"),
        idle_check_seconds=3600,
        **options_given,
    )
    try:
        async with anyio.create_task_group() as tasks:
            manager = await tasks.start(partial(serve_host, options, clock=clock))
            client = HostClient(HostAddress(unix_path=options.socket_path))
            try:
                yield manager, clock, client, options
            finally:
                await client.aclose()
                tasks.cancel_scope.cancel()
    finally:
        shutil.rmtree(work_dir, ignore_errors=True)


def workspace_on_host(host: HostProcess, sandbox_id: str) -> Path:
    """Where the sandbox's workspace is on its host, while its disk is mounted
    (awake, or asleep before its workspace was saved)."""
    return host.work_dir / "sandboxes" / sandbox_id / "disk" / "workspace"


def files_holding(words: str, since: float) -> str:
    """A shell command that prints, between ``holding:`` and ``:holding``, every
    regular file in the sandbox that holds any of ``words`` (``grep -e`` options
    naming shell variables, so the command's own record never holds a secret).
    /proc and /sys are skipped, and devices (their mount points in /dev look
    like files to ``find``). Under /usr, the host's own read-only tree
    (gigabytes: reading it all took most of a minute), only files whose inode
    changed since ``since`` are read: no other can hold a value made after it."""
    changed = f"-newerct @{int(since) - 1}"
    return (
        r"echo holding:; find / \( -path /proc -o -path /sys \) -prune -o -type f "
        rf'\( ! -path "/usr/*" -o {changed} \) -exec grep -lsF -D skip {words} {{}} + 2>/dev/null; '
        "echo :holding"
    )


def held_in(output: str) -> list[str]:
    """The files a ``files_holding`` command printed (it must have finished)."""
    _, started, rest = output.partition("holding:\n")
    listed, ended, _ = rest.partition(":holding")
    assert started and ended, f"the search did not finish: {output[-2000:]}"
    return listed.split()


def client_of(process: HostProcess) -> HostClient:
    return HostClient(HostAddress(unix_path=process.socket_path))


def tool_session(client: anthropic.Anthropic, name: str = "t") -> str:
    """A new session whose agent has the built-in toolset, in an environment of its own."""
    agent = client.beta.agents.create(
        name=name, model="claude-sonnet-4-6", tools=[{"type": "agent_toolset_20260401"}]
    )
    environment = client.beta.environments.create(name=f"{name}-{uuid.uuid4().hex[:8]}")
    return client.beta.sessions.create(agent=agent.id, environment_id=environment.id).id


def shell(body: dict[str, Any]) -> Turn:
    """Runs a user message that starts with ``$ `` as a bash command, once (and
    one that starts with ``web_search `` as a search)."""
    last = body["messages"][-1]
    answered = isinstance(last["content"], list) and any(
        block.get("type") == "tool_result" for block in last["content"]
    )
    text = "".join(b.get("text", "") for b in last["content"]) if not answered else ""
    if text.startswith("$ "):
        return Turn([ToolCall("bash", {"command": text[2:]})])
    if text.startswith("web_search "):
        return Turn([ToolCall("web_search", {"query": text.removeprefix("web_search ")})])
    return Turn([Text("ok")])


def calling(body: dict[str, Any]) -> Turn:
    """``shell``, and a user message ``call <name> <json input>`` as that one call."""
    last = body["messages"][-1]
    text = "".join(b.get("text", "") for b in last["content"] if b.get("type") == "text")
    if last["role"] == "user" and "tool_result" not in str(last) and text.startswith("call "):
        name, tool_input = text.removeprefix("call ").split(" ", 1)
        return Turn([ToolCall(name, json.loads(tool_input))])
    return shell(body)


def turn_events(client: anthropic.Anthropic, session_id: str, text: str) -> list[Any]:
    """Sends the user message ``text``; the events it added, once the session is idle."""
    before = len(list(client.beta.sessions.events.list(session_id, limit=1000)))
    client.beta.sessions.events.send(session_id, events=[message(text)])
    wait_idle(client, session_id, timeout=WAIT)
    return list(client.beta.sessions.events.list(session_id, limit=1000))[before:]


@contextlib.contextmanager
def sweepless_server(
    host: HostProcess, fake: FakeModel, data: Path, forker: ServeForker
) -> Iterator[ServerProcess]:
    """A real ``stead serve`` on the module's host whose lease sweeper runs only
    when a release pokes it."""
    env = loop_env(fake, STEAD_SANDBOX_SWEEP_INTERVAL_SECONDS="3600", **host.settings_env)
    started = ServerProcess(data, env=env, forker=forker).start()
    try:
        yield started
    finally:
        started.stop()


def bash_turn(client: anthropic.Anthropic, session_id: str, command: str) -> str:
    """Runs ``command`` as the session's one bash call (the ``shell`` model) and
    returns the tool result's text once the session is idle."""
    client.beta.sessions.events.send(session_id, events=[message(f"$ {command}")])
    wait_idle(client, session_id, timeout=60)
    results = [
        e for e in client.beta.sessions.events.list(session_id) if e.type == "agent.tool_result"
    ]
    return results[-1].content[0].text  # type: ignore[union-attr,no-any-return]


def quiet(body: dict[str, Any]) -> Turn:
    return Turn([Text("ok")])


@pytest.fixture(scope="module")
def gateway(
    host: HostProcess, tmp_path_factory: pytest.TempPathFactory, forker: ServeForker
) -> Iterator[ServerProcess]:
    """A real ``stead serve`` using the module's sandbox host, with short keepalives."""
    with FakeModel(quiet) as fake:
        env = loop_env(
            fake,
            STEAD_KEEPALIVE_SECONDS="0.3",
            STEAD_SANDBOX_SLEEP_AFTER_SECONDS="0.5",
            **host.settings_env,
        )
        server = ServerProcess(
            tmp_path_factory.mktemp("gateway") / "data", env=env, forker=forker
        ).start()
        yield server
        server.stop()


def plain_session(server: ServerProcess) -> str:
    """A new session on ``server``, of an agent without tools, in an environment
    of its own (its sandbox is made on first use)."""
    assert server.first_key
    with make_client(server.url, server.first_key) as client:
        agent = client.beta.agents.create(name="t", model="claude-sonnet-4-6")
        environment = client.beta.environments.create(name=f"t-{uuid.uuid4().hex[:8]}")
        return client.beta.sessions.create(agent=agent.id, environment_id=environment.id).id


@pytest.fixture
def session_id(gateway: ServerProcess) -> str:
    """A new session on the gateway."""
    return plain_session(gateway)


def serve_with_failpoints(
    data: Path, fake: FakeModel, host: HostProcess, forker: ServeForker, failpoints: str | None
) -> ServerProcess:
    """A server on ``host`` whose turns ``fake`` answers, stopping at ``failpoints``
    (``STEAD_FAILPOINTS``), with short run leases so a killed turn is retried soon."""
    extra = {"STEAD_FAILPOINTS": failpoints} if failpoints else {}
    env = loop_env(fake, STEAD_LEASE_SECONDS="6", **host.settings_env, **extra)
    return ServerProcess(data, env=env, forker=forker).start()


@pytest.fixture(scope="module")
def web() -> Iterator[int]:
    """The port of an HTTP server on the host's loopback that answers ``reached``."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.end_headers()
            self.wfile.write(b"reached")

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server.server_address[1]
    server.shutdown()
    server.server_close()
