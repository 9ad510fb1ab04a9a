"""Credentials through TLS-terminating egress, end to end (DESIGN rule 8): real
bwrap sandboxes reach loopback HTTPS servers (certificates from a test CA,
trusted through STEAD_EGRESS_EXTRA_CA_FILE) named through STEAD_EGRESS_HOSTS,
with curl, Python and Node. The servers see the real secret; the sandbox, its
files, its processes' environments and every tool output hold only the
placeholder."""

from __future__ import annotations

import json
import shutil
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import trustme

from stead.sandbox import EgressCredential, EnvironmentCredential, HostAddress, HostSandbox
from stead.sandbox.providers.host import HostProvider
from stead.testing import HostProcess, ServeForker
from tests.sandbox.conftest import config, files_holding, held_in, new_id, requires_isolation
from tests.sandbox.https_origins import Origin, https_origin

pytestmark = [pytest.mark.anyio, requires_isolation]

NAMES = ("api.test", "other.test", "untrusted.test", "blocked.test")
ALLOWED = ["api.test", "other.test", "untrusted.test"]


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, Origin, Origin]]:
    """A trusted server for api.test and other.test, one whose CA nobody trusts,
    and the trusted CA's bundle."""
    trusted, stranger = trustme.CA(), trustme.CA()
    bundle = tmp_path_factory.mktemp("ca") / "extra-ca.pem"
    trusted.cert_pem.write_to_path(str(bundle))
    with (
        https_origin(trusted, ("api.test", "other.test", "blocked.test")) as good,
        https_origin(stranger, ("untrusted.test",)) as bad,
    ):
        yield bundle, good, bad


def _host_env(bundle: Path) -> dict[str, str]:
    return {
        "STEAD_EGRESS_HOSTS": json.dumps(dict.fromkeys(NAMES, "127.0.0.1")),
        "STEAD_EGRESS_EXTRA_CA_FILE": str(bundle),
        "STEAD_LOG_LEVEL": "debug",
    }


def _networking() -> dict[str, object]:
    return {
        "type": "limited",
        "allowed_hosts": ALLOWED,
        "allow_mcp_servers": False,
        "allow_package_managers": False,
    }


NODE = r"""
const http = require('http'), https = require('https');
const [host, port] = process.argv.slice(1);
const proxy = new URL(process.env.HTTPS_PROXY);
// Node 20's fetch ignores HTTPS_PROXY: open the tunnel by hand, then TLS over it.
http.request({host: proxy.hostname, port: proxy.port, method: 'CONNECT',
              path: `${host}:${port}`, headers: {host: `${host}:${port}`}})
  .on('connect', (res, socket) => {
    https.get({host, port, path: '/node', socket, servername: host, agent: false,
               headers: {authorization: `Bearer ${process.env.API_TOKEN}`}}, (r) => {
      let body = ''; r.on('data', (d) => body += d);
      r.on('end', () => console.log(r.statusCode, body));
    }).on('error', (e) => console.log('error', e.message));
  }).end();
"""

PYTHON = (
    "import os, urllib.request as u, sys; t = os.environ['API_TOKEN']; "
    "r = u.Request(sys.argv[1], data=('token=' + t).encode(), "
    "headers={'Authorization': 'Bearer ' + t}); "
    "print(u.urlopen(r, timeout=20).read().decode())"
)


def _quoted(text: str) -> str:
    return "'" + text.replace("'", "'\\''") + "'"


async def test_clients_in_the_sandbox_reach_https_with_the_secret_they_never_see(
    tmp_path: Path, servers: tuple[Path, Origin, Origin], forker: ServeForker
) -> None:
    bundle, good, bad = servers
    made = time.time()
    secret = f"dummy-secret-{uuid.uuid4().hex}"
    static = f"static-secret-{uuid.uuid4().hex}"
    process = HostProcess(tmp_path / "state", env=_host_env(bundle), forker=forker).start()
    provider = HostProvider(HostAddress(unix_path=process.socket_path))
    sandbox_id = new_id()
    wanted = config(networking=_networking())
    api = f"https://api.test:{good.port}"
    outputs: list[str] = []

    async def run(command: str) -> str:
        result = await sandbox.exec(command, op_key=new_id(), timeout=60)
        outputs.append(result.output)
        return result.output

    try:
        sandbox = await provider.acquire(sandbox_id, wanted)
        assert isinstance(sandbox, HostSandbox)
        await provider.set_secrets(
            sandbox_id,
            wanted,
            [
                EnvironmentCredential("vcrd_env", "API_TOKEN", secret, ("api.test",)),
                EgressCredential(
                    "api.test", "X-Static", static, credential_id="vcrd_static", port=good.port
                ),
            ],
        )
        placeholder = (await run("echo $API_TOKEN")).strip()
        assert placeholder.startswith("stead_placeholder_") and secret not in placeholder

        # curl, Python's urllib and Node's https all trust the egress CA.
        assert await run(f'curl -sS -H "Authorization: Bearer $API_TOKEN" {api}/curl') == "ok"
        assert (await run(f"python3 -c {_quoted(PYTHON)} {api}/python")).strip() == "ok"
        by_path = {seen["path"]: seen for seen in good.seen}
        assert by_path["/curl"]["authorization"] == f"Bearer {secret}"
        assert by_path["/python"]["authorization"] == f"Bearer {secret}"
        assert by_path["/python"]["body"] == f"token={secret}"  # injected in the body too
        if shutil.which("node"):
            node = await run(f"node -e {_quoted(NODE)} api.test {good.port}")
            assert node.strip() == "200 ok"
            assert good.seen[-1]["authorization"] == f"Bearer {secret}"

        # The placeholder for api.test is never replaced on its way to other.test.
        before = len(good.seen)
        refused = await run(
            f'curl -sS -w " %{{http_code}}" -H "Authorization: Bearer $API_TOKEN" '
            f"https://other.test:{good.port}/"
        )
        assert "not replaced" in refused and refused.endswith(" 403")
        assert len(good.seen) == before

        # A host the environment does not allow, and an origin nobody trusts.
        blocked = await run(f"curl -sS -w ' %{{http_connect}}' https://blocked.test:{good.port}/")
        assert blocked.rstrip().endswith("403")
        untrusted = await run(f"curl -sS -w ' %{{http_code}}' https://untrusted.test:{bad.port}/")
        assert "certificate is not trusted" in untrusted and untrusted.endswith(" 502")
        assert bad.seen == []

        # Inside, nothing holds the secrets: environments, /proc, any file.
        half = len(secret) // 2
        search = await run(
            f"a={secret[:half]}; b={secret[half:]}; c={static[:half]}; d={static[half:]}; "
            "env; cat /proc/*/environ | tr '\\0' '\\n'; "
            + files_holding('-e "$a$b" -e "$c$d"', since=made)
        )
        assert held_in(search) == []
        assert placeholder in search

        # Every tool finds the bundle, and the system bundle path holds the CA too.
        ca = (process.state_dir / "egress-ca" / "ca.pem").read_text().strip()
        seen = await run("echo $SSL_CERT_FILE $NODE_EXTRA_CA_CERTS $PIP_CERT $GIT_SSL_CAINFO")
        assert seen.split() == ["/run/stead/ca/bundle.pem"] * 4
        assert ca in await run("cat /etc/ssl/certs/ca-certificates.crt")

        audit = await sandbox.egress_audit()
        to_api = [e for e in audit.entries if e.host == "api.test"]
        assert {e.status for e in to_api} == {200}
        assert all(e.credential_ids == ["vcrd_env", "vcrd_static"] for e in to_api)
        assert all(e.bytes_out > 0 and e.bytes_in > 0 for e in to_api)
        statuses = {e.host: e.status for e in audit.entries}
        assert statuses["other.test"] == 403 and statuses["untrusted.test"] == 502
        assert statuses["blocked.test"] == 403
        outputs.append(audit.model_dump_json())
        assert not [o for o in outputs if secret in o or static in o]

        # A restarted host gets the credentials again; the placeholder stays.
        process.kill()
        assert secret not in process.log_text()
        env = _host_env(bundle)
        process = HostProcess(
            tmp_path / "state", work_dir=process.work_dir, env=env, forker=forker
        ).start()
        assert (await run("echo $API_TOKEN")).strip() == placeholder
        assert await run(f'curl -sS -H "Authorization: Bearer $API_TOKEN" {api}/again') == "ok"
        assert good.seen[-1]["authorization"] == f"Bearer {secret}"
        assert not [o for o in outputs if secret in o or static in o]
        await provider.release(sandbox_id)
    finally:
        await provider.aclose()
        process.stop()
    log = process.log_text()
    assert secret not in log and static not in log
