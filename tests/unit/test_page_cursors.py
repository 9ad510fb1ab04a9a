"""Page cursors: accepted only by the list and workspace that issued them, never forgeable."""

from __future__ import annotations

import base64
import json
from datetime import UTC, datetime

import pytest

from stead.api.pagination import CREATED_KEY, Listing, encode, page_request
from stead.schemas import RequestError

SECRET = b"k" * 32
AGENTS = Listing(SECRET, "wrkspc_a", "agents")
KEY = (datetime(2026, 11, 24, tzinfo=UTC), "agent_1")


def test_a_cursor_reads_back_its_key() -> None:
    cursor = encode(AGENTS, "desc", KEY, "after")
    assert page_request(AGENTS, "desc", 10, cursor, CREATED_KEY).after == KEY
    before = encode(AGENTS, "desc", KEY, "before")
    assert page_request(AGENTS, "desc", 10, before, CREATED_KEY).before == KEY


@pytest.mark.parametrize(
    "elsewhere",
    [
        Listing(SECRET, "wrkspc_b", "agents"),
        Listing(SECRET, "wrkspc_a", "environments"),
        Listing(b"another installation's key.....", "wrkspc_a", "agents"),
    ],
    ids=["other-workspace", "other-list", "other-installation"],
)
def test_a_cursor_is_refused_anywhere_else(elsewhere: Listing) -> None:
    cursor = encode(AGENTS, "desc", KEY, "after")
    with pytest.raises(RequestError, match="not a cursor issued by this server"):
        page_request(elsewhere, "desc", 10, cursor, CREATED_KEY)


def test_a_changed_key_or_tag_is_refused() -> None:
    cursor = encode(AGENTS, "desc", KEY, "after")
    body, _, tag = cursor.removeprefix("page_").partition(".")
    payload = json.loads(base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)))
    payload["k"][1] = "agent_\ud800"
    forged = base64.urlsafe_b64encode(json.dumps(payload).encode()).decode().rstrip("=")
    for bad in (f"page_{forged}.{tag}", f"page_{body}", f"page_{body}.{tag[:-2]}AA", "page_%%.%%"):
        with pytest.raises(RequestError, match="not a cursor issued by this server"):
            page_request(AGENTS, "desc", 10, bad, CREATED_KEY)


def test_a_cursor_of_the_other_order_says_so() -> None:
    cursor = encode(AGENTS, "asc", KEY, "after")
    with pytest.raises(RequestError, match="issued for order=asc"):
        page_request(AGENTS, "desc", 10, cursor, CREATED_KEY)
