"""web_fetch and web_search through the official SDK, against a real ``stead
serve`` and the fake model, with loopback origins named through
``STEAD_EGRESS_HOSTS``: they run in the brain (the main server has no
sandbox at all), record ``agent.tool_use``/``agent.tool_result`` like every
built-in tool, obey permission policies, and answer every refusal and failure
as a tool error."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import pytest

from stead.testing import FakeModel, ServeForker, ServerProcess, Text, ToolCall, Turn
from stead.testing.scripts import last_user_text
from tests.conftest import loop_env, sdk_of
from tests.integration.helpers import message, wait_idle
from tests.web_origins import Reply, Seen, WebOrigin, html, searxng, web_origin

Json = dict[str, Any]
INPUT_KEYS = {"web_fetch": "url", "web_search": "query", "bash": "command"}
PINNED = {"page.test": "127.0.0.1", "other.test": "127.0.0.1"}
MAX_BYTES = 64 * 1024
RESULTS = [
    {"url": "https://docs.example.com/start", "title": "Getting started", "content": "How to"},
    {"url": "https://ads.example.com/x", "title": "An ad", "content": "Buy now"},
]


def scripted(body: Json) -> Turn:
    """``<tool> <argument>`` in the user's message calls the tool once;
    ``leak <url>`` fetches the URL with something the user never wrote."""
    tool, _, argument = last_user_text(body).partition(" ")
    if tool == "leak":
        return Turn([ToolCall("web_fetch", {"url": f"{argument}?leaked=1"})])
    if tool in INPUT_KEYS:
        return Turn([ToolCall(tool, {INPUT_KEYS[tool]: argument})])
    return Turn([Text("done")])


def to_other(seen: Seen) -> Reply:
    port = seen.host.rsplit(":", 1)[1]
    return Reply(302, headers={"Location": f"http://other.test:{port}/page"})


ROUTES = {
    "/page": html(
        "<script>track()</script><h2>Welcome</h2><p>Read <a href='/more'>more</a>.</p>",
        title="Home",
    ),
    "/to-other": to_other,
    "/big": Reply(body=b"y" * (MAX_BYTES + 50_000)),
    "/stall": Reply(stall=True),
    "/to-bad-host": Reply(302, headers={"Location": "http://[::1/page"}),
    "/hostile": html(
        "<p>Before</p><![foo[ x ]]><a href='http://[::1'>bad link</a>"
        "<p>After</p><base href='http://[::1'><a href='/next'>next</a>"
    ),
}


@pytest.fixture(scope="module")
def origin() -> Iterator[WebOrigin]:
    with web_origin(ROUTES) as served:
        yield served


@pytest.fixture(scope="module")
def provider() -> Iterator[WebOrigin]:
    with web_origin({"/search": searxng(RESULTS)}) as served:
        yield served


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeModel]:
    with FakeModel(scripted) as model:
        yield model


def web_env(fake: FakeModel, **extra: str) -> dict[str, str]:
    return loop_env(
        fake,
        STEAD_EGRESS_HOSTS=json.dumps(PINNED),
        STEAD_WEB_FETCH_MAX_BYTES=str(MAX_BYTES),
        STEAD_WEB_TIMEOUT_SECONDS="2",
        **extra,
    )


@pytest.fixture(scope="module")
def server(
    fake: FakeModel,
    provider: WebOrigin,
    forker: ServeForker,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[ServerProcess]:
    """No sandbox at all: whatever works here needs none."""
    env = web_env(
        fake, STEAD_SANDBOX="off", STEAD_WEB_SEARCH_URL=f"http://127.0.0.1:{provider.port}"
    )
    process = ServerProcess(tmp_path_factory.mktemp("web"), env=env, forker=forker).start()
    yield process
    process.stop()


@pytest.fixture
def sdk(server: ServerProcess) -> Iterator[anthropic.Anthropic]:
    with sdk_of(server) as client:
        yield client


def session(sdk: anthropic.Anthropic, *configs: Json) -> str:
    toolset = {"type": "agent_toolset_20260401", "configs": list(configs)}
    agent = sdk.beta.agents.create(name="web", model="claude-sonnet-4-6", tools=[toolset])  # type: ignore[list-item]
    env = sdk.beta.environments.create(name=f"web-{uuid.uuid4().hex[:8]}")
    return sdk.beta.sessions.create(agent=agent.id, environment_id=env.id).id


def turn(sdk: anthropic.Anthropic, session_id: str, text: str) -> list[Any]:
    """Sends ``text``, waits for the turn to end; the session's events."""
    sdk.beta.sessions.events.send(session_id, events=[message(text)])
    wait_idle(sdk, session_id)
    return list(sdk.beta.sessions.events.list(session_id, limit=100))


def result_of(events: list[Any]) -> tuple[bool, str]:
    (found,) = [e for e in events if e.type == "agent.tool_result"]
    return bool(found.is_error), "\n".join(b.text for b in found.content if b.type == "text")


def test_a_page_is_fetched_and_turned_into_text(
    sdk: anthropic.Anthropic, origin: WebOrigin
) -> None:
    session_id = session(sdk)
    url = f"http://page.test:{origin.port}/page"
    events = turn(sdk, session_id, f"web_fetch {url}")
    kinds = [e.type for e in events]
    assert kinds.index("agent.tool_use") < kinds.index("agent.tool_result")
    (use,) = [e for e in events if e.type == "agent.tool_use"]
    assert (use.name, use.input, use.evaluated_permission) == ("web_fetch", {"url": url}, "allow")
    is_error, text = result_of(events)
    assert not is_error, text
    assert text.startswith(f"URL: {url}\nTitle: Home\nContent-Type: text/html")
    assert "## Welcome" in text and "track()" not in text
    assert f"Read [more](http://page.test:{origin.port}/more)." in text
    assert events[-1].type == "session.status_idle"


@pytest.mark.parametrize(
    ("config", "path", "message"),
    [
        (
            {"blocked_domains": ["page.test"]},
            "/page",
            "egress to page.test denied: in the web_fetch tool's blocked_domains",
        ),
        (
            {"allowed_domains": ["page.test"]},
            "/to-other",
            "egress to other.test denied: not in the web_fetch tool's allowed_domains",
        ),
    ],
    ids=["blocked-domain", "redirect-to-a-host-not-allowed"],
)
def test_domain_lists_refuse_hosts_and_redirects(
    sdk: anthropic.Anthropic, origin: WebOrigin, config: Json, path: str, message: str
) -> None:
    session_id = session(sdk, {"name": "web_fetch", **config})
    before = len(origin.seen)
    is_error, text = result_of(
        turn(sdk, session_id, f"web_fetch http://page.test:{origin.port}{path}")
    )
    assert is_error and message in text
    assert all(seen.path != "/page" for seen in origin.seen[before:])


def test_a_private_address_is_refused_unless_allowed_by_name(
    sdk: anthropic.Anthropic, origin: WebOrigin
) -> None:
    url = f"http://127.0.0.1:{origin.port}/page"
    is_error, text = result_of(turn(sdk, session(sdk), f"web_fetch {url}"))
    assert is_error and "address 127.0.0.1 is blocked (loopback)" in text
    allowed = session(sdk, {"name": "web_fetch", "allowed_domains": ["127.0.0.1"]})
    is_error, text = result_of(turn(sdk, allowed, f"web_fetch {url}"))
    assert not is_error and "## Welcome" in text


def test_an_oversize_body_is_capped(sdk: anthropic.Anthropic, origin: WebOrigin) -> None:
    config = {"name": "web_fetch", "max_content_tokens": 100_000}
    events = turn(sdk, session(sdk, config), f"web_fetch http://page.test:{origin.port}/big")
    is_error, text = result_of(events)
    assert not is_error
    assert "y" * MAX_BYTES in text and "y" * (MAX_BYTES + 1) not in text
    assert f"[the body is longer than {MAX_BYTES} bytes; only that much was read]" in text


def test_a_slow_origin_is_a_tool_error_not_a_failed_turn(
    sdk: anthropic.Anthropic, origin: WebOrigin
) -> None:
    events = turn(sdk, session(sdk), f"web_fetch http://page.test:{origin.port}/stall")
    is_error, text = result_of(events)
    assert is_error and "no complete answer within 2 s" in text
    assert not [e for e in events if e.type == "session.error"]
    assert events[-1].stop_reason.type == "end_turn"  # type: ignore[union-attr]


def test_markup_the_html_parser_chokes_on_is_read_around_not_a_failed_turn(
    sdk: anthropic.Anthropic, origin: WebOrigin
) -> None:
    """A marked section with an unknown keyword made the standard library's
    parser raise AssertionError, a link to a malformed IPv6 host ValueError:
    either failed the whole turn."""
    url = f"http://page.test:{origin.port}/hostile"
    events = turn(sdk, session(sdk), f"web_fetch {url}")
    is_error, text = result_of(events)
    assert not is_error, text
    assert "Before" in text and "bad link" in text and "After" in text
    assert f"[next](http://page.test:{origin.port}/next)" in text
    assert not [e for e in events if e.type == "session.error"]
    assert events[-1].stop_reason.type == "end_turn"  # type: ignore[union-attr]


def test_a_redirect_to_a_malformed_url_is_a_tool_error_not_a_failed_turn(
    sdk: anthropic.Anthropic, origin: WebOrigin
) -> None:
    """httpx's InvalidURL is no HTTPError: it escaped the tool, the turn
    failed and was retried, and the session stayed busy."""
    url = f"http://page.test:{origin.port}/to-bad-host"
    events = turn(sdk, session(sdk), f"web_fetch {url}")
    is_error, text = result_of(events)
    assert is_error and "redirected to 'http://[::1/page', not a valid URL" in text, text
    assert not [e for e in events if e.type == "session.error"]
    assert events[-1].stop_reason.type == "end_turn"  # type: ignore[union-attr]


def test_a_url_the_conversation_never_showed_is_refused(
    sdk: anthropic.Anthropic, origin: WebOrigin
) -> None:
    before = len(origin.seen)
    events = turn(sdk, session(sdk), f"leak http://page.test:{origin.port}/page")
    (use,) = [e for e in events if e.type == "agent.tool_use"]
    assert use.evaluated_permission == "deny" and use.evaluation is None
    is_error, text = result_of(events)
    assert is_error and "has not appeared in this conversation" in text
    assert len(origin.seen) == before


def test_web_fetch_asks_first_under_always_ask(sdk: anthropic.Anthropic, origin: WebOrigin) -> None:
    asking = {"name": "web_fetch", "permission_policy": {"type": "always_ask"}}
    session_id = session(sdk, asking)
    events = turn(sdk, session_id, f"web_fetch http://page.test:{origin.port}/page")
    (use,) = [e for e in events if e.type == "agent.tool_use"]
    assert use.evaluated_permission == "ask"
    assert events[-1].stop_reason.type == "requires_action"  # type: ignore[union-attr]
    assert not [e for e in events if e.type == "agent.tool_result"]
    confirmation: Json = {
        "type": "user.tool_confirmation",
        "tool_use_id": use.id,
        "result": "allow",
    }
    sdk.beta.sessions.events.send(session_id, events=[confirmation])  # type: ignore[list-item]
    wait_idle(sdk, session_id)
    is_error, text = result_of(list(sdk.beta.sessions.events.list(session_id, limit=100)))
    assert not is_error and "## Welcome" in text


def test_web_search_lists_the_providers_results(
    sdk: anthropic.Anthropic, provider: WebOrigin
) -> None:
    config = {"name": "web_search", "blocked_domains": ["ads.example.com"]}
    is_error, text = result_of(turn(sdk, session(sdk, config), "web_search how to start"))
    assert not is_error
    assert text.startswith(
        "Search results:\n\n1. Getting started\n   https://docs.example.com/start"
    )
    assert "An ad" not in text
    assert provider.seen[-1].query == {"q": ["how to start"], "format": ["json"]}


def test_web_calls_that_got_their_answer_are_counted_in_the_sessions_usage(
    sdk: anthropic.Anthropic, origin: WebOrigin, provider: WebOrigin
) -> None:
    """``server_tool_use``, as the hosted service counts its web tools; a call
    refused or failed is not counted."""
    session_id = session(sdk, {"name": "web_fetch", "blocked_domains": ["other.test"]})
    assert sdk.beta.sessions.retrieve(session_id).usage.server_tool_use is None
    turn(sdk, session_id, f"web_fetch http://page.test:{origin.port}/page")
    turn(sdk, session_id, f"web_fetch http://other.test:{origin.port}/page")
    events = turn(sdk, session_id, "web_search how to start")
    used = sdk.beta.sessions.retrieve(session_id).usage.server_tool_use
    assert used is not None
    assert (used.web_fetch_requests, used.web_search_requests) == (1, 1)
    (last,) = [e for e in events if e.type == "session.usage"][-1:]
    assert last.usage.server_tool_use == used  # type: ignore[union-attr]


# --- a server with a sandbox provider, and without a search provider -----------------


@pytest.fixture(scope="module")
def local_server(
    fake: FakeModel, forker: ServeForker, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ServerProcess]:
    env = web_env(fake, STEAD_SANDBOX="unsafe_local")
    process = ServerProcess(tmp_path_factory.mktemp("web-local"), env=env, forker=forker).start()
    yield process
    process.stop()


def test_web_tools_make_no_sandbox_and_search_needs_a_provider(
    local_server: ServerProcess, origin: WebOrigin
) -> None:
    with sdk_of(local_server) as sdk:
        session_id = session(sdk)
        sandbox = Path(local_server.data_dir) / "sandboxes" / session_id
        is_error, text = result_of(turn(sdk, session_id, "web_search anything"))
        assert is_error
        assert "web_search is not configured on this stead" in text
        assert "STEAD_WEB_SEARCH_URL" in text
        turn(sdk, session_id, f"web_fetch http://page.test:{origin.port}/page")
        assert not sandbox.exists()
        view = sdk.get(f"/v1/sessions/{session_id}/sandbox", cast_to=object)
        assert view["lease"] is None  # type: ignore[index]
        turn(sdk, session_id, "bash echo hi")  # a sandbox tool does make one
        assert sandbox.exists()


def test_a_web_fetch_cut_short_by_a_crash_simply_runs_again(
    fake: FakeModel, forker: ServeForker, origin: WebOrigin, tmp_path: Path
) -> None:
    crashing = web_env(fake, STEAD_SANDBOX="off", STEAD_FAILPOINTS="tool.after_run:1")
    first = ServerProcess(tmp_path / "data", env=crashing, forker=forker).start()
    url = f"http://page.test:{origin.port}/page"
    try:
        with sdk_of(first) as sdk:
            session_id = session(sdk)
            before = len(origin.seen)
            sdk.beta.sessions.events.send(session_id, events=[message(f"web_fetch {url}")])
            assert first.wait_exit(timeout=30), "the failpoint did not stop the server"
    finally:
        first.kill()
    again = ServerProcess(tmp_path / "data", env=web_env(fake, STEAD_SANDBOX="off"), forker=forker)
    again.first_key = first.first_key
    again.start()
    try:
        with sdk_of(again) as sdk:
            wait_idle(sdk, session_id)
            events = list(sdk.beta.sessions.events.list(session_id, limit=100))
    finally:
        again.stop()
    is_error, text = result_of(events)
    assert not is_error and "## Welcome" in text
    assert [seen.path for seen in origin.seen[before:]] == ["/page", "/page"]
