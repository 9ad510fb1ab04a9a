"""``github_repository`` session resources through the official SDK against a
real ``stead serve``, a real sandbox host (bubblewrap) and a git smart-HTTP
server over HTTPS on loopback that requires the token: repositories are cloned
at a branch, at a commit and at the default branch through the egress proxy,
which injects the token; clones that cannot be made are ``session.error``s of
the spec's repository types; the token is readable nowhere in the sandbox, the
event log, the store or the logs; a rotated token is used by the next fetch
and a deleted resource's token by none. One session serves the whole story."""

from __future__ import annotations

import base64
import io
import json
import shutil
import subprocess
import threading
import time
import uuid
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import anthropic
import pytest
import trustme

from stead.testing import FakeModel, HostProcess, ServeForker, ServerProcess
from tests.conftest import sdk_of
from tests.integration.helpers import message, wait_idle
from tests.sandbox.conftest import (
    WAIT,
    bash_turn,
    requires_isolation,
    shell,
    sweepless_server,
    workspace_on_host,
)
from tests.sandbox.git_origin import GitOrigin, basic, git_origin, make_repository
from tests.web_origins import serving

pytestmark = requires_isolation

GIT_HOST = "git.repo.test"
TOKEN = f"ghp_first{uuid.uuid4().hex}"
NEW_TOKEN = f"ghp_second{uuid.uuid4().hex}"


@pytest.fixture(scope="module")
def origin(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[GitOrigin, Path, dict[str, str]]]:
    ca = trustme.CA()
    root = tmp_path_factory.mktemp("git")
    bundle = root / "ca.pem"
    ca.cert_pem.write_to_path(str(bundle))
    commits = make_repository(root / "repos", "project.git")
    for copy in (
        "feature.git",
        "pinned.git",
        "branchless.git",
        "slow.git",
        "added.git",
    ):  # paths of their own
        shutil.copytree(root / "repos" / "project.git", root / "repos" / copy)
    with git_origin(ca, GIT_HOST, root / "repos", TOKEN) as served:
        yield served, bundle, commits


@pytest.fixture(scope="module")
def host(
    origin: tuple[GitOrigin, Path, dict[str, str]],
    tmp_path_factory: pytest.TempPathFactory,
    forker: ServeForker,
) -> Iterator[HostProcess]:
    env = {
        "STEAD_EGRESS_HOSTS": json.dumps({GIT_HOST: "127.0.0.1"}),
        "STEAD_EGRESS_EXTRA_CA_FILE": str(origin[1]),
    }
    started = HostProcess(
        tmp_path_factory.mktemp("repo-host") / "state", env=env, forker=forker
    ).start()
    yield started
    started.stop()


@pytest.fixture(scope="module")
def server(
    host: HostProcess, tmp_path_factory: pytest.TempPathFactory, forker: ServeForker
) -> Iterator[ServerProcess]:
    data = tmp_path_factory.mktemp("repo-serve") / "data"
    with FakeModel(shell) as fake, sweepless_server(host, fake, data, forker) as started:
        yield started


FETCH = "git -C /workspace/project fetch -q origin; echo rc=$?"
MATCH = '-e "$T" -e "$B"'
LOOK = "; ".join(
    [
        'echo "feat=$(git -C /workspace/feat rev-parse HEAD)"',
        'echo "old=$(git -C /workspace/old rev-parse HEAD)"',
        'echo "readme=$(cat /workspace/project/README)"',
        'echo "branch=$(git -C /workspace/project rev-parse --abbrev-ref HEAD)"',
        'echo "ls=$(ls -A /workspace | tr "\\n" " ")"',
        f'T={TOKEN[:8]!r}{TOKEN[8:]!r}; B=$(printf "x-access-token:%s" "$T" | base64 -w0)',
        f'echo "env=$(cat /proc/[0-9]*/environ | tr "\\0" "\\n" | grep -c {MATCH})"',
        f'echo "config=$(git -C /workspace/project config --list | grep -c {MATCH})"',
        f'echo "files=$(grep -rlI {MATCH} /workspace /tmp /mnt /etc /home 2>/dev/null)"',
    ]
)
"""What the sandbox shows of the clones, and where it holds the token (in its
processes' environments, the clone's git config, its files): the command
builds the token from two halves, so the event log never holds it."""


def _session(client: anthropic.Anthropic, resources: list[dict[str, Any]]) -> str:
    """A new session with ``resources``, in an environment that may reach ``GIT_HOST``."""
    agent = client.beta.agents.create(
        name="repo", model="claude-sonnet-4-6", tools=[{"type": "agent_toolset_20260401"}]
    )
    environment = client.beta.environments.create(
        name=f"repo-{uuid.uuid4().hex[:8]}",
        config={"type": "cloud", "networking": {"type": "limited", "allowed_hosts": [GIT_HOST]}},
    )
    return client.beta.sessions.create(
        agent=agent.id,
        environment_id=environment.id,
        resources=resources,  # type: ignore[arg-type]
    ).id


def _values(output: str) -> dict[str, str]:
    """``name=value`` lines as a mapping."""
    return dict(line.split("=", 1) for line in output.splitlines() if "=" in line)


def test_repositories_are_cloned_through_the_proxy_and_the_token_stays_out(
    server: ServerProcess, host: HostProcess, origin: tuple[GitOrigin, Path, dict[str, str]]
) -> None:
    served, _, commits = origin
    served.accepted = {TOKEN}
    base = f"https://{GIT_HOST}:{served.port}"
    url = f"{base}/project.git"
    with sdk_of(server) as client:
        repos = [
            {
                "url": f"{base}/feature.git",
                "checkout": {"type": "branch", "name": "feature"},
                "mount_path": "/workspace/feat",
            },
            {
                "url": f"{base}/pinned.git",
                "checkout": {"type": "commit", "sha": commits["one"]},
                "mount_path": "/workspace/old",
            },
            {"url": url},
            {
                "url": f"{base}/missing.git",
                "mount_path": "/workspace/gone",
            },
            {
                "url": f"{base}/branchless.git",
                "checkout": {"type": "branch", "name": "no-such"},
                "mount_path": "/workspace/nb",
            },
        ]
        given = [{"type": "github_repository", "authorization_token": TOKEN, **r} for r in repos]
        file_id = client.beta.files.upload(file=("a.txt", io.BytesIO(b"a"), "text/plain")).id
        given.insert(1, {"type": "file", "file_id": file_id})
        session = client.beta.sessions.retrieve(_session(client, given))
        assert TOKEN not in session.model_dump_json()
        made = {r.mount_path: r for r in session.resources}
        assert list(made) == [  # in the order given
            "/workspace/feat",
            f"/mnt/session/uploads/{file_id}",
            "/workspace/old",
            "/workspace/project",
            "/workspace/gone",
            "/workspace/nb",
        ]
        attached = made[f"/mnt/session/uploads/{file_id}"]
        default = made["/workspace/project"]
        assert default.type == "github_repository" and default.checkout is None

        seen = _values(bash_turn(client, session.id, LOOK))
        assert seen["feat"] == commits["three"] and seen["old"] == commits["one"], seen
        assert (seen["readme"], seen["branch"]) == ("two", "main"), seen
        assert sorted(seen["ls"].split()) == ["feat", "old", "project"], seen
        assert (seen["env"], seen["config"], seen["files"]) == ("0", "0", ""), seen

        errors = {
            e.error.repository_url: e.error  # type: ignore[union-attr]
            for e in client.beta.sessions.events.list(session.id, limit=1000)
            if e.type == "session.error"
        }
        missing = f"{base}/missing.git"
        assert errors[missing].type == "repository_not_found_error", errors
        assert errors[missing].retry_status.type == "retrying"
        branchless = errors[f"{base}/branchless.git"]
        assert branchless.type == "repository_checkout_error", errors
        assert "/workspace/nb" in branchless.message and len(errors) == 2
        assert all(a == basic(TOKEN) for _, a, _ in served.seen), "every request carried the token"

        # Rotation: the origin stops taking the first token; the next fetch uses the new one.
        served.accepted = {NEW_TOKEN}
        refused = bash_turn(client, session.id, FETCH)
        assert "rc=0" not in refused and served.seen[-1][1:] == (basic(TOKEN), 401), refused
        updated = client.beta.sessions.resources.update(
            default.id, session_id=session.id, authorization_token=NEW_TOKEN
        )
        assert updated.id == default.id and NEW_TOKEN not in updated.model_dump_json()
        fetched = bash_turn(client, session.id, FETCH)
        assert "rc=0" in fetched and served.seen[-1][1:] == (basic(NEW_TOKEN), 200), fetched

        # Delete: the token is no longer injected; the checkout stays. A repository
        # added in create's shape is cloned at the next turn.
        client.beta.sessions.resources.delete(default.id, session_id=session.id)
        added = client.post(
            f"/v1/sessions/{session.id}/resources",
            body={
                "type": "github_repository",
                "url": f"{base}/added.git",
                "authorization_token": NEW_TOKEN,
            },
            cast_to=object,
        )
        assert isinstance(added, dict) and added["mount_path"] == "/workspace/added", added
        assert NEW_TOKEN not in json.dumps(added)
        kept = bash_turn(
            client, session.id, f"{FETCH}; cat /workspace/project/README /workspace/added/README"
        )
        assert "rc=0" not in kept and kept.split()[-2:] == ["two", "two"], kept
        assert served.seen[-1][1:] == ("", 401)

        # A token on a file resource is refused, naming the field.
        with pytest.raises(anthropic.BadRequestError, match="authorization_token"):
            client.beta.sessions.resources.update(
                attached.id, session_id=session.id, authorization_token=NEW_TOKEN
            )

        listed_json = client.beta.sessions.resources.with_raw_response.list(session.id).text()
        log = client.beta.sessions.events.with_raw_response.list(session.id, limit=1000).text()
    for secret in (TOKEN, NEW_TOKEN):
        encoded = base64.b64encode(f"x-access-token:{secret}".encode()).decode()
        for text in (listed_json, log, server.log_text(), host.log_text()):
            assert secret not in text and encoded not in text
        for stored in server.data_dir.glob("stead.db*"):
            assert secret.encode() not in stored.read_bytes(), stored
        found = subprocess.run(
            ["grep", "-rl", "-e", secret, "-e", encoded, str(workspace_on_host(host, session.id))],
            capture_output=True,
            text=True,
            check=False,
        )
        assert found.stdout == "", found.stdout


def test_a_repository_token_goes_over_tls_only(
    server: ServerProcess, origin: tuple[GitOrigin, Path, dict[str, str]]
) -> None:
    """The repository's URL is https: a plain-HTTP request the sandbox sends
    for the same host and path (another port) gets no token, which would
    otherwise cross the network in clear text."""
    served, _, _ = origin
    heard: list[str] = []

    class Recorder(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            heard.append(self.headers.get("Authorization", ""))
            self.send_response(200)
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"ok")

        def log_message(self, *args: object) -> None:
            pass

    url = f"https://{GIT_HOST}:{served.port}/project.git"
    resource = {"type": "github_repository", "url": url, "authorization_token": TOKEN}
    with (
        serving(ThreadingHTTPServer(("127.0.0.1", 0), Recorder)) as port,
        sdk_of(server) as client,
    ):
        session_id = _session(client, [resource])
        plain = f"http://{GIT_HOST}:{port}/project.git/info/refs?service=git-upload-pack"
        output = bash_turn(client, session_id, f"curl -s {plain!r}; echo; echo rc=$?")
    assert "rc=0" in output and heard == [""], (output, heard)


def test_a_clone_cut_off_by_a_brain_killed_mid_clone_is_finished_once(
    server: ServerProcess, host: HostProcess, origin: tuple[GitOrigin, Path, dict[str, str]]
) -> None:
    """``stead serve`` is killed with SIGKILL while the clone waits on the origin;
    the clone goes on in the sandbox host, and the restarted brain's retried
    run collects it by its op key: the repository is in place, cloned once.
    (Restarts the module's server: it runs last.)"""
    served, _, _ = origin
    served.accepted = {TOKEN}
    served.gated, served.gate, served.arrived = "/slow.git", threading.Event(), threading.Event()
    url = f"https://{GIT_HOST}:{served.port}/slow.git"
    resource = {"type": "github_repository", "url": url, "authorization_token": TOKEN}
    try:
        with sdk_of(server) as client:
            session_id = _session(client, [resource])
            client.beta.sessions.events.send(
                session_id, events=[message("$ cat /workspace/slow/README")]
            )
        assert served.arrived.wait(WAIT), "the clone never reached the origin"
    finally:
        server.kill()
        served.gate.set()  # the clone finishes while no brain runs
    workspace = workspace_on_host(host, session_id)
    deadline = time.monotonic() + WAIT
    while not (workspace / "slow" / ".git").exists():
        assert time.monotonic() < deadline, "the clone never finished"
        time.sleep(0.05)
    server.start()
    with sdk_of(server) as client:
        wait_idle(client, session_id, timeout=WAIT)
        events = list(client.beta.sessions.events.list(session_id, limit=1000))
    [result] = [e for e in events if e.type == "agent.tool_result"]
    assert result.content[0].text.strip() == "two", result  # type: ignore[union-attr]
    assert not [e for e in events if e.type == "session.error"], events
    advertised = [path for path, _, _ in served.seen if path.startswith("/slow.git/info/refs")]
    assert len(advertised) == 1, served.seen
    assert not [p.name for p in workspace.iterdir() if p.name.startswith(".stead-clone")]
