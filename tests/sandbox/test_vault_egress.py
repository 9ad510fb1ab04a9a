"""A session's vault credentials reach the hosts its sandbox calls, never the
sandbox (DESIGN rule 8), through the official SDK against a real ``stead
serve``, a real sandbox host and an HTTPS origin on loopback: the origin sees
the secret, the sandbox and the event log see a placeholder, and archiving the
credential stops the injection in the running session."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import anthropic
import pytest
import trustme
from sqlalchemy import text

from stead.testing import FakeModel, HostProcess, ServeForker, ServerProcess
from tests.conftest import loop_env, make_client, sdk_of
from tests.databases import PostgresRun
from tests.databases import engine as engine_of
from tests.integration.brains import Brains
from tests.integration.helpers import message, wait_idle
from tests.sandbox.conftest import WAIT, requires_isolation, shell
from tests.sandbox.https_origins import Origin, https_origin

pytestmark = requires_isolation

API = "api.vault.test"
OTHER = "other.vault.test"
SECRET = f"sk-vault-egress-{uuid.uuid4().hex}"


@pytest.fixture(scope="module")
def origin(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Origin, Path]]:
    ca = trustme.CA()
    bundle = tmp_path_factory.mktemp("vault-ca") / "ca.pem"
    ca.cert_pem.write_to_path(str(bundle))
    with https_origin(ca, (API, OTHER)) as served:
        yield served, bundle


@pytest.fixture(scope="module")
def host(
    origin: tuple[Origin, Path], tmp_path_factory: pytest.TempPathFactory, forker: ServeForker
) -> Iterator[HostProcess]:
    _, bundle = origin
    host_env = {
        "STEAD_EGRESS_HOSTS": json.dumps({API: "127.0.0.1", OTHER: "127.0.0.1"}),
        "STEAD_EGRESS_EXTRA_CA_FILE": str(bundle),
    }
    started = HostProcess(
        tmp_path_factory.mktemp("vault-host") / "state", env=host_env, forker=forker
    ).start()
    yield started
    started.stop()


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeModel]:
    with FakeModel(shell) as model:
        yield model


@pytest.fixture(scope="module")
def server(
    host: HostProcess,
    fake: FakeModel,
    tmp_path_factory: pytest.TempPathFactory,
    forker: ServeForker,
) -> Iterator[ServerProcess]:
    env = loop_env(fake, **host.settings_env)
    started = ServerProcess(
        tmp_path_factory.mktemp("vault-egress") / "data", env=env, forker=forker
    ).start()
    yield started
    started.stop()


def _vault_session(client: anthropic.Anthropic) -> tuple[str, str, str]:
    """(vault id, credential id, session id): a session whose vault holds
    ``VAULT_TOKEN`` for ``API``, in an environment that may reach both hosts."""
    vault = client.beta.vaults.create(display_name="egress")
    credential = client.beta.vaults.credentials.create(
        vault.id,
        auth={
            "type": "environment_variable",
            "secret_name": "VAULT_TOKEN",
            "secret_value": SECRET,
            "networking": {"type": "limited", "allowed_hosts": [API]},
        },
    )
    agent = client.beta.agents.create(
        name="vault", model="claude-sonnet-4-6", tools=[{"type": "agent_toolset_20260401"}]
    )
    environment = client.beta.environments.create(
        name=f"vault-{uuid.uuid4().hex[:8]}",
        config={
            "type": "cloud",
            "networking": {"type": "limited", "allowed_hosts": [API, OTHER]},
        },
    )
    session = client.beta.sessions.create(
        agent=agent.id, environment_id=environment.id, vault_ids=[vault.id]
    )
    return vault.id, credential.id, session.id


def _run(client: anthropic.Anthropic, session_id: str, command: str) -> str:
    client.beta.sessions.events.send(session_id, events=[message(f"$ {command}")])
    wait_idle(client, session_id, WAIT)
    results = [
        e
        for e in client.beta.sessions.events.list(session_id, limit=1000)
        if e.type == "agent.tool_result"
    ]
    return "".join(block.text for block in results[-1].content or [] if block.type == "text")


def test_the_origin_gets_the_secret_and_the_sandbox_a_placeholder(
    server: ServerProcess, origin: tuple[Origin, Path]
) -> None:
    served, _ = origin
    with sdk_of(server) as client:
        vault_id, credential_id, session_id = _vault_session(client)
        call = (
            'curl -sS -o /dev/null -w "%{{http_code}}" -H "Authorization: Bearer $VAULT_TOKEN" '
            f"https://{{host}}:{served.port}/{{path}}; echo; "
            'echo "sees=$VAULT_TOKEN"; cat /proc/self/environ | tr "\\0" "\\n" | grep VAULT'
        )
        output = _run(client, session_id, call.format(host=API, path="with-secret"))
        assert output.startswith("200"), output
        assert "sees=" in output and SECRET not in output
        reached = [s for s in served.seen if s["path"] == "/with-secret"]
        assert reached and reached[-1]["authorization"] == f"Bearer {SECRET}"

        elsewhere = _run(client, session_id, call.format(host=OTHER, path="elsewhere"))
        assert SECRET not in elsewhere
        assert all(
            SECRET not in s["authorization"] for s in served.seen if s["host"].startswith(OTHER)
        )

        client.beta.vaults.credentials.archive(credential_id, vault_id=vault_id)
        after = _run(client, session_id, call.format(host=API, path="after-archive"))
        assert SECRET not in after
        late = [s for s in served.seen if s["path"] == "/after-archive"]
        assert all(SECRET not in s["authorization"] for s in late)

        log = client.beta.sessions.events.with_raw_response.list(session_id, limit=1000).text()
        assert SECRET not in log

        audit = client.get(
            f"/v1/sessions/{session_id}/sandbox/egress",
            cast_to=object,
            options={"params": {"limit": 1000}},
        )
        assert isinstance(audit, dict) and audit["type"] == "sandbox_egress_log"
        assert SECRET not in json.dumps(audit)
        to_api = [e for e in audit["data"] if e["host"] == API and e["status"] == 200]
        assert credential_id in to_api[0]["credential_ids"]
        assert to_api[-1]["credential_ids"] == []  # after the archive: nothing injected
        assert audit["last_seq"] == audit["data"][-1]["seq"]
        later = client.get(
            f"/v1/sessions/{session_id}/sandbox/egress",
            cast_to=object,
            options={"params": {"after": audit["last_seq"]}},
        )
        assert isinstance(later, dict) and later["data"] == []
    assert SECRET not in server.log_text()


def test_a_restarted_brain_gives_the_placeholders_running_processes_hold(
    host: HostProcess,
    fake: FakeModel,
    origin: tuple[Origin, Path],
    tmp_path: Path,
    forker: ServeForker,
) -> None:
    """The sandbox's shell outlives ``stead serve``: the placeholder it read
    before the restart must still be replaced after it."""
    served, _ = origin
    env = loop_env(fake, **host.settings_env)
    first = ServerProcess(tmp_path / "data", env=env, forker=forker).start()
    key = first.first_key
    try:
        with sdk_of(first) as client:
            _, _, session_id = _vault_session(client)
            _run(client, session_id, 'export KEPT="$VAULT_TOKEN"; echo kept')
    finally:
        first.stop()
    second = ServerProcess(tmp_path / "data", env=env, forker=forker)
    second.first_key = key
    second.start()
    try:
        with sdk_of(second) as client:
            call = (
                'curl -sS -o /dev/null -w "%{http_code}" -H "Authorization: Bearer $KEPT" '
                f"https://{API}:{served.port}/after-restart"
            )
            assert _run(client, session_id, call).startswith("200")
    finally:
        second.stop()
    reached = [s for s in served.seen if s["path"] == "/after-restart"]
    assert reached and reached[-1]["authorization"] == f"Bearer {SECRET}"


def test_a_credential_for_hosts_the_environment_forbids_is_reported(
    server: ServerProcess,
) -> None:
    with sdk_of(server) as client:
        vault = client.beta.vaults.create(display_name="unreachable")
        credential = client.beta.vaults.credentials.create(
            vault.id,
            auth={
                "type": "environment_variable",
                "secret_name": "FAR_TOKEN",
                "secret_value": SECRET,
                "networking": {"type": "limited", "allowed_hosts": [API, "*.far.test"]},
            },
        )
        agent = client.beta.agents.create(
            name="far", model="claude-sonnet-4-6", tools=[{"type": "agent_toolset_20260401"}]
        )
        environment = client.beta.environments.create(
            name=f"far-{uuid.uuid4().hex[:8]}",
            config={"type": "cloud", "networking": {"type": "limited", "allowed_hosts": [API]}},
        )
        session = client.beta.sessions.create(
            agent=agent.id, environment_id=environment.id, vault_ids=[vault.id]
        )
        assert "ran" in _run(client, session.id, "echo ran")
        errors = [
            e for e in client.beta.sessions.events.list(session.id) if e.type == "session.error"
        ]
    assert len(errors) == 1
    error = errors[0].error
    assert error.type == "credential_host_unreachable_error"
    assert (error.vault_id, error.credential_id) == (vault.id, credential.id)  # type: ignore[union-attr]
    assert "*.far.test" in error.message and API not in error.message


def _listeners(url: str) -> int:
    """The database's connections that listen for notices between processes."""
    found = engine_of(url)
    try:
        with found.begin() as conn:
            return len(conn.execute(text(_LISTENERS.format(what="pid"))).all())
    finally:
        found.dispose()


_LISTENERS = (
    "SELECT {what} FROM pg_stat_activity WHERE application_name = 'stead-bus'"
    " AND datname = current_database() AND query NOT LIKE '%pg_notify%'"
)


@pytest.mark.postgres
def test_a_credential_archived_while_the_turn_s_process_was_not_listening_stops_being_injected(
    host: HostProcess,
    fake: FakeModel,
    origin: tuple[Origin, Path],
    postgres_run: PostgresRun,
    tmp_path: Path,
    forker: ServeForker,
) -> None:
    """Two processes: one serves the session's sandbox, the credential is
    archived through the other while the first's listening connection is away.
    Before, the archive's notice was lost and the first process injected the
    revoked secret for as long as it served the sandbox."""
    served, _ = origin
    brains = Brains(postgres_run, tmp_path / "brains", fake, forker)
    try:
        runner, other = brains.start(**host.settings_env), brains.start(**host.settings_env)
        with (
            make_client(runner.url, brains.key) as on_runner,
            make_client(other.url, brains.key) as on_other,
        ):
            vault_id, credential_id, session_id = _vault_session(on_runner)
            call = (
                'curl -sS -o /dev/null -w "%{{http_code}}" -H "Authorization: Bearer '
                f'$VAULT_TOKEN" https://{API}:{served.port}/{{path}}'
            )
            assert _run(on_runner, session_id, call.format(path="elsewhere-before")) == "200"
            listening = _listeners(brains.url)
            found = engine_of(brains.url)
            try:
                with found.begin() as conn:
                    conn.execute(text(_LISTENERS.format(what="pg_terminate_backend(pid)")))
            finally:
                found.dispose()
            on_other.beta.vaults.credentials.archive(credential_id, vault_id=vault_id)
            deadline = time.monotonic() + WAIT
            while _listeners(brains.url) < listening:  # listening again
                assert time.monotonic() < deadline, "the processes did not listen again"
                time.sleep(0.05)
            _run(on_runner, session_id, call.format(path="elsewhere-after"))
    finally:
        brains.close()
    before = [s for s in served.seen if s["path"] == "/elsewhere-before"]
    assert before and before[-1]["authorization"] == f"Bearer {SECRET}"
    after = [s for s in served.seen if s["path"] == "/elsewhere-after"]
    assert after and all(SECRET not in s["authorization"] for s in after)
