"""The console in a real browser (Debian's Chromium, headless, driven by
Playwright) against a real ``stead serve`` with a real sandbox host and the
fake model: log in, watch a scripted session, send, interrupt, confirm a tool,
type in a terminal, reload, and stay inside the key's workspace. Each page's
screenshot is written to ``STEAD_SCREENSHOT_DIR`` (or the test's tmp path)."""

from __future__ import annotations

import re
from pathlib import Path

import anthropic
from playwright.sync_api import Page, Route, expect

from stead.api.deps import REAUTHENTICATE_SECONDS
from stead.testing import ServerProcess
from tests.browser.console_pages import (
    SECRET,
    TOOLSET,
    log_in,
    new_session,
    open_session,
    send,
    timeline_ids,
    turned_session,
)
from tests.conftest import make_client
from tests.sandbox.conftest import requires_isolation

pytestmark = requires_isolation


def test_a_wrong_key_is_refused(page: Page, shots: Path) -> None:
    page.goto("/console/")
    page.fill("input[name=api_key]", "sk-stead-not-a-key")
    page.click("#login button[type=submit]")
    expect(page.locator("#login-error")).to_contain_text("invalid API key")
    expect(page.locator("#nav")).to_be_hidden()
    page.screenshot(path=shots / "login.png")


def test_a_scripted_session_runs_to_idle_in_the_timeline_and_survives_a_reload(
    page: Page, stead: ServerProcess, sdk: anthropic.Anthropic, shots: Path
) -> None:
    session_id = open_session(page, stead, sdk, [TOOLSET])
    send(page, "tools please")
    timeline = page.locator("#timeline")
    expect(timeline.locator(".event.status").last).to_have_text("idle (end_turn)")
    uses = timeline.locator('[data-type="agent.tool_use"]')
    expect(uses).to_have_count(2)
    expect(uses.nth(0).locator(".tool-input")).to_contain_text("notes.txt")
    expect(uses.nth(1).locator(".tool-output")).to_contain_text("hello console")
    expect(uses.nth(1).locator(".tool-output")).to_contain_text("sum=42")
    expect(timeline.locator('[data-type="agent.thinking"] details')).not_to_have_attribute(
        "open", ""
    )
    expect(timeline.locator('[data-type="agent.message"]').last).to_have_text(
        re.compile("All done")
    )
    send(page, "and hello again")
    expect(timeline.locator('[data-type="agent.message"]').last).to_contain_text(
        "You said: and hello again"
    )
    expect(page.locator("#session-status")).to_have_text("idle")
    expect(page.locator("#session-usage")).not_to_have_text(re.compile(r"^0 tokens"))
    page.screenshot(path=shots / "session.png", full_page=True)
    before = timeline_ids(page)

    page.reload()
    expect(page.locator("#timeline > [data-id]")).to_have_count(len(before))
    assert timeline_ids(page) == before
    expect(page.locator("#session-status")).to_have_text("idle")

    page.click("#nav a[href='#/sessions']")
    row = page.locator(f"#sessions tr[data-session='{session_id}']")
    expect(row).to_contain_text("idle")
    expect(row).to_contain_text("console")
    expect(row.locator("td.num").first).not_to_have_text("0")
    page.screenshot(path=shots / "sessions.png", full_page=True)


def test_a_session_s_history_asks_for_the_session_once(
    page: Page, stead: ServerProcess, sdk: anthropic.Anthropic
) -> None:
    """Each idle and model request's end of the history asked for the session
    again as the page opened, all at once: two requests a turn, thousands for
    a long session."""
    assert stead.first_key
    session_id = new_session(sdk, [])
    for turn in range(5):
        with sdk.beta.sessions.events.stream(session_id) as stream:
            sdk.beta.sessions.events.send(
                session_id,
                events=[{"type": "user.message", "content": [{"type": "text", "text": f"{turn}"}]}],
            )
            next(e for e in stream if e.type == "session.status_idle")
    log_in(page, stead.first_key)
    asked: list[str] = []
    session_url = f"/v1/sessions/{session_id}"
    page.on("request", lambda request: asked.append(request.url))
    page.goto(f"/console/#/sessions/{session_id}")
    expect(page.locator("#stream-state")).to_have_text("stream: live")
    assert len([url for url in asked if url.endswith(session_url)]) == 2
    send(page, "and now")
    expect(page.locator('[data-type="agent.message"]').last).to_contain_text("You said: and now")
    expect(page.locator("#session-usage")).not_to_have_text(re.compile(r"^0 tokens"))


def test_a_long_command_is_interrupted(
    page: Page, stead: ServerProcess, sdk: anthropic.Anthropic
) -> None:
    session_id = open_session(page, stead, sdk, [TOOLSET])
    send(page, "sleep for a minute")
    use = page.locator('[data-type="agent.tool_use"]')
    expect(use.locator(".result")).to_have_text("running…")
    expect(page.locator("#session-status")).to_have_text("running")
    listing = page.context.new_page()  # the sessions list, left open while the turn ends
    listing.goto("/console/#/sessions")
    row = listing.locator(f"#sessions tr[data-session='{session_id}'] .status")
    expect(row).to_have_text("running")
    page.click("#interrupt")
    expect(use.locator(".tool-output.error")).to_be_visible()
    expect(page.locator("#session-status")).to_have_text("idle")
    expect(row).to_have_text("idle")  # updated in place, no reload
    assert sdk.beta.sessions.retrieve(session_id).status == "idle"


def test_a_tool_confirmation_is_answered(
    page: Page, stead: ServerProcess, sdk: anthropic.Anthropic, shots: Path
) -> None:
    asking = {
        **TOOLSET,
        "configs": [{"name": "write", "permission_policy": {"type": "always_ask"}}],
    }
    session_id = open_session(page, stead, sdk, [asking])
    send(page, "ask before writing")
    confirm = page.locator("#actions .confirm")
    expect(confirm).to_contain_text("asked.txt")
    expect(page.locator('[data-type="agent.tool_use"] .result')).to_have_text(
        "waiting for confirmation"
    )
    page.screenshot(path=shots / "requires_action.png", full_page=True)
    confirm.locator("button", has_text="Allow").click()
    expect(page.locator("#timeline .event.status").last).to_have_text("idle (end_turn)")
    expect(page.locator("#actions .confirm")).to_have_count(0)
    result = next(
        e for e in sdk.beta.sessions.events.list(session_id) if e.type == "agent.tool_result"
    )
    assert not result.is_error  # type: ignore[union-attr]


def test_a_refusal_shows_its_category_and_explanation(
    page: Page, stead: ServerProcess, sdk: anthropic.Anthropic
) -> None:
    open_session(page, stead, sdk, [])
    send(page, "refuse this")
    expect(page.locator("#timeline .event.status").last).to_have_text(
        "idle (refusal · cyber: Unsafe.)"
    )


def test_a_custom_tools_result_is_sent(
    page: Page, stead: ServerProcess, sdk: anthropic.Anthropic
) -> None:
    lookup = {
        "type": "custom",
        "name": "lookup",
        "description": "Looks a thing up.",
        "input_schema": {"type": "object", "properties": {"q": {"type": "string"}}},
    }
    session_id = open_session(page, stead, sdk, [lookup])
    send(page, "custom lookup please")
    waiting = page.locator("#actions .confirm")
    expect(waiting).to_contain_text("weather")
    waiting.locator("textarea").fill("sunny, 21 C")
    waiting.locator("button", has_text="Send result").click()
    expect(page.locator("#timeline .event.status").last).to_have_text("idle (end_turn)")
    expect(page.locator('[data-type="agent.custom_tool_use"] .tool-output')).to_have_text(
        "sunny, 21 C"
    )
    answered = [
        e for e in sdk.beta.sessions.events.list(session_id) if e.type == "user.custom_tool_result"
    ]
    assert [block.text for block in answered[0].content] == ["sunny, 21 C"]  # type: ignore[union-attr]


def test_the_terminal_types_reads_and_reattaches_after_a_reload(
    page: Page, stead: ServerProcess, sdk: anthropic.Anthropic, shots: Path
) -> None:
    assert stead.first_key
    session_id = new_session(sdk, [TOOLSET])
    log_in(page, stead.first_key)
    page.goto(f"/console/#/sessions/{session_id}")
    page.click("#open-terminal")
    state = page.locator("#terminal-state")
    expect(state).to_contain_text("attached")
    attached = state.inner_text()
    page.locator("#terminal").click()
    page.keyboard.type("echo typed-$((6 * 7))")
    page.keyboard.press("Enter")
    screen = page.locator("#terminal .xterm-rows")
    expect(screen).to_contain_text("typed-42")
    page.screenshot(path=shots / "terminal.png")

    page.reload()
    expect(state).to_have_text(attached)  # the same terminal id, reattached
    expect(screen).to_contain_text("typed-42")  # its scrollback, replayed


def test_the_terminal_redials_when_stead_restarts_and_shows_each_byte_once(
    page: Page, stead: ServerProcess, sdk: anthropic.Anthropic
) -> None:
    assert stead.first_key
    session_id = new_session(sdk, [TOOLSET])
    log_in(page, stead.first_key)
    page.goto(f"/console/#/sessions/{session_id}/terminal")
    state = page.locator("#terminal-state")
    expect(state).to_contain_text("attached")
    screen = page.locator("#terminal .xterm-rows")
    page.locator("#terminal").click()
    page.keyboard.type("export KEPT=yes; echo before-$((1 + 1))")
    page.keyboard.press("Enter")
    expect(screen).to_contain_text("before-2")
    # The shell prints this while no stead serve runs; the sandbox host keeps it.
    page.keyboard.type("sleep 1; echo $((3 * 4))-meanwhile")
    page.keyboard.press("Enter")
    timeline = page.context.new_page()  # the session's live timeline, open across the restart
    timeline.goto(f"/console/#/sessions/{session_id}")
    stream = timeline.locator("#stream-state")
    expect(stream).to_have_text("stream: live")
    stead.kill()
    expect(state).to_have_text("reconnecting…")
    expect(stream).to_have_text("stream: reconnecting")
    stead.start()
    expect(state).to_contain_text("(redialled 1)")
    expect(stream).to_have_text("stream: live")
    send(timeline, "still there?")
    expect(timeline.locator('[data-type="agent.message"] pre')).to_have_text(
        "You said: still there?"
    )
    expect(screen).to_contain_text("12-meanwhile")
    page.keyboard.type("echo after-$KEPT-$((2 + 2))")
    page.keyboard.press("Enter")
    expect(screen).to_contain_text("after-yes-4")
    assert screen.inner_text().count("12-meanwhile") == 1


def test_logging_out_in_another_tab_ends_an_attached_terminal(
    page: Page, stead: ServerProcess, sdk: anthropic.Anthropic
) -> None:
    """A terminal's WebSocket was authenticated once, when it opened: after the
    login ended (logged out in another tab, or anywhere its cookie was copied
    to) it stayed attached and ran what was typed."""
    assert stead.first_key
    session_id = new_session(sdk, [TOOLSET])
    log_in(page, stead.first_key)
    page.goto(f"/console/#/sessions/{session_id}/terminal")
    state = page.locator("#terminal-state")
    expect(state).to_contain_text("attached")
    other = page.context.new_page()
    other.goto("/console/#/agents")
    other.click("#logout")
    expect(other.locator("#login")).to_be_visible()
    expect(state).to_have_text(re.compile(r"refused \(4401\).*log in again"))


def test_a_session_page_whose_login_ended_goes_to_the_login(
    page: Page, stead: ServerProcess, sdk: anthropic.Anthropic
) -> None:
    """Its stream refused (the login ended elsewhere), the page stayed, showing
    "stream: closed", where every other page goes to the login on a 401."""
    session_id = open_session(page, stead, sdk, [])
    other = page.context.new_page()
    other.goto("/console/#/agents")
    other.click("#logout")
    expect(other.locator("#login")).to_be_visible()
    page.wait_for_timeout(REAUTHENTICATE_SECONDS * 1000)  # the stream asks again before a frame
    sdk.beta.sessions.events.send(
        session_id,
        events=[{"type": "user.message", "content": [{"type": "text", "text": "after logout"}]}],
    )
    expect(page.locator("#login")).to_be_visible()
    expect(page.locator("#timeline")).to_have_count(0)


def test_another_workspaces_session_is_not_reachable(
    page: Page, stead: ServerProcess, shots: Path
) -> None:
    assert stead.first_key
    theirs = stead.create_key(new_workspace="console-other")
    with make_client(stead.url, theirs) as other:
        their_session = new_session(other, [])
    log_in(page, stead.first_key)
    page.goto(f"/console/#/sessions/{their_session}")
    expect(page.locator("#page-error")).to_contain_text(their_session)
    page.goto(f"/console/#/sessions/{their_session}/terminal")
    expect(page.locator("#page-error")).to_contain_text(their_session)
    page.goto("/console/#/sessions")
    expect(page.locator("#sessions")).not_to_contain_text(their_session)


def test_a_page_left_while_it_loads_neither_shows_nor_streams(
    page: Page, stead: ServerProcess, sdk: anthropic.Anthropic
) -> None:
    """A session's page whose history comes after another page was asked for:
    it drew over that page (the address said Agents, the page showed the
    session) and its stream ran on, its clean-up lost."""
    assert stead.first_key
    session_id = new_session(sdk, [])
    log_in(page, stead.first_key)
    history = f"/v1/sessions/{session_id}/events?"
    held: list[Route] = []
    page.route(lambda url: history in url, lambda route: held.append(route))
    with page.expect_request(lambda request: history in request.url):
        page.goto(f"/console/#/sessions/{session_id}")
    page.click("#nav a[href='#/agents']")
    expect(page.locator("#agents")).to_be_visible()
    stream = f"/v1/sessions/{session_id}/events/stream"
    # The left page's stream: ended as soon as it began.
    with page.expect_event("requestfailed", lambda failed: stream in failed.url):
        held[0].continue_()
    expect(page.locator("#agents")).to_be_visible()
    expect(page.locator("#timeline")).to_have_count(0)
    assert page.evaluate("location.hash") == "#/agents"


def test_a_turn_logged_before_the_stream_opens_shows_once(
    page: Page, stead: ServerProcess, sdk: anthropic.Anthropic
) -> None:
    """With nothing logged to resume after, the page's stream began at the log's
    end as it was when it opened: a turn logged between the page's history and
    its stream (or while the line was down and the page redialled) never showed
    until a reload."""
    assert stead.first_key
    session_id = new_session(sdk, [])
    log_in(page, stead.first_key)
    stream = f"/v1/sessions/{session_id}/events/stream"
    held: list[Route] = []
    page.route(
        lambda url: stream in url,
        lambda route: held.append(route) if not held else route.continue_(),
    )
    page.goto(f"/console/#/sessions/{session_id}")
    while not held:  # the page's stream, held before it reaches stead
        page.wait_for_timeout(50)
    with sdk.beta.sessions.events.stream(session_id) as events:
        sdk.beta.sessions.events.send(
            session_id,
            events=[{"type": "user.message", "content": [{"type": "text", "text": "meanwhile"}]}],
        )
        next(e for e in events if e.type == "session.status_idle")
    held[0].continue_()
    expect(page.locator("#stream-state")).to_have_text("stream: live")
    agent = page.locator('[data-type="agent.message"] pre')
    expect(agent).to_have_text("You said: meanwhile")
    send(page, "and after")
    expect(agent.last).to_have_text("You said: and after")
    expect(page.locator("#timeline .event.status").last).to_have_text("idle (end_turn)")
    # Each once, in the log's order (a model request's start gives way to its end).
    logged = sdk.beta.sessions.events.list(session_id)
    assert timeline_ids(page) == [e.id for e in logged if e.type != "span.model_request_start"]


def test_an_archived_session_s_usage_is_its_agent_s(
    page: Page, stead: ServerProcess, sdk: anthropic.Anthropic
) -> None:
    """The usage page named agents from the sessions list, which leaves archived
    sessions out: their tokens went to "(deleted session)"."""
    assert stead.first_key
    agent = sdk.beta.agents.create(name="archived-usage", model="claude-sonnet-4-6")
    used = turned_session(sdk, agent.id)
    sdk.beta.sessions.archive(used.id)
    log_in(page, stead.first_key)
    page.goto("/console/#/usage")
    expect(page.locator("#usage-agents")).to_contain_text("archived-usage")
    expect(page.locator("#usage-agents")).not_to_contain_text("(deleted session)")


def test_usage_names_the_agent_of_a_session_older_than_two_thousand_others(
    page: Page, stead: ServerProcess
) -> None:
    """The usage page named agents from the newest 2,000 sessions only (twenty
    pages of the list): a workspace's older sessions' tokens went to "(deleted
    session)"."""
    key = stead.create_key(new_workspace="console-usage-many")
    with make_client(stead.url, key) as theirs:
        agent = theirs.beta.agents.create(name="long-lived", model="claude-sonnet-4-6")
        turned_session(theirs, agent.id)
        idle = theirs.beta.agents.create(name="idle", model="claude-sonnet-4-6")
        env = theirs.beta.environments.create(name="console-usage-many")
        for _ in range(2000):
            theirs.beta.sessions.create(agent=idle.id, environment_id=env.id)
    log_in(page, key)
    page.goto("/console/#/usage")
    expect(page.locator("#usage-agents")).to_contain_text("long-lived")
    expect(page.locator("#usage-agents")).not_to_contain_text("(deleted session)")


def test_the_sessions_list_pages_past_its_first_hundred(page: Page, stead: ServerProcess) -> None:
    """The list showed the newest hundred sessions and no way to the others."""
    key = stead.create_key(new_workspace="console-many")
    with make_client(stead.url, key) as theirs:
        agent = theirs.beta.agents.create(name="many", model="claude-sonnet-4-6")
        env = theirs.beta.environments.create(name="console-many")
        oldest = theirs.beta.sessions.create(agent=agent.id, environment_id=env.id).id
        for _ in range(100):
            theirs.beta.sessions.create(agent=agent.id, environment_id=env.id)
    log_in(page, key)
    rows = page.locator("#sessions tbody tr")
    expect(rows).to_have_count(100)
    expect(page.locator(f"#sessions tr[data-session='{oldest}']")).to_have_count(0)
    expect(page.locator("#sessions-newer")).to_be_hidden()
    page.click("#sessions-older")
    expect(rows).to_have_count(1)
    expect(page.locator(f"#sessions tr[data-session='{oldest}']")).to_be_visible()
    expect(page.locator("#sessions-older")).to_be_hidden()
    updated = page.locator("#sessions-note")
    expect(updated).not_to_have_text(updated.inner_text())  # refreshed, on the same page
    expect(rows).to_have_count(1)
    page.click("#sessions-newer")
    expect(rows).to_have_count(100)
    expect(page.locator("#sessions-newer")).to_be_hidden()


def test_the_resource_pages_and_logout(
    page: Page, stead: ServerProcess, sdk: anthropic.Anthropic, shots: Path
) -> None:
    assert stead.first_key
    agent = sdk.beta.agents.create(name="diffed", model="claude-sonnet-4-6")
    sdk.beta.agents.update(agent.id, version=1, system="be brief")
    vault = sdk.beta.vaults.create(display_name="console vault")
    bearer = {
        "type": "static_bearer",
        "mcp_server_url": "https://mcp.example.com/mcp",
        "token": SECRET,
    }
    sdk.beta.vaults.credentials.create(vault.id, auth=bearer, display_name="example")  # type: ignore[arg-type]
    sdk.beta.files.upload(file=("console-notes.txt", b"notes", "text/plain"))
    store = sdk.beta.memory_stores.create(name="console memories")
    sdk.beta.memory_stores.memories.create(
        store.id, path="/notes/plan.md", content="remember the milk"
    )
    turned_session(sdk, agent.id)
    log_in(page, stead.first_key)

    page.goto(f"/console/#/agents/{agent.id}")
    expect(page.locator("#diff .add")).to_contain_text('"system": "be brief"')
    expect(page.locator("#diff .del")).to_contain_text('"system": null')
    page.screenshot(path=shots / "agent.png", full_page=True)
    for name, shows in [
        ("agents", "diffed"),
        ("environments", "console-"),
        ("files", "console-notes.txt"),
    ]:
        page.goto(f"/console/#/{name}")
        expect(page.locator(f"#{name}")).to_contain_text(shows)
        page.screenshot(path=shots / f"{name}.png", full_page=True)
    with page.expect_download() as download:
        page.locator("#files tr", has_text="console-notes.txt").locator("button").click()
    assert Path(download.value.path()).read_bytes() == b"notes"
    page.goto("/console/#/memory_stores")
    expect(page.locator("#memory-stores")).to_contain_text("console memories")
    page.locator("#memory-stores a", has_text="console memories").click()
    page.locator("#memories button", has_text="/notes/plan.md").click()
    expect(page.locator("#memory-content")).to_have_text("remember the milk")
    page.screenshot(path=shots / "memory_stores.png", full_page=True)
    page.goto("/console/#/vaults")
    expect(page.locator(f"#credentials-{vault.id}")).to_contain_text("static_bearer")
    assert SECRET not in page.content()
    page.screenshot(path=shots / "vaults.png", full_page=True)
    page.goto("/console/#/usage")
    expect(page.locator("#usage-total")).to_contain_text("model requests")
    expect(page.locator("#usage-per-day rect.bar")).to_have_count(30)
    expect(page.locator("#usage-agents")).to_contain_text("diffed")
    expect(page.locator("#usage-per-agent rect.bar").first).to_be_visible()
    page.screenshot(path=shots / "usage.png", full_page=True)

    page.click("#logout")
    expect(page.locator("#login")).to_be_visible()
    page.reload()
    expect(page.locator("#login")).to_be_visible()
