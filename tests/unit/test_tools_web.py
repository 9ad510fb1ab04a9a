"""web_fetch and web_search run by ``run_web_tool`` against loopback origins:
what the model sees for pages, text, PDFs and search results, and every way a
call is refused or fails (each an ``is_error`` result, never an exception)."""

from __future__ import annotations

import base64
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import trustme

from stead.egress_policy import upstream_context
from stead.sandbox import PLACEHOLDER_PREFIX, EnvironmentCredential
from stead.tools import CredentialGuard, ToolOutcome, WebOptions, run_web_tool
from tests.web_origins import Reply, WebOrigin, html, searxng, web_origin

pytestmark = pytest.mark.anyio
Json = dict[str, Any]
PINNED = {"page.test": "127.0.0.1", "other.test": "127.0.0.1", "secure.test": "127.0.0.1"}
FETCH: Json = {"name": "web_fetch"}
SEARCH: Json = {"name": "web_search"}
SECRET = "s3cr3t-value-of-the-token"

ARTICLE = html(
    """
    <script>alert("never shown")</script><style>p { color: red }</style>
    <nav><a href="/home">Home</a></nav>
    <h1>Main   title</h1>
    <p>First paragraph with <a href="/next?page=2#frag">a link</a>.</p>
    <ul><li>one</li><li>two</li></ul>
    <pre>keep   this
  indented</pre>
    """,
    title="The Article",
)


@pytest.fixture(scope="module")
def ca() -> trustme.CA:
    return trustme.CA()


@pytest.fixture(scope="module")
def ca_file(ca: trustme.CA, tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("ca") / "ca.pem"
    ca.cert_pem.write_to_path(str(path))
    return path


@pytest.fixture(scope="module")
def origin() -> Iterator[WebOrigin]:
    routes = {
        "/article": ARTICLE,
        "/notes.txt": Reply(body=b"plain words\n"),
        "/data.json": Reply(body=b'{"a": 1}', content_type="application/json"),
        "/paper.pdf": Reply(body=b"%PDF-1.4 tiny", content_type="application/pdf"),
        "/photo.png": Reply(body=b"\x89PNG\r\n\x1a\n\x00", content_type="image/png"),
        "/untyped": Reply(body=b"just text", content_type=None),
        "/big": Reply(body=b"x" * 5000),
        "/big.pdf": Reply(body=b"%PDF-" + b"0" * 5000, content_type="application/pdf"),
        "/latin1": Reply(
            body="caf\xe9".encode("latin-1"), content_type="text/plain; charset=latin-1"
        ),
        "/gone": Reply(404, b"no such page"),
        "/stall": Reply(stall=True),
        "/to-article": Reply(302, headers={"Location": "/article"}),
        "/to-other": lambda seen: Reply(
            301, headers={"Location": f"http://other.test:{seen.host.split(':')[1]}/notes.txt"}
        ),
        "/loop": Reply(302, headers={"Location": "/loop"}),
        "/secret": Reply(body=f"the token is {SECRET}".encode()),
        "/base64-charset": Reply(
            body=b"<p>caf\xc3\xa9</p>", content_type="text/html; charset=base64"
        ),
        "/idna-meta": Reply(
            body=b'<html><head><meta charset="idna"></head><body>caf\xc3\xa9</body></html>',
            content_type="text/html",
        ),
        "/nested": html("<div>" * 20_000 + "deep" + "</div>" * 20_000),
    }
    with web_origin(routes) as served:
        yield served


def options(ca_file: Path | None = None, **given: Any) -> WebOptions:
    defaults: Json = {
        "timeout": 5.0,
        "max_bytes": 4096,
        "tls": upstream_context(ca_file),
        "pinned": PINNED,
    }
    return WebOptions(**(defaults | given))


async def fetch(
    url: str, config: Json = FETCH, guard: CredentialGuard | None = None, **given: Any
) -> ToolOutcome:
    return await run_web_tool(
        "web_fetch", {"url": url}, config, options(**given), guard or CredentialGuard()
    )


def text(outcome: ToolOutcome) -> str:
    return "\n".join(b["text"] for b in outcome.content if b["type"] == "text")


async def test_html_becomes_readable_text_with_absolute_links(origin: WebOrigin) -> None:
    outcome = await fetch(f"http://page.test:{origin.port}/article")
    assert not outcome.is_error
    page = text(outcome)
    base = f"http://page.test:{origin.port}"
    assert page.startswith(f"URL: {base}/article\nTitle: The Article\nContent-Type: text/html")
    assert "alert" not in page and "color" not in page
    assert "# Main title" in page
    assert f"First paragraph with [a link]({base}/next?page=2#frag)." in page
    assert "- one\n- two" in page
    assert "keep   this\n  indented" in page
    assert origin.seen[-1].host == f"page.test:{origin.port}"


@pytest.mark.parametrize(
    ("path", "shown"),
    [
        ("/notes.txt", "plain words"),
        ("/data.json", '{"a": 1}'),
        ("/untyped", "just text"),
        ("/latin1", "café"),
    ],
)
async def test_text_comes_back_as_it_is(origin: WebOrigin, path: str, shown: str) -> None:
    outcome = await fetch(f"http://page.test:{origin.port}{path}")
    assert not outcome.is_error and text(outcome).endswith(f"\n\n{shown}")


async def test_a_pdf_is_a_document_block(origin: WebOrigin) -> None:
    outcome = await fetch(f"http://page.test:{origin.port}/paper.pdf")
    assert not outcome.is_error
    document = outcome.content[1]
    assert document["type"] == "document"
    assert base64.b64decode(document["source"]["data"]) == b"%PDF-1.4 tiny"


async def test_other_binary_types_are_a_clear_error(origin: WebOrigin) -> None:
    outcome = await fetch(f"http://page.test:{origin.port}/photo.png")
    assert outcome.is_error and "is image/png, which web_fetch cannot read" in text(outcome)


async def test_a_body_over_the_byte_limit_is_cut_and_says_so(origin: WebOrigin) -> None:
    outcome = await fetch(f"http://page.test:{origin.port}/big", max_bytes=1000)
    assert not outcome.is_error
    page = text(outcome)
    assert "x" * 1000 in page and "x" * 1001 not in page
    assert "[the body is longer than 1000 bytes; only that much was read]" in page
    pdf = await fetch(f"http://page.test:{origin.port}/big.pdf", max_bytes=1000)
    assert pdf.is_error and "a PDF over 1000 bytes" in text(pdf)


async def test_max_content_tokens_caps_the_text(origin: WebOrigin) -> None:
    config = {**FETCH, "max_content_tokens": 100}
    page = text(await fetch(f"http://page.test:{origin.port}/big", config, max_bytes=10_000))
    assert "x" * 400 in page and "x" * 401 not in page
    assert "[content cut at about 100 tokens (400 of 5000 characters)]" in page


async def test_redirects_are_followed_and_shown(origin: WebOrigin) -> None:
    outcome = await fetch(f"http://page.test:{origin.port}/to-article")
    page = text(outcome)
    assert page.startswith(f"URL: http://page.test:{origin.port}/article\nRedirected from: ")
    assert "# Main title" in page


async def test_each_redirect_is_checked_against_the_domain_lists(origin: WebOrigin) -> None:
    config = {**FETCH, "blocked_domains": ["other.test"]}
    before = len(origin.seen)
    outcome = await fetch(f"http://page.test:{origin.port}/to-other", config)
    assert outcome.is_error
    assert "egress to other.test denied: in the web_fetch tool's blocked_domains" in text(outcome)
    assert [seen.path for seen in origin.seen[before:]] == ["/to-other"]


async def test_a_redirect_loop_ends(origin: WebOrigin) -> None:
    outcome = await fetch(f"http://page.test:{origin.port}/loop")
    assert outcome.is_error and "more than 10 redirects" in text(outcome)


async def test_allowed_domains_refuse_every_other_host(origin: WebOrigin) -> None:
    config = {**FETCH, "allowed_domains": ["other.test"]}
    outcome = await fetch(f"http://page.test:{origin.port}/article", config)
    assert outcome.is_error and "not in the web_fetch tool's allowed_domains" in text(outcome)


async def test_a_private_address_is_refused_unless_listed_literally(origin: WebOrigin) -> None:
    url = f"http://127.0.0.1:{origin.port}/notes.txt"
    refused = await fetch(url)
    assert refused.is_error
    assert "egress to 127.0.0.1 denied: address 127.0.0.1 is blocked (loopback)" in text(refused)
    allowed = await fetch(url, {**FETCH, "allowed_domains": ["127.0.0.1"]})
    assert not allowed.is_error and "plain words" in text(allowed)


async def test_a_name_resolving_to_a_private_address_is_refused(origin: WebOrigin) -> None:
    async def resolver(host: str, port: int) -> list[str]:
        return ["127.0.0.1"]

    outcome = await fetch(f"http://sneaky.test:{origin.port}/notes.txt", resolver=resolver)
    assert outcome.is_error and "address 127.0.0.1 is blocked (loopback)" in text(outcome)


async def test_the_name_is_resolved_once_and_the_checked_address_is_dialled(
    origin: WebOrigin,
) -> None:
    """No second lookup can rebind the name: this resolver answers only once,
    and the machine's does not know ``rebind.test``, so only a connection to
    the address checked at the first answer can succeed."""
    asked: list[str] = []

    async def resolver(host: str, port: int) -> list[str]:
        asked.append(host)
        if len(asked) > 1:
            raise OSError("asked again")
        return ["127.0.0.1"]

    config = {**FETCH, "allowed_domains": ["rebind.test"]}
    url = f"http://rebind.test:{origin.port}/notes.txt"
    outcome = await fetch(url, config, resolver=resolver, pinned={})
    assert not outcome.is_error, text(outcome)
    assert asked == ["rebind.test"]
    assert origin.seen[-1].host == f"rebind.test:{origin.port}"


async def test_a_name_that_does_not_resolve_is_an_error(origin: WebOrigin) -> None:
    async def resolver(host: str, port: int) -> list[str]:
        raise OSError("NXDOMAIN")

    outcome = await fetch("http://nowhere.test/", resolver=resolver)
    assert outcome.is_error and "nowhere.test: cannot resolve the host" in text(outcome)


async def test_http_errors_and_timeouts_are_tool_errors(origin: WebOrigin) -> None:
    gone = await fetch(f"http://page.test:{origin.port}/gone")
    assert gone.is_error and "answered HTTP 404 Not Found" in text(gone)
    stalled = await fetch(f"http://page.test:{origin.port}/stall", timeout=0.3)
    assert stalled.is_error and "no complete answer within 0.3 s" in text(stalled)


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("ftp://page.test/x", "is not an absolute http:// or https:// URL"),
        ("page.test/x", "is not an absolute http:// or https:// URL"),
        ("http://user:pw@page.test/", "a URL with a user name or password is not fetched"),
        ("http://[::1", "is not a valid URL"),
    ],
)
async def test_urls_web_fetch_does_not_take(url: str, message: str) -> None:
    outcome = await fetch(url)
    assert outcome.is_error and message in text(outcome)


async def test_https_is_verified_for_the_name_though_sent_to_the_address(
    ca: trustme.CA, ca_file: Path
) -> None:
    with web_origin({"/": html("<p>secure hello</p>")}, ca=ca, names=("secure.test",)) as tls:
        secure = await fetch(f"https://secure.test:{tls.port}/", ca_file=ca_file)
        assert not secure.is_error and "secure hello" in text(secure)
        assert tls.seen[-1].host == f"secure.test:{tls.port}"
        # Same address, another name: the certificate does not name it.
        wrong = await fetch(f"https://page.test:{tls.port}/", ca_file=ca_file)
        assert wrong.is_error and "CERTIFICATE_VERIFY_FAILED" in text(wrong)
        untrusted = await fetch(f"https://secure.test:{tls.port}/")
        assert untrusted.is_error and "CERTIFICATE_VERIFY_FAILED" in text(untrusted)


def credential(allowed_hosts: tuple[str, ...] | None) -> EnvironmentCredential:
    return EnvironmentCredential("cred_1", "TOKEN", SECRET, allowed_hosts=allowed_hosts)


async def test_a_credential_value_goes_only_where_its_networking_allows(
    origin: WebOrigin,
) -> None:
    url = f"http://page.test:{origin.port}/notes.txt?token={SECRET}"
    refused = await fetch(url, guard=CredentialGuard([credential(("api.example.com",))]))
    assert refused.is_error
    assert "holds the value of vault credential cred_1, which may not be sent to page.test" in (
        text(refused)
    )
    assert SECRET not in text(refused)
    allowed = await fetch(url, guard=CredentialGuard([credential(("*.test",))]))
    assert not allowed.is_error


async def test_placeholders_are_refused_not_substituted(origin: WebOrigin) -> None:
    placeholder = PLACEHOLDER_PREFIX + "ab" * 20
    outcome = await fetch(f"http://page.test:{origin.port}/notes.txt?t={placeholder}")
    assert outcome.is_error and "Web tools do not substitute credentials" in text(outcome)
    assert not any(placeholder in str(seen.query) for seen in origin.seen)


async def test_credential_values_are_scrubbed_from_what_the_model_sees(origin: WebOrigin) -> None:
    outcome = await fetch(
        f"http://page.test:{origin.port}/secret", guard=CredentialGuard([credential(None)])
    )
    assert text(outcome).endswith("the token is [value of credential cred_1]")


# --- web_search -----------------------------------------------------------------------

RESULTS = [
    {"url": "https://docs.example.com/a", "title": "Docs A", "content": "About  A"},
    {"url": "https://ads.example.com/b", "title": "Ad B", "content": "Buy"},
    {"url": "javascript:alert(1)", "title": "Bad", "content": ""},
]


async def search(query: str, config: Json = SEARCH, **given: Any) -> ToolOutcome:
    return await run_web_tool(
        "web_search", {"query": query}, config, options(**given), CredentialGuard()
    )


@pytest.mark.parametrize("path", ["/base64-charset", "/idna-meta"])
async def test_a_charset_that_is_no_text_encoding_reads_as_utf_8(
    origin: WebOrigin, path: str
) -> None:
    """base64, zlib and the like turn bytes into bytes, and idna refuses
    errors="replace": before, decoding raised past the tool and failed the turn."""
    outcome = await fetch(f"http://page.test:{origin.port}{path}")
    assert not outcome.is_error and "café" in text(outcome)


async def test_a_page_of_many_nested_blocks_is_read_in_linear_time(origin: WebOrigin) -> None:
    """20,000 nested divs took 42 s of the event loop (every break rescanned the
    text so far); the tool's own time limit of 5 s here would not have ended it."""
    outcome = await fetch(f"http://page.test:{origin.port}/nested", max_bytes=1_000_000)
    assert not outcome.is_error and "deep" in text(outcome)


async def test_web_search_without_a_provider_says_how_to_set_one() -> None:
    outcome = await search("stead")
    assert outcome.is_error
    assert "web_search is not configured on this stead" in text(outcome)
    assert "STEAD_WEB_SEARCH_URL" in text(outcome)


async def test_web_search_lists_results_within_the_domain_lists() -> None:
    with web_origin({"/search": searxng(RESULTS)}) as provider:
        url = f"http://127.0.0.1:{provider.port}"
        found = text(await search("what is stead", search_url=url))
        assert provider.seen[-1].query["q"] == ["what is stead"]
        assert found.startswith("Search results:\n\n1. Docs A\n   https://docs.example.com/a")
        assert "About A" in found and "2. Ad B" in found and "javascript" not in found
        config = {**SEARCH, "blocked_domains": ["ads.example.com"]}
        narrowed = text(await search("what is stead", config, search_url=url))
        assert "Ad B" not in narrowed
        assert "[1 results left out by the tool's allowed or blocked domains]" in narrowed


async def test_malformed_results_are_left_out_or_named() -> None:
    """Engines pass on what they find: a URL that does not parse is left out;
    results that are not a list are the provider's error, not the turn's."""
    odd = [{"url": "http://[zz/x", "title": "Odd"}, {"url": "https://ok.example/", "title": "Ok"}]
    with web_origin({"/search": searxng(odd)}) as provider:
        found = text(await search("q", search_url=f"http://127.0.0.1:{provider.port}"))
        assert "Ok" in found and "Odd" not in found
    body = b'{"query": "q", "results": 5}'
    answer = Reply(body=body, content_type="application/json")
    with web_origin({"/search": answer}) as provider:
        outcome = await search("q", search_url=f"http://127.0.0.1:{provider.port}")
        assert outcome.is_error and "results are not a list" in text(outcome)


async def test_a_provider_that_refuses_json_is_named() -> None:
    with web_origin({"/search": Reply(403, b"forbidden")}) as provider:
        outcome = await search("q", search_url=f"http://127.0.0.1:{provider.port}/")
        assert outcome.is_error and "its json format is not enabled" in text(outcome)
    with web_origin({"/search": Reply(stall=True)}) as provider:
        slow = await search("q", search_url=f"http://127.0.0.1:{provider.port}", timeout=0.3)
        assert slow.is_error and "did not answer within 0.3 s" in text(slow)
