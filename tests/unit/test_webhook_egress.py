"""A webhook's HTTP exchange under the egress rules, against a real receiver on
loopback: refused at an address the operator did not allow, sent to a pinned
name (its Host kept), and the receiver's failures returned as the result."""

from __future__ import annotations

import pytest

from stead.egress_policy import UpstreamTls
from stead.runtime import WebhookEgress
from stead.runtime.webhook_signing import new_secret, signed_headers
from stead.schemas import RequestError
from stead.schemas.webhooks import check_url
from tests.webhook_receiver import Receiver

pytestmark = pytest.mark.anyio
PIN = {"hooks.test": "127.0.0.1"}


def egress(pinned: dict[str, str]) -> WebhookEgress:
    return WebhookEgress(pinned=pinned, tls=UpstreamTls(None), timeout_seconds=5.0)


async def test_loopback_is_refused_unless_the_operator_pinned_it() -> None:
    with Receiver() as receiver:
        refused = await egress({}).post(f"http://127.0.0.1:{receiver.port}/", {}, "{}")
        assert refused.status_code is None and not refused.delivered
        assert refused.error == (
            "refused by stead's egress rules: address 127.0.0.1 is blocked (loopback)"
        )
        headers = signed_headers(new_secret(), "whmsg_1", 1_700_000_000, '{"a":1}')
        sent = await egress(PIN).post(f"http://hooks.test:{receiver.port}/in", headers, '{"a":1}')
        assert sent.delivered and sent.error is None
        [received] = receiver.received
    assert received.body == '{"a":1}'
    assert received.headers["host"] == f"hooks.test:{receiver.port}"
    assert received.headers["webhook-id"] == "whmsg_1"
    assert received.headers["content-type"] == "application/json"


async def test_a_failing_receiver_is_the_result_not_an_error() -> None:
    with Receiver() as receiver:
        receiver.status = 503
        answered = await egress(PIN).post(f"http://hooks.test:{receiver.port}/", {}, "{}")
        port = receiver.port
    assert (answered.status_code, answered.error) == (503, "the receiver answered 503")
    gone = await egress(PIN).post(f"http://hooks.test:{port}/", {}, "{}")
    assert gone.status_code is None and gone.error and "ConnectError" in gone.error


@pytest.mark.parametrize(
    ("url", "named"),
    [
        ("http://example.com/", "STEAD_EGRESS_HOSTS"),
        ("https://127.0.0.1/", "loopback"),
        ("https://[::1]/", "::1"),
        ("https://169.254.169.254/latest", "169.254.169.254"),
    ],
)
async def test_registration_refuses_what_delivery_would(url: str, named: str) -> None:
    with pytest.raises(RequestError, match="url: ") as refused:
        await egress({}).check_target(url)
    assert named in str(refused.value)


async def test_a_pinned_name_may_use_plain_http() -> None:
    await egress(PIN).check_target("http://hooks.test:8080/in")


@pytest.mark.parametrize(
    "url",
    ["https://ä..example/", "https://⒈.example/", "https://a\u200dä.example/"],
)
async def test_a_host_without_an_idna_form_is_refused_at_registration(url: str) -> None:
    """Before, encoding the name for DNS raised past the egress rules: a 500."""
    with pytest.raises(RequestError, match="url: "):
        await egress({}).check_target(url)


@pytest.mark.parametrize(
    "url", ["https://hooks.example/a\nb", "https://hooks.example/\x7f", "https://hooks.example/a b"]
)
def test_control_characters_and_spaces_are_refused_in_a_url(url: str) -> None:
    """Delivery's parser refuses them; stored, they failed every attempt."""
    with pytest.raises(RequestError, match="url: must not contain"):
        check_url(url)


def test_port_zero_is_refused_in_a_url() -> None:
    """Before, it was stored, and every attempt failed."""
    with pytest.raises(RequestError, match="url: port 0 is no port a server listens on"):
        check_url("https://hooks.example:0/")
