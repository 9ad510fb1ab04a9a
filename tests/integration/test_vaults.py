"""Vaults and credentials through the official SDK: every endpoint, each auth
shape, the update rules, paging, workspaces, and secrets that never come back."""

from __future__ import annotations

import sqlite3
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import anthropic
import httpx2
import pytest

from stead.testing import ServerProcess, client_tls
from tests.conftest import make_client

SECRET = f"sk-live-{uuid.uuid4().hex}"
"""Unique per run, so finding it anywhere is a leak, not a coincidence."""


def _bearer(url: str = "https://mcp.example.com/mcp") -> dict[str, Any]:
    return {"type": "static_bearer", "mcp_server_url": url, "token": SECRET}


def _env_var(name: str = "EXAMPLE_API_KEY", **extra: Any) -> dict[str, Any]:
    return {
        "type": "environment_variable",
        "secret_name": name,
        "secret_value": SECRET,
        "networking": {"type": "limited", "allowed_hosts": ["api.example.com", "*.example.org"]},
        **extra,
    }


def _oauth(**extra: Any) -> dict[str, Any]:
    return {
        "type": "mcp_oauth",
        "mcp_server_url": "https://oauth.example.com/mcp",
        "access_token": SECRET,
        "expires_at": (datetime.now(UTC) + timedelta(hours=1)).isoformat(),
        "refresh": {
            "client_id": "client-1",
            "refresh_token": SECRET + "-refresh",
            "token_endpoint": "https://oauth.example.com/token",
            "token_endpoint_auth": {"type": "client_secret_post", "client_secret": SECRET + "-cs"},
            "scope": "tools",
        },
        **extra,
    }


def test_vault_lifecycle(client: anthropic.Anthropic) -> None:
    vault = client.beta.vaults.create(display_name="ops", metadata={"team": "infra"})
    assert vault.id.startswith("vlt_") and vault.type == "vault"
    assert vault.archived_at is None
    renamed = client.beta.vaults.update(vault.id, display_name="ops-2", metadata={"tier": "1"})
    assert (renamed.display_name, renamed.metadata) == ("ops-2", {"team": "infra", "tier": "1"})
    assert client.beta.vaults.retrieve(vault.id).model_dump() == renamed.model_dump()
    # Only null deletes a key; "" is a value (environments alone take "" for null).
    patched = client.beta.vaults.update(vault.id, metadata={"team": None, "tier": ""})
    assert patched.metadata == {"tier": ""}
    archived = client.beta.vaults.archive(vault.id)
    assert archived.archived_at is not None
    with pytest.raises(anthropic.BadRequestError, match="archived"):
        client.beta.vaults.update(vault.id, display_name="again")
    with pytest.raises(anthropic.BadRequestError, match="archived"):
        client.beta.vaults.credentials.create(vault.id, auth=_bearer())  # type: ignore[arg-type]
    listed = {v.id for v in client.beta.vaults.list(limit=100)}
    assert vault.id not in listed
    assert vault.id in {v.id for v in client.beta.vaults.list(limit=100, include_archived=True)}
    deleted = client.beta.vaults.delete(vault.id)
    assert (deleted.id, deleted.type) == (vault.id, "vault_deleted")
    with pytest.raises(anthropic.NotFoundError):
        client.beta.vaults.retrieve(vault.id)


def test_each_auth_shape_is_stored_and_never_returned(client: anthropic.Anthropic) -> None:
    vault = client.beta.vaults.create(display_name="shapes")
    creds = client.beta.vaults.credentials
    bearer = creds.create(vault.id, auth=_bearer(), display_name="docs")  # type: ignore[arg-type]
    env = creds.create(vault.id, auth=_env_var())  # type: ignore[arg-type]
    oauth = creds.create(vault.id, auth=_oauth())  # type: ignore[arg-type]
    assert bearer.id.startswith("vcrd_") and bearer.vault_id == vault.id
    assert bearer.auth.type == "static_bearer"
    assert env.auth.type == "environment_variable"
    assert env.auth.secret_name == "EXAMPLE_API_KEY"
    assert env.auth.injection_location.header is True
    assert env.auth.injection_location.body is False
    assert env.auth.networking.type == "limited"
    assert oauth.auth.type == "mcp_oauth" and oauth.auth.refresh is not None
    assert oauth.auth.refresh.token_endpoint_auth.type == "client_secret_post"
    assert oauth.auth.refresh.scope == "tools"
    for made in (bearer, env, oauth):
        again = creds.retrieve(made.id, vault_id=vault.id)
        assert again.model_dump() == made.model_dump()
        raw = creds.with_raw_response.retrieve(made.id, vault_id=vault.id).text()
        assert SECRET not in raw
    page = creds.list(vault.id, limit=2)
    assert len(page.data) == 2 and page.has_next_page()
    every = [c.id for c in creds.list(vault.id, limit=100)]
    assert every == [oauth.id, env.id, bearer.id]
    assert SECRET not in creds.with_raw_response.list(vault.id).text()


def test_updates_keep_type_and_immutable_fields(client: anthropic.Anthropic) -> None:
    vault = client.beta.vaults.create(display_name="updates")
    creds = client.beta.vaults.credentials
    env = creds.create(vault.id, auth=_env_var("TOKEN_A"))  # type: ignore[arg-type]
    with pytest.raises(anthropic.BadRequestError, match=r"auth\.type"):
        creds.update(env.id, vault_id=vault.id, auth={"type": "static_bearer", "token": "x"})
    with pytest.raises(anthropic.BadRequestError, match="secret_name"):
        creds.update(
            env.id,
            vault_id=vault.id,
            auth={"type": "environment_variable", "secret_name": "OTHER"},  # type: ignore[typeddict-unknown-key]
        )
    changed = creds.update(
        env.id,
        vault_id=vault.id,
        auth={
            "type": "environment_variable",
            "secret_value": SECRET + "-new",
            "injection_location": {"body": True},
            "networking": {"type": "unrestricted"},
        },
        metadata={"rotated": "yes"},
    )
    assert changed.auth.injection_location.header is True
    assert changed.auth.injection_location.body is True
    assert changed.auth.networking.type == "unrestricted"
    assert changed.metadata == {"rotated": "yes"}
    with pytest.raises(anthropic.BadRequestError, match="at least one"):
        creds.update(
            env.id,
            vault_id=vault.id,
            auth={
                "type": "environment_variable",
                "injection_location": {"header": False, "body": False},
            },
        )
    bearer = creds.create(vault.id, auth=_bearer())  # type: ignore[arg-type]
    with pytest.raises(anthropic.BadRequestError, match=r"auth\.token: .*ASCII"):
        creds.update(
            bearer.id, vault_id=vault.id, auth={"type": "static_bearer", "token": "\u00e9"}
        )
    with pytest.raises(anthropic.BadRequestError, match="mcp_server_url"):
        creds.update(
            bearer.id,
            vault_id=vault.id,
            auth={"type": "static_bearer", "mcp_server_url": "https://elsewhere.example"},  # type: ignore[typeddict-unknown-key]
        )
    oauth = creds.create(vault.id, auth=_oauth())  # type: ignore[arg-type]
    cleared = creds.update(
        oauth.id,
        vault_id=vault.id,
        auth={"type": "mcp_oauth", "refresh": {"scope": ""}, "expires_at": None},
    )
    assert cleared.auth.refresh is not None and cleared.auth.refresh.scope is None
    assert cleared.auth.expires_at is None
    dropped = creds.update(oauth.id, vault_id=vault.id, auth={"type": "mcp_oauth", "refresh": None})
    assert dropped.auth.refresh is None


def test_one_live_credential_per_server_and_name(client: anthropic.Anthropic) -> None:
    vault = client.beta.vaults.create(display_name="unique")
    creds = client.beta.vaults.credentials
    first = creds.create(vault.id, auth=_bearer())  # type: ignore[arg-type]
    with pytest.raises(anthropic.ConflictError, match="mcp_server_url"):
        creds.create(vault.id, auth=_bearer())  # type: ignore[arg-type]
    creds.create(vault.id, auth=_env_var("SAME"))  # type: ignore[arg-type]
    with pytest.raises(anthropic.ConflictError, match="secret_name"):
        creds.create(vault.id, auth=_env_var("SAME"))  # type: ignore[arg-type]
    archived = creds.archive(first.id, vault_id=vault.id)
    assert archived.archived_at is not None
    with pytest.raises(anthropic.BadRequestError, match="archived"):
        creds.update(first.id, vault_id=vault.id, display_name="x")
    creds.create(vault.id, auth=_bearer())  # type: ignore[arg-type]
    listed = {c.id for c in creds.list(vault.id)}
    assert first.id not in listed
    assert first.id in {c.id for c in creds.list(vault.id, include_archived=True)}
    gone = creds.delete(first.id, vault_id=vault.id)
    assert (gone.id, gone.type) == (first.id, "vault_credential_deleted")
    with pytest.raises(anthropic.NotFoundError):
        creds.retrieve(first.id, vault_id=vault.id)


BAD_CREDENTIALS: list[tuple[dict[str, Any], str]] = [
    ({}, "auth"),
    ({"auth": {"type": "static_bearer", "mcp_server_url": "https://x.example"}}, "auth.token"),
    ({"auth": {**_bearer(), "token": ""}}, "auth.token"),
    ({"auth": {**_bearer(), "token": "t" * 70000}}, "auth.token"),
    # Sent in an Authorization header: a token no header can carry was a 500 at each use.
    ({"auth": {**_bearer(), "token": "\u00e9" + SECRET}}, "auth.token"),
    ({"auth": {**_bearer(), "token": SECRET + "\r\nX-Other: 1"}}, "auth.token"),
    ({"auth": _oauth(access_token=SECRET + "\u2603")}, "auth.access_token"),
    ({"auth": _bearer("ftp://x.example")}, "auth.mcp_server_url"),
    ({"auth": _bearer("https://user:pw@x.example")}, "auth.mcp_server_url"),
    ({"auth": {**_bearer(), "type": "password"}}, "auth"),
    ({"auth": _env_var("1BAD")}, "auth.secret_name"),
    ({"auth": _env_var("PATH")}, "auth.secret_name"),
    (
        {"auth": {**_env_var(), "networking": {"type": "limited", "allowed_hosts": ["h"] * 17}}},
        "auth.networking.allowed_hosts",
    ),
    (
        {
            "auth": {
                **_env_var(),
                "networking": {"type": "limited", "allowed_hosts": ["https://a.example/x"]},
            }
        },
        "auth.networking.allowed_hosts.0",
    ),
    (
        {"auth": {**_env_var(), "networking": {"type": "limited", "allowed_hosts": ["::1"]}}},
        "auth.networking.allowed_hosts.0",
    ),
    (  # a 64-character label, which the egress proxy refuses
        {
            "auth": {
                **_env_var(),
                "networking": {"type": "limited", "allowed_hosts": ["a" * 64 + ".example"]},
            }
        },
        "auth.networking.allowed_hosts.0",
    ),
    ({"auth": _oauth(expires_at="2001-01-01T00:00:00Z")}, "auth.expires_at"),
    ({"auth": _oauth(expires_at="9999-12-31T23:59:59-05:00")}, "auth.expires_at"),
    ({"auth": _bearer(), "display_name": "n" * 256}, "display_name"),
    ({"auth": _bearer(), "metadata": {f"k{i}": "v" for i in range(17)}}, "metadata"),
    ({"auth": _bearer(), "secret": SECRET}, "secret"),
]


@pytest.mark.parametrize(("body", "field"), BAD_CREDENTIALS)
def test_bad_credentials_name_the_field_and_store_nothing(
    server: ServerProcess,
    api_key: str,
    client: anthropic.Anthropic,
    body: dict[str, Any],
    field: str,
) -> None:
    vault = client.beta.vaults.create(display_name="bad")
    response = httpx2.post(
        f"{server.url}/v1/vaults/{vault.id}/credentials",
        json=body,
        headers={"x-api-key": api_key},
        timeout=30,
        verify=client_tls(),
    )
    assert response.status_code == 400, response.text
    message = response.json()["error"]["message"]
    assert message.startswith(field), message
    assert SECRET not in response.text
    assert list(client.beta.vaults.credentials.list(vault.id, include_archived=True)) == []


def test_other_workspaces_see_404(server: ServerProcess, api_key: str) -> None:
    other_key = server.create_key(new_workspace=f"other-{uuid.uuid4().hex[:6]}")
    with make_client(server.url, api_key) as mine, make_client(server.url, other_key) as theirs:
        vault = mine.beta.vaults.create(display_name="mine")
        cred = mine.beta.vaults.credentials.create(vault.id, auth=_bearer())  # type: ignore[arg-type]
        calls = [
            lambda: theirs.beta.vaults.retrieve(vault.id),
            lambda: theirs.beta.vaults.update(vault.id, display_name="x"),
            lambda: theirs.beta.vaults.archive(vault.id),
            lambda: theirs.beta.vaults.delete(vault.id),
            lambda: theirs.beta.vaults.credentials.list(vault.id),
            lambda: theirs.beta.vaults.credentials.create(vault.id, auth=_bearer()),  # type: ignore[arg-type]
            lambda: theirs.beta.vaults.credentials.retrieve(cred.id, vault_id=vault.id),
            lambda: theirs.beta.vaults.credentials.archive(cred.id, vault_id=vault.id),
            lambda: theirs.beta.vaults.credentials.delete(cred.id, vault_id=vault.id),
        ]
        for call in calls:
            with pytest.raises(anthropic.NotFoundError):
                call()
        assert vault.id not in {v.id for v in theirs.beta.vaults.list(include_archived=True)}
        agent = theirs.beta.agents.create(name="a", model="claude-sonnet-4-6")
        env = theirs.beta.environments.create(name=f"v-{uuid.uuid4().hex[:8]}")
        with pytest.raises(anthropic.NotFoundError, match=r"vault_ids\.0"):
            theirs.beta.sessions.create(agent=agent.id, environment_id=env.id, vault_ids=[vault.id])
        assert mine.beta.vaults.credentials.retrieve(cred.id, vault_id=vault.id).id == cred.id


def test_sessions_take_live_vaults_only(client: anthropic.Anthropic) -> None:
    agent = client.beta.agents.create(name="a", model="claude-sonnet-4-6")
    env = client.beta.environments.create(name=f"v-{uuid.uuid4().hex[:8]}")
    live = client.beta.vaults.create(display_name="live")
    session = client.beta.sessions.create(
        agent=agent.id, environment_id=env.id, vault_ids=[live.id]
    )
    assert session.vault_ids == [live.id]
    with pytest.raises(anthropic.BadRequestError, match=r"vault_ids\.1: .* twice"):
        client.beta.sessions.create(
            agent=agent.id, environment_id=env.id, vault_ids=[live.id, live.id]
        )
    with pytest.raises(anthropic.NotFoundError, match=r"vault_ids\.1"):
        client.beta.sessions.create(
            agent=agent.id, environment_id=env.id, vault_ids=[live.id, "vlt_missing"]
        )
    client.beta.vaults.archive(live.id)
    with pytest.raises(anthropic.BadRequestError, match=r"vault_ids\.0"):
        client.beta.sessions.create(agent=agent.id, environment_id=env.id, vault_ids=[live.id])


def test_secrets_are_sealed_at_rest(server: ServerProcess, client: anthropic.Anthropic) -> None:
    vault = client.beta.vaults.create(display_name="at rest")
    client.beta.vaults.credentials.create(vault.id, auth=_env_var("AT_REST"))  # type: ignore[arg-type]
    client.beta.vaults.credentials.create(vault.id, auth=_oauth())  # type: ignore[arg-type]
    key_file = server.data_dir / "secret.key"
    assert key_file.stat().st_mode & 0o777 == 0o600
    with sqlite3.connect(server.data_dir / "stead.db") as db:
        db.execute("PRAGMA wal_checkpoint(FULL)")
    for path in server.data_dir.rglob("*"):
        if path.is_file() and path != key_file:
            assert SECRET.encode() not in path.read_bytes(), path
