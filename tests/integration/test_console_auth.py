"""The console's login: the API key sealed in an HttpOnly, SameSite=Strict
cookie that authorises a request only beside the login's token in the console's
own header (a terminal's WebSocket: in its query, only from the server's own
origin), so another site, or a server on another port of the host that gets
the cookie, can neither use it nor plant one of its own."""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass

import httpx2
import pytest
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect

from stead.api.deps import REAUTHENTICATE_SECONDS
from stead.testing import ServerProcess, client_tls
from tests.conftest import sdk_of
from tests.integration.test_operations import logged

CONSOLE = {"x-stead-console": "1"}


def log_in(server: ServerProcess, body: object, headers: dict[str, str]) -> httpx2.Response:
    return httpx2.post(
        f"{server.url}/console/login", json=body, headers=headers, timeout=30, verify=client_tls()
    )


@dataclass
class Browser:
    """A client holding the console's cookie, and the page's token."""

    http: httpx2.Client
    token: str

    @property
    def console(self) -> dict[str, str]:
        return {"x-stead-console": self.token}


@pytest.fixture
def browser(server: ServerProcess, api_key: str) -> Iterator[Browser]:
    """As a browser is after logging in."""
    with httpx2.Client(verify=client_tls(), base_url=server.url, timeout=30.0) as http:
        answer = http.post("/console/login", json={"api_key": api_key}, headers=CONSOLE)
        assert answer.status_code == 200, answer.text
        yield Browser(http, answer.json()["console_token"])


def test_login_sets_an_httponly_strict_cookie(server: ServerProcess, api_key: str) -> None:
    answer = log_in(server, {"api_key": api_key}, CONSOLE)
    assert answer.status_code == 200
    cookie = answer.headers["set-cookie"].lower()
    assert "httponly" in cookie and "samesite=strict" in cookie and "path=/" in cookie
    assert answer.json()["workspace_id"].startswith("wrkspc_")


def test_the_cookie_is_secure_behind_a_tls_proxy(server: ServerProcess, api_key: str) -> None:
    proxied = CONSOLE | {"x-forwarded-proto": "https"}
    answer = log_in(server, {"api_key": api_key}, proxied)
    assert answer.status_code == 200
    assert "secure" in answer.headers["set-cookie"].lower()
    plain = log_in(server, {"api_key": api_key}, CONSOLE)
    assert "secure" not in plain.headers["set-cookie"].lower()


@pytest.mark.parametrize(
    ("body", "status", "words"),
    [
        ({"api_key": "sk-stead-wrong"}, 401, "api_key"),
        ({"api_key": 7}, 400, "api_key"),
        ({}, 400, "api_key"),
    ],
)
def test_a_bad_login_is_refused_and_sets_no_cookie(
    server: ServerProcess, body: dict[str, object], status: int, words: str
) -> None:
    answer = log_in(server, body, CONSOLE)
    assert answer.status_code == status
    assert words in answer.json()["error"]["message"]
    assert "set-cookie" not in answer.headers


def test_an_idempotency_key_on_login_is_refused_and_sets_no_cookie(
    server: ServerProcess, api_key: str
) -> None:
    # A replayed login would answer without its cookie.
    keyed = CONSOLE | {"Idempotency-Key": "login-1", "x-api-key": api_key}
    answer = log_in(server, {"api_key": api_key}, keyed)
    assert answer.status_code == 400 and "set-cookie" not in answer.headers
    assert "Idempotency-Key" in answer.json()["error"]["message"]


def test_login_and_logout_need_the_console_header(server: ServerProcess, api_key: str) -> None:
    login = log_in(server, {"api_key": api_key}, {})
    assert login.status_code == 403 and "set-cookie" not in login.headers
    logout = httpx2.post(f"{server.url}/console/logout", timeout=30, verify=client_tls())
    assert logout.status_code == 403


def test_the_cookie_works_only_with_the_login_s_token(browser: Browser, api_key: str) -> None:
    http = browser.http
    assert http.get("/v1/sessions", headers=browser.console).status_code == 200
    assert http.get("/v1/sessions").status_code == 401
    for header in ("1", "not-the-token", browser.token[:-1]):
        assert http.get("/v1/sessions", headers={"x-stead-console": header}).status_code == 401
    agent = {"name": "forged", "model": "claude-sonnet-4-6"}
    assert http.post("/v1/agents", json=agent).status_code == 401
    elsewhere = browser.console | {"origin": "https://evil.example"}
    assert http.get("/v1/sessions", headers=elsewhere).status_code == 401
    # What a server on another port of the host receives tells it nothing.
    assert api_key not in http.cookies["stead_console_key"]


def test_a_cookie_planted_or_of_another_login_is_of_no_use(
    server: ServerProcess, browser: Browser, api_key: str
) -> None:
    """A page on another port can write the host's cookies: its own login's
    cookie (or a raw key, as the cookie once was) is refused beside this page's
    token, and a stolen cookie without its token too."""
    with httpx2.Client(verify=client_tls(), base_url=server.url, timeout=30.0) as other:
        other.post("/console/login", json={"api_key": api_key}, headers=CONSOLE)
        planted = other.cookies["stead_console_key"]
    for cookie in (planted, api_key):
        sent = {"cookie": f"stead_console_key={cookie}"} | browser.console
        answer = httpx2.get(
            f"{server.url}/v1/sessions", headers=sent, timeout=30, verify=client_tls()
        )
        assert answer.status_code == 401


def test_logout_clears_the_cookie(browser: Browser) -> None:
    assert browser.http.post("/console/logout", headers=browser.console).status_code == 204
    assert browser.http.get("/v1/sessions", headers=browser.console).status_code == 401


def test_logout_ends_the_login_for_a_copy_of_its_cookie_too(
    server: ServerProcess, browser: Browser
) -> None:
    """Logging out ends the login in the store: its cookie and token, copied
    before, authorise nothing after (before, only the browser forgot them)."""
    copied = {"cookie": f"stead_console_key={browser.http.cookies['stead_console_key']}"}
    copied |= browser.console
    sessions = f"{server.url}/v1/sessions"
    assert httpx2.get(sessions, headers=copied, timeout=30, verify=client_tls()).status_code == 200
    assert browser.http.post("/console/logout", headers=browser.console).status_code == 204
    after = httpx2.get(sessions, headers=copied, timeout=30, verify=client_tls())
    assert after.status_code == 401 and "log in again" in after.json()["error"]["message"]


def test_logout_ends_an_event_stream_opened_before(server: ServerProcess, browser: Browser) -> None:
    """An event stream was authenticated once, when it opened: after a logout,
    one opened before with the login (in another tab, or with a copy of its
    cookie and token) went on showing the session's events."""
    with sdk_of(server) as sdk:
        agent = sdk.beta.agents.create(name="console", model="claude-sonnet-4-6")
        environment = sdk.beta.environments.create(name="console-stream")
        session = sdk.beta.sessions.create(agent=agent.id, environment_id=environment.id)
        copied = {"cookie": f"stead_console_key={browser.http.cookies['stead_console_key']}"}
        url = f"{server.url}/v1/sessions/{session.id}/events/stream"
        with httpx2.stream(
            "GET", url, headers=copied | browser.console, timeout=30, verify=client_tls()
        ) as stream:
            assert stream.status_code == 200
            assert browser.http.post("/console/logout", headers=browser.console).status_code == 204
            time.sleep(REAUTHENTICATE_SECONDS + 1)
            sdk.beta.sessions.events.send(
                session.id,
                events=[{"type": "user.message", "content": [{"type": "text", "text": "after"}]}],
            )
            shown = []
            for line in stream.iter_lines():
                shown.append(line)
                if "user.message" in line:
                    break
    assert not [line for line in shown if "user.message" in line]


def _close_code(
    server: ServerProcess, session_id: str, cookie: str, origin: str, token: str = ""
) -> int:
    url = server.url.replace("http", "ws", 1) + f"/v1/sessions/{session_id}/sandbox/pty"
    url += f"?console_token={token}"
    opened = connect(url, origin=origin, additional_headers={"cookie": cookie}, open_timeout=30)  # type: ignore[arg-type]
    with opened as ws, pytest.raises(ConnectionClosed) as closed:
        while True:
            ws.recv(timeout=30)
    assert closed.value.rcvd is not None
    return closed.value.rcvd.code


def test_a_terminal_takes_the_cookie_from_the_console_origin_only(
    server: ServerProcess, browser: Browser
) -> None:
    with sdk_of(server) as sdk:
        agent = sdk.beta.agents.create(name="console", model="claude-sonnet-4-6")
        environment = sdk.beta.environments.create(name="console-terminal")
        session = sdk.beta.sessions.create(agent=agent.id, environment_id=environment.id)
    cookie = f"stead_console_key={browser.http.cookies['stead_console_key']}"
    token = browser.token
    assert _close_code(server, session.id, cookie, "https://evil.example", token) == 4401
    assert _close_code(server, session.id, cookie, server.url) == 4401  # no token
    # Past authentication: this server's sandboxes (unsafe_local) have no terminals.
    assert _close_code(server, session.id, cookie, server.url, token) == 4503
    assert token not in server.log_text()  # the query is cut from the WebSocket's log line


def test_the_console_pages_and_packages_are_served(server: ServerProcess) -> None:
    page = httpx2.get(
        f"{server.url}/console", follow_redirects=True, timeout=30, verify=client_tls()
    )
    assert page.status_code == 200 and "/console/static/app.js" in page.text
    assert "frame-ancestors 'none'" in page.headers["content-security-policy"]
    for name in ("xterm.js", "xterm.css", "addon-fit.js"):
        packaged = httpx2.get(
            f"{server.url}/console/vendor/{name}", timeout=30, verify=client_tls()
        )
        assert packaged.status_code == 200, f"{name}: run ./scripts/setup (npm ci)"
        assert len(packaged.content) > 1000
    assert (
        httpx2.get(
            f"{server.url}/console/vendor/package.json", timeout=30, verify=client_tls()
        ).status_code
        == 404
    )
    script = httpx2.get(f"{server.url}/console/static/app.js", timeout=30, verify=client_tls())
    assert script.status_code == 200 and "javascript" in script.headers["content-type"]
    assert script.headers["x-frame-options"] == "DENY"
    # The page only at /console/, with its headers: served among its files it
    # came without them, and another port of this host could frame it.
    for path in ("/console/static/index.html", "/console/static/./index.html"):
        page_copy = httpx2.get(f"{server.url}{path}", timeout=30, verify=client_tls())
        assert page_copy.status_code == 404, path


def test_the_key_reaches_no_log(server: ServerProcess) -> None:
    key = server.create_key()  # the first key is printed at start, by design
    with httpx2.Client(verify=client_tls(), base_url=server.url, timeout=30.0) as http:
        login = http.post("/console/login", json={"api_key": key}, headers=CONSOLE)
        console = {"x-stead-console": login.json()["console_token"]}
        assert http.get("/v1/sessions", headers=console).status_code == 200
        last = http.post("/console/logout", headers=console)
    assert logged(server, lambda line: line.get("request_id") == last.headers["request-id"])
    assert key not in server.log_text()
    assert login.json()["console_token"] not in server.log_text()


@pytest.mark.parametrize(
    "path", ["/console/static/app.js", "/console/static/console.css", "/console/vendor/xterm.js"]
)
def test_the_console_s_files_are_asked_for_again_so_an_upgrade_shows_at_once(
    server: ServerProcess, path: str
) -> None:
    """Without a Cache-Control a browser kept the scripts unasked for days (a
    heuristic of their age): after an upgrade the new page ran the old ones.
    Asked for again, an unchanged file costs a 304."""
    first = httpx2.get(f"{server.url}{path}", timeout=30, verify=client_tls())
    assert first.status_code == 200
    assert first.headers["cache-control"] == "no-cache"
    again = httpx2.get(
        f"{server.url}{path}",
        headers={"if-none-match": first.headers["etag"]},
        timeout=30,
        verify=client_tls(),
    )
    assert again.status_code == 304 and not again.content
    assert again.headers["cache-control"] == "no-cache"
