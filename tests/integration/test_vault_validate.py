"""``credentials.mcp_oauth_validate`` against a real MCP server on loopback (the
``mcp`` SDK's) with a bearer token and an OAuth token endpoint beside it."""

from __future__ import annotations

import base64
from collections.abc import Iterator
from typing import Any

import anthropic
import pytest

from stead.testing.mcp_server import FakeMcpServer, OAuthClient

CLIENT_SECRET = "cs-validate-9f1e"


@pytest.fixture(scope="module")
def mcp() -> Iterator[FakeMcpServer]:
    server = FakeMcpServer(
        OAuthClient(client_secret=CLIENT_SECRET, method="client_secret_basic")
    ).start()
    yield server
    server.stop()


def _oauth(mcp: FakeMcpServer, access: str, refresh: str | None) -> dict[str, Any]:
    auth: dict[str, Any] = {"type": "mcp_oauth", "mcp_server_url": mcp.url, "access_token": access}
    if refresh is not None:
        auth["refresh"] = {
            "client_id": mcp.client.client_id,
            "refresh_token": refresh,
            "token_endpoint": mcp.token_url,
            "token_endpoint_auth": {"type": "client_secret_basic", "client_secret": CLIENT_SECRET},
        }
    return auth


def _credential(client: anthropic.Anthropic, auth: dict[str, Any]) -> tuple[str, str]:
    vault = client.beta.vaults.create(display_name="validate")
    made = client.beta.vaults.credentials.create(vault.id, auth=auth)  # type: ignore[arg-type]
    return vault.id, made.id


def test_a_working_token_is_valid(client: anthropic.Anthropic, mcp: FakeMcpServer) -> None:
    token = mcp.issue_token()
    vault_id, cred_id = _credential(client, _oauth(mcp, token, None))
    result = client.beta.vaults.credentials.mcp_oauth_validate(cred_id, vault_id=vault_id)
    assert (result.status, result.mcp_probe, result.refresh) == ("valid", None, None)
    assert result.has_refresh_token is False and result.credential_id == cred_id
    assert token in mcp.seen_tokens
    bearer = {"type": "static_bearer", "mcp_server_url": mcp.url, "token": token}
    vault_id, cred_id = _credential(client, bearer)
    again = client.beta.vaults.credentials.mcp_oauth_validate(cred_id, vault_id=vault_id)
    assert again.status == "valid"


def test_a_rejected_token_without_refresh_is_invalid(
    client: anthropic.Anthropic, mcp: FakeMcpServer
) -> None:
    vault_id, cred_id = _credential(client, _oauth(mcp, "not-a-token-we-issued", None))
    result = client.beta.vaults.credentials.mcp_oauth_validate(cred_id, vault_id=vault_id)
    assert result.status == "invalid"
    assert result.refresh is not None and result.refresh.status == "no_refresh_token"
    assert result.mcp_probe is not None and result.mcp_probe.method == "initialize"
    assert result.mcp_probe.http_response is not None
    assert result.mcp_probe.http_response.status_code == 401
    assert "invalid_token" in result.mcp_probe.http_response.body


def test_an_expired_token_is_refreshed_and_written_back(
    client: anthropic.Anthropic, mcp: FakeMcpServer
) -> None:
    expired = mcp.issue_token()
    mcp.revoke(expired)
    refresh = mcp.issue_refresh_token()
    vault_id, cred_id = _credential(client, _oauth(mcp, expired, refresh))
    before = mcp.refreshes
    result = client.beta.vaults.credentials.mcp_oauth_validate(cred_id, vault_id=vault_id)
    assert result.status == "valid" and result.has_refresh_token
    assert result.refresh is not None and result.refresh.status == "succeeded"
    assert mcp.refreshes == before + 1
    stored = client.beta.vaults.credentials.retrieve(cred_id, vault_id=vault_id)
    assert stored.auth.type == "mcp_oauth" and stored.auth.expires_at is not None
    raw = client.beta.vaults.credentials.with_raw_response.retrieve(cred_id, vault_id=vault_id)
    assert "mcp-at-" not in raw.text() and "mcp-rt-" not in raw.text()
    # The written-back token works: no second refresh is needed.
    again = client.beta.vaults.credentials.mcp_oauth_validate(cred_id, vault_id=vault_id)
    assert (again.status, again.refresh) == ("valid", None)
    assert mcp.refreshes == before + 1


def test_a_refused_refresh_is_invalid_and_an_unreachable_server_unknown(
    client: anthropic.Anthropic, mcp: FakeMcpServer
) -> None:
    vault_id, cred_id = _credential(client, _oauth(mcp, "stale", "a-refresh-token-never-issued"))
    result = client.beta.vaults.credentials.mcp_oauth_validate(cred_id, vault_id=vault_id)
    assert result.status == "invalid"
    assert result.refresh is not None and result.refresh.status == "failed"
    assert result.refresh.http_response is not None
    assert result.refresh.http_response.status_code == 400
    shown = result.model_dump_json()
    assert "invalid_grant" in shown and "[redacted]" in shown  # the server echoed them
    pair = base64.b64encode(f"{mcp.client.client_id}:{CLIENT_SECRET}".encode()).decode()
    for secret in ("a-refresh-token-never-issued", CLIENT_SECRET, pair):
        assert secret not in shown
    nowhere = {"type": "static_bearer", "mcp_server_url": "http://127.0.0.1:9/mcp", "token": "t"}
    vault_id, cred_id = _credential(client, nowhere)
    unreachable = client.beta.vaults.credentials.mcp_oauth_validate(cred_id, vault_id=vault_id)
    assert unreachable.status == "unknown"
    assert unreachable.mcp_probe is not None and unreachable.mcp_probe.http_response is None


def test_an_environment_variable_credential_cannot_be_validated(
    client: anthropic.Anthropic,
) -> None:
    auth = {
        "type": "environment_variable",
        "secret_name": "X_TOKEN",
        "secret_value": "v",
        "networking": {"type": "unrestricted"},
    }
    vault_id, cred_id = _credential(client, auth)
    with pytest.raises(anthropic.BadRequestError, match="environment_variable"):
        client.beta.vaults.credentials.mcp_oauth_validate(cred_id, vault_id=vault_id)


def test_a_keyed_retry_keeps_the_tokens_its_refresh_got(
    client: anthropic.Anthropic, mcp: FakeMcpServer
) -> None:
    """A retry with the first call's Idempotency-Key replays its answer, but a
    refresh it made on the way (the upstream spent the old refresh token) is
    still written back, not rolled back with the replay."""
    access = mcp.issue_token()
    vault_id, cred_id = _credential(client, _oauth(mcp, access, mcp.issue_refresh_token()))
    keyed: Any = {"extra_headers": {"Idempotency-Key": f"validate-{cred_id}"}}
    validate = client.beta.vaults.credentials.with_raw_response.mcp_oauth_validate
    first = validate(cred_id, vault_id=vault_id, **keyed)
    assert first.parse().status == "valid"
    mcp.revoke(access)
    before = mcp.refreshes
    again = validate(cred_id, vault_id=vault_id, **keyed)
    assert again.headers.get("idempotent-replayed") == "true"
    assert again.parse().model_dump() == first.parse().model_dump()
    assert mcp.refreshes == before + 1
    # The rotated tokens were kept: they work with no further refresh.
    after = client.beta.vaults.credentials.mcp_oauth_validate(cred_id, vault_id=vault_id)
    assert (after.status, after.refresh) == ("valid", None)
    assert mcp.refreshes == before + 1
