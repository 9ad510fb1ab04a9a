"""``stead webhooks`` beside a running ``stead serve``: an endpoint registered
with the CLI gets the server's deliveries, signed with the secret the CLI
printed once; the CLI lists, changes, inspects and deletes it."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2
import pytest

from stead.testing import FakeModel, ServeForker, ServerProcess, client_tls
from tests.conftest import loop_env, sdk_of
from tests.webhook_receiver import HOOKS_HOST, PINNED, Receiver


@pytest.fixture(scope="module")
def server(
    tmp_path_factory: pytest.TempPathFactory, fake_model: FakeModel, forker: ServeForker
) -> Iterator[Any]:
    settings = {"STEAD_EGRESS_HOSTS": PINNED, "STEAD_WEBHOOK_POLL_SECONDS": "0.05"}
    process = ServerProcess(
        tmp_path_factory.mktemp("webhooks-cli"), env=loop_env(fake_model, **settings), forker=forker
    ).start()
    yield process
    process.stop()


def stead(forker: ServeForker, *args: str, data_dir: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "STEAD_DATA_DIR": str(data_dir), "STEAD_EGRESS_HOSTS": PINNED}
    env.pop("STEAD_DATABASE_URL", None)
    return forker.complete(("webhooks", *args), env, 60)


def test_an_endpoint_made_with_the_cli_gets_signed_deliveries(
    server: ServerProcess, forker: ServeForker
) -> None:
    data = server.data_dir
    with Receiver() as receiver:
        url = f"http://{HOOKS_HOST}:{receiver.port}/in"
        made = stead(
            forker, "create", "--url", url, "--event-type", "agent.created", "--json", data_dir=data
        )
        assert made.returncode == 0, made.stderr
        endpoint = json.loads(made.stdout)
        assert endpoint["secret"].startswith("whsec_")
        with sdk_of(server) as client:
            agent = client.beta.agents.create(name="a", model="claude-sonnet-4-6")
            [received] = receiver.wait_for(1)
            event = client.beta.webhooks.unwrap(
                received.body, headers=received.headers, key=endpoint["secret"]
            )
        assert (event.data.type, event.data.id) == ("agent.created", agent.id)

    listed = stead(forker, "list", "--json", data_dir=data)
    [shown] = json.loads(listed.stdout)
    assert shown["id"] == endpoint["id"] and "secret" not in shown
    assert endpoint["secret"] not in listed.stdout + server.log_text()

    off = stead(forker, "update", endpoint["id"], "--disable", "--json", data_dir=data)
    assert json.loads(off.stdout)["status"] == "disabled", off.stderr
    tried = json.loads(stead(forker, "deliveries", endpoint["id"], "--json", data_dir=data).stdout)
    assert [d["event_type"] for d in tried] == ["agent.created"]
    gone = stead(forker, "delete", endpoint["id"], data_dir=data)
    assert gone.returncode == 0 and endpoint["id"] in gone.stdout, gone.stderr


def test_the_cli_refuses_what_the_api_refuses(server: ServerProcess, forker: ServeForker) -> None:
    bad = stead(
        forker,
        "create",
        "--url",
        "https://example.com/",
        "--event-type",
        "nope",
        data_dir=server.data_dir,
    )
    assert bad.returncode == 2 and "'nope'" in bad.stderr
    missing = stead(forker, "delete", "whk_nothing", data_dir=server.data_dir)
    assert missing.returncode == 1 and "whk_nothing" in missing.stderr
    nowhere = stead(
        forker,
        "create",
        "--workspace",
        "wrkspc_nothing",
        "--url",
        "https://example.com/",
        "--event-type",
        "session.created",
        data_dir=server.data_dir,
    )
    assert nowhere.returncode == 1 and "wrkspc_nothing" in nowhere.stderr
    assert "Traceback" not in nowhere.stderr
    # Before, nothing at all (exit 0), as for a workspace without endpoints.
    unknown = stead(forker, "list", "--workspace", "wrkspc_nothing", data_dir=server.data_dir)
    assert (unknown.returncode, unknown.stdout) == (1, "")
    assert unknown.stderr == (
        f"stead: --workspace: no workspace with id 'wrkspc_nothing' in {server.data_dir}\n"
    )


def test_rotating_the_secret_key_keeps_every_signing_secret(
    tmp_path: Path, fake_model: FakeModel, forker: ServeForker
) -> None:
    settings = {"STEAD_EGRESS_HOSTS": PINNED, "STEAD_WEBHOOK_POLL_SECONDS": "0.05"}
    fresh = ServerProcess(
        tmp_path / "data", env=loop_env(fake_model, **settings), forker=forker
    ).start()
    with Receiver() as receiver:
        try:
            hook = {
                "url": f"http://{HOOKS_HOST}:{receiver.port}/",
                "event_types": ["agent.created"],
            }
            made = httpx2.post(
                f"{fresh.url}/v1/stead/webhooks",
                json=hook,
                headers={"x-api-key": str(fresh.first_key)},
                timeout=30,
                verify=client_tls(),
            )
            secret = made.json()["secret"]
            fresh.stop()
            rotated = forker.complete(
                ("secrets", "rotate-key"), {**os.environ, "STEAD_DATA_DIR": str(fresh.data_dir)}, 60
            )
            assert "1 webhook secret(s)" in rotated.stdout, rotated.stderr
            fresh.start()
            with sdk_of(fresh) as client:
                client.beta.agents.create(name="after", model="claude-sonnet-4-6")
                [received] = receiver.wait_for(1)
                client.beta.webhooks.unwrap(received.body, headers=received.headers, key=secret)
        finally:
            fresh.stop()
