"""The OAuth ``refresh_token`` grant (RFC 6749 §6) for ``mcp_oauth`` credentials,
with the client authentication the credential names (RFC 6749 §2.3.1)."""

from __future__ import annotations

import base64
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import anyio
import httpx2

from stead.tools.mcp.connection import HttpResponse, captured
from stead.tools.mcp.transport import EgressRules


@dataclass(frozen=True, slots=True)
class TokenGrant:
    access_token: str
    refresh_token: str | None
    """A rotated refresh token, when the endpoint issued one."""
    expires_at: datetime | None

    def __repr__(self) -> str:
        return f"TokenGrant(expires_at={self.expires_at!r}, tokens=<hidden>)"


class RefreshFailed(Exception):
    """``status`` is ``failed`` (the endpoint refused; ``http`` is what it said)
    or ``connect_error`` (it could not be reached)."""

    def __init__(self, status: str, message: str, http: HttpResponse | None = None) -> None:
        self.status = status
        self.http = http
        super().__init__(message)


async def refresh_access_token(
    *,
    token_endpoint: str,
    client_id: str,
    refresh_token: str,
    auth_method: str,
    client_secret: str | None,
    scope: str | None,
    resource: str | None,
    seconds: float,
    rules: EgressRules,
) -> TokenGrant:
    form = {"grant_type": "refresh_token", "refresh_token": refresh_token, "client_id": client_id}
    if scope:
        form["scope"] = scope
    if resource:
        form["resource"] = resource
    headers = {"accept": "application/json"}
    if auth_method == "client_secret_basic":
        pair = f"{client_id}:{client_secret or ''}".encode()
        headers["authorization"] = "Basic " + base64.b64encode(pair).decode()
        del form["client_id"]
    elif auth_method == "client_secret_post":
        form["client_secret"] = client_secret or ""
    try:
        # httpx's timeout bounds each read, not the exchange: an endpoint that
        # sends a byte now and then would hold the turn (and the credential's
        # refresh lock, which every session using it waits on) for ever.
        with anyio.fail_after(seconds):
            async with httpx2.AsyncClient(
                timeout=seconds, follow_redirects=False, transport=rules.transport()
            ) as http:
                response = await http.post(token_endpoint, data=form, headers=headers)
                if response.status_code != 200:
                    # An echo of what was sent: the Basic pair is a secret too.
                    sent = [refresh_token, client_secret or "", *_basic_credentials(headers)]
                    refusal = (await captured(response)).redacted(sent)
                    raise RefreshFailed(
                        "failed",
                        f"the token endpoint answered HTTP {response.status_code}",
                        refusal,
                    )
                answer = response.json()
    except TimeoutError:
        raise RefreshFailed(
            "connect_error", f"the token endpoint did not answer within {seconds:g}s"
        ) from None
    except httpx2.HTTPError as exc:
        raise RefreshFailed(
            "connect_error", f"the token endpoint cannot be reached: {exc}"
        ) from None
    except ValueError:
        raise RefreshFailed("failed", "the token endpoint's answer is not JSON") from None
    if not isinstance(answer, dict) or not isinstance(answer.get("access_token"), str):
        raise RefreshFailed("failed", "the token endpoint's answer has no access_token")
    expires_in = answer.get("expires_in")
    expires_at = None
    if isinstance(expires_in, int | float) and not isinstance(expires_in, bool) and expires_in > 0:
        expires_at = datetime.now(UTC) + timedelta(seconds=float(expires_in))
    rotated = answer.get("refresh_token")
    return TokenGrant(
        access_token=answer["access_token"],
        refresh_token=rotated if isinstance(rotated, str) and rotated else None,
        expires_at=expires_at,
    )


def _basic_credentials(headers: dict[str, str]) -> list[str]:
    scheme, _, credentials = headers.get("authorization", "").partition(" ")
    return [credentials] if scheme == "Basic" else []
