"""Where a credential the egress proxy injects may go, end to end: a real
sandbox host and bubblewrap sandbox whose curl reaches a loopback HTTPS origin
(a test CA trusted through STEAD_EGRESS_EXTRA_CA_FILE, names pinned through
STEAD_EGRESS_HOSTS). The origin echoes what it got back in the encodings
origins use, none of which may reach the sandbox, and reads request paths as
lenient servers do, so a repository's token must not reach a path that such a
server takes for another repository."""

from __future__ import annotations

import json
import posixpath
import socket
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import unquote

import pytest
import trustme

from stead.sandbox import (
    EgressCredential,
    EgressSecret,
    EnvironmentCredential,
    HostAddress,
    HostSandbox,
)
from stead.sandbox.providers.host import HostProvider
from stead.testing import HostProcess, ServeForker
from tests.sandbox.conftest import config, new_id, requires_isolation
from tests.unit.test_egress_scrub import REPOSITORY, VAULT, echoes, repository_value, secret_forms
from tests.web_origins import serving

pytestmark = [pytest.mark.anyio, requires_isolation]

API = "api.reach.test"


@dataclass
class Seen:
    port: int = 0
    ipv6_port: int = 0
    requests: list[dict[str, bytes]] = field(default_factory=list)


class Ipv6Server(ThreadingHTTPServer):
    address_family = socket.AF_INET6


def _handler(seen: Seen) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        """Records each request; ``/echo`` answers, in 7-byte chunks, each way
        of writing back the body's ``token=`` value and the Authorization header."""

        protocol_version = "HTTP/1.1"

        def _answer(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else b""
            authorization = self.headers.get("Authorization", "").encode("latin-1")
            seen.requests.append(
                {
                    "host": self.headers.get("Host", "").encode(),
                    "path": self.path.encode(),
                    "routed": routed(self.path).encode(),
                    "authorization": authorization,
                    "key": self.headers.get("X-Api-Key", "").encode(),
                    "body": body,
                }
            )
            answer = b""
            if self.path.endswith("/echo"):
                given = [body.removeprefix(b"token="), authorization]
                for value in filter(None, given):
                    lines = (b"%s: %s\n" % (n.encode(), e) for n, e in echoes(value).items())
                    answer += b"".join(lines)
            self.send_response(200)
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            for at in range(0, len(answer), 7):
                piece = answer[at : at + 7]
                self.wfile.write(b"%x\r\n%s\r\n" % (len(piece), piece))
                self.wfile.flush()
            self.wfile.write(b"0\r\n\r\n")

        do_GET = do_POST = _answer

        def log_message(self, *args: object) -> None:
            pass

    return Handler


def routed(target: str) -> str:
    """The path a lenient server serves for ``target``: ``;`` parameters dropped
    from each segment (Tomcat), ``\\`` a separator (IIS), escapes decoded, ``#``
    a character of the path, dot segments resolved."""
    path = unquote(target.partition("?")[0]).replace("\\", "/")
    segments = [segment.partition(";")[0] for segment in path.split("/")]
    return posixpath.normpath("/".join(segments))


@pytest.fixture(scope="module")
def origin(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Seen, Path]]:
    ca = trustme.CA()
    bundle = tmp_path_factory.mktemp("reach-ca") / "ca.pem"
    ca.cert_pem.write_to_path(str(bundle))
    seen = Seen()
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(seen))
    ipv6 = Ipv6Server(("::1", 0), _handler(seen))
    with serving(server, ca, (API,)) as port, serving(ipv6, ca, ("::1",)) as ipv6_port:
        seen.port, seen.ipv6_port = port, ipv6_port
        yield seen, bundle


@pytest.fixture(scope="module")
def host(
    origin: tuple[Seen, Path], tmp_path_factory: pytest.TempPathFactory, forker: ServeForker
) -> Iterator[HostProcess]:
    env = {
        "STEAD_EGRESS_HOSTS": json.dumps({API: "127.0.0.1"}),
        "STEAD_EGRESS_EXTRA_CA_FILE": str(origin[1]),
    }
    state = tmp_path_factory.mktemp("reach-host") / "state"
    started = HostProcess(state, env=env, forker=forker).start()
    yield started
    started.stop()
    log = started.log_text()
    assert VAULT.decode() not in log and REPOSITORY not in log


@dataclass
class Shell:
    sandbox: HostSandbox
    provider: HostProvider

    async def run(self, command: str) -> bytes:
        result = await self.sandbox.exec(command, op_key=new_id(), timeout=60)
        return result.output.encode()

    async def holding(self, secrets: list[EgressSecret]) -> None:
        wanted = self.sandbox.config
        await self.provider.set_secrets(self.sandbox.sandbox_id, wanted, secrets)


@pytest.fixture
async def sandbox(host: HostProcess) -> AsyncIterator[Shell]:
    provider = HostProvider(HostAddress(unix_path=host.socket_path))
    networking = {
        "type": "limited",
        "allowed_hosts": [API, "::1"],
        "allow_mcp_servers": False,
        "allow_package_managers": False,
    }
    sandbox_id = new_id()
    try:
        opened = await provider.acquire(sandbox_id, config(networking=networking))
        assert isinstance(opened, HostSandbox)
        yield Shell(opened, provider)
        await provider.release(sandbox_id)
    finally:
        await provider.aclose()


async def test_an_echoed_credential_reaches_the_sandbox_in_no_encoding(
    sandbox: Shell, origin: tuple[Seen, Path]
) -> None:
    """Before, only the literal value was scrubbed: the origin's JSON-escaped,
    percent-encoded and base64 echoes, and the token out of the Basic header,
    reached the sandbox as they were."""
    seen, _ = origin
    header = repository_value(REPOSITORY)
    await sandbox.holding(
        [
            EnvironmentCredential("vcrd_env", "API_TOKEN", VAULT.decode(), (API,), header=False),
            EgressCredential(
                API, "authorization", header.decode(), credential_id="res_repo", port=seen.port
            ),
        ]
    )
    got = await sandbox.run(
        f'curl -sS --data-binary "token=$API_TOKEN" https://{API}:{seen.port}/echo'
    )
    injected = seen.requests[-1]["body"] == b"token=" + VAULT
    injected &= seen.requests[-1]["authorization"] == header
    assert injected  # a failure names no value
    names = [*echoes(VAULT), *echoes(header)]
    assert [line.partition(b": ")[0].decode() for line in got.splitlines()] == names
    leaked = [f for f in (*secret_forms(VAULT), *secret_forms(header)) if f in got]
    assert leaked == []
    assert b"[res_repo hidden by stead]" in got


ELSEWHERE = [
    "/owner/repo/..;/other/secret",
    "/owner/repo/.;/..;/other/secret",
    "/owner/repo;/../other/secret",
    "/owner/repo/x\\..\\..\\other\\secret",
    "/owner/repo/x#/../../other/secret",
    "/owner/repo/%2e%2e/other/secret",
    "/owner/repo/x/..%2f..%2fother/secret",
    "/owner/repo/x%5c..%5c..%5cother/secret",
    "/owner/repo/;/../other/secret",
]
"""Targets under ``/owner/repo`` as written that a lenient server takes for
another repository's path."""


async def test_a_repository_token_reaches_no_path_a_server_reads_as_another(
    sandbox: Shell, origin: tuple[Seen, Path]
) -> None:
    """Before, a target with ``..;`` (Tomcat's path parameters), backslashes or a
    ``#`` got the token for ``/owner/repo``, and the server served
    ``/owner/other``."""
    seen, _ = origin
    header = repository_value(REPOSITORY)
    scope = ("/owner/repo", "/owner/repo.git")
    credential = EgressCredential(
        API, "authorization", header.decode(), "res_repo", scope, port=seen.port
    )
    await sandbox.holding([credential])
    base = f"https://{API}:{seen.port}"
    for target in ["/owner/repo/info/refs", *ELSEWHERE, "/owner/repo.git/x;p=1/info"]:
        quoted = "'" + target + "'"
        await sandbox.run(f"curl -sS --path-as-is --request-target {quoted} {base}/")
    got = {r["path"].decode(): r for r in seen.requests[-len(ELSEWHERE) - 2 :]}
    assert list(got) == ["/owner/repo/info/refs", *ELSEWHERE, "/owner/repo.git/x;p=1/info"]
    assert [got[t]["routed"] for t in ELSEWHERE] == [b"/owner/other/secret"] * len(ELSEWHERE)
    tokened = [target for target, request in got.items() if request["authorization"] == header]
    assert tokened == ["/owner/repo/info/refs", "/owner/repo.git/x;p=1/info"]


async def test_a_header_credential_reaches_its_host_however_the_host_is_spelled(
    sandbox: Shell, origin: tuple[Seen, Path]
) -> None:
    """A host's name with a trailing dot, as the credential or the request spells
    it, names that host; an IPv6 address, in brackets or not, that address.
    Before, a request to ``api.reach.test.`` was a 502: the proxy checked the
    origin's certificate against the name with its dot, which none holds."""
    seen, _ = origin
    credentials = [
        EgressCredential(API + ".", "x-api-key", "named-value", "named", port=seen.port),
        EgressCredential("[::1]", "x-api-key", "address-value", "address", port=seen.ipv6_port),
    ]
    await sandbox.holding(credentials)
    urls = [f"https://{API}.:{seen.port}/", f"https://{API}:{seen.port}/"]
    urls += [f"https://[::1]:{seen.ipv6_port}/", f"https://[0:0::1]:{seen.ipv6_port}/"]
    for url in urls:
        got = await sandbox.run(f"curl -sS -w ' %{{http_code}}' -H 'Host: other.test' {url}")
        assert got.endswith(b" 200"), got
    hosts = [(r["host"], r["key"]) for r in seen.requests[-len(urls) :]]
    assert hosts == [
        (f"{API}.:{seen.port}".encode(), b"named-value"),
        (f"{API}:{seen.port}".encode(), b"named-value"),
        (f"[::1]:{seen.ipv6_port}".encode(), b"address-value"),
        (f"[::1]:{seen.ipv6_port}".encode(), b"address-value"),  # curl writes [::1]
    ]  # Host: the authority of the CONNECT, never the one the sandbox sent inside
