"""Repository resources without a sandbox: a request's defaults, the proxy's
credential made of a sealed token (for the repository's paths only, never
shown), and how git's failures map onto the spec's error types."""

from __future__ import annotations

import base64

import pytest

from stead.runtime.repositories import CHECKOUT_FAILED, CLONE_FAILED, classify, egress_credentials
from stead.schemas import RequestError, repositories
from stead.schemas.resources import check_distinct
from stead.store import RepositoryState
from stead.vault import SecretBox


def test_a_request_gets_its_defaults_and_keeps_its_token_out_of_sight() -> None:
    given = {"type": "github_repository", "url": "https://Git.Example:8443/o/api.git"}
    mount = repositories.parse(given | {"authorization_token": "ghp_x"}, "resources.0.")
    assert (mount.host, mount.mount_path, mount.checkout) == ("git.example", "/workspace/api", None)
    assert mount.paths == ("/o/api", "/o/api.git") and "ghp_x" not in repr(mount)
    shown = repositories.resource("sesrsc_1", mount, "t")
    assert "ghp_x" not in str(shown) and shown["url"] == given["url"]
    commit = {"type": "commit", "sha": "A" * 40}
    assert repositories.parse(given | {"checkout": commit}, "").checkout == {
        "type": "commit",
        "sha": "a" * 40,
    }
    with pytest.raises(RequestError, match=r"^resources\.0\.mount_path"):
        repositories.parse(given | {"mount_path": "/workspace"}, "resources.0.")


def test_a_sealed_token_becomes_a_basic_header_for_the_repository_paths() -> None:
    box = SecretBox(b"k" * 32)
    held = [
        {"id": "sesrsc_a", "type": "github_repository", "url": "https://g.test/o/r"},
        {"id": "sesrsc_b", "type": "github_repository", "url": "https://g.test/o/s"},
        {"id": "sesrsc_c", "type": "file", "file_id": "file_1"},
        {"id": "sesrsc_d", "type": "github_repository", "url": "https://g.test:8443/o/t"},
    ]
    states = [
        RepositoryState("sesrsc_a", box.seal("sesrsc_a", {"authorization_token": "tok"}), None),
        RepositoryState("sesrsc_d", box.seal("sesrsc_d", {"authorization_token": "t2"}), None),
        RepositoryState("sesrsc_b", None, None),  # public: nothing to inject
        RepositoryState("sesrsc_gone", box.seal("sesrsc_gone", {"authorization_token": "x"}), None),
    ]
    # A token sealed for another resource does not open for this one.
    moved = RepositoryState("sesrsc_b", states[0].sealed_token, None)
    [credential, elsewhere] = egress_credentials(box, held, [*states, moved])
    assert (credential.port, elsewhere.port) == (443, 8443)  # the token's own service only
    expected = "Basic " + base64.b64encode(b"x-access-token:tok").decode()
    assert (credential.host, credential.header, credential.value) == (
        "g.test",
        "authorization",
        expected,
    )
    assert credential.paths == ("/o/r", "/o/r.git") and credential.credential_id == "sesrsc_a"
    assert "tok" not in repr(credential) and expected not in repr(credential)


@pytest.mark.parametrize(
    ("code", "output", "expected"),
    [
        (
            CLONE_FAILED,
            "fatal: could not read Username for 'https://g': terminal prompts disabled",
            "repository_authentication_error",
        ),
        (
            CLONE_FAILED,
            "fatal: unable to access 'https://g/o/r/': The requested URL returned error: 403",
            "repository_forbidden_error",
        ),
        (
            CLONE_FAILED,
            "fatal: unable to access 'https://g/': Received HTTP code 403 from proxy after CONNECT",
            "repository_forbidden_error",
        ),
        (
            CLONE_FAILED,
            "fatal: repository 'https://g/o/r/' not found",
            "repository_not_found_error",
        ),
        (
            CLONE_FAILED,
            "fatal: unable to access 'https://g/': Could not resolve host",
            "repository_clone_error",
        ),
        (CHECKOUT_FAILED, "fatal: invalid reference: origin/x", "repository_checkout_error"),
        (None, "", "repository_clone_error"),
    ],
)
def test_git_failures_map_to_the_spec_error_types(
    code: int | None, output: str, expected: str
) -> None:
    assert classify(code, output) == expected


def test_one_mount_inside_another_is_refused_whatever_sorts_between() -> None:
    """``/workspace/a-b`` sorts between ``/workspace/a`` and ``/workspace/a/c``
    as strings; compared only with its neighbour, the nesting slipped through."""
    with pytest.raises(RequestError, match="/workspace/a/c"):
        check_distinct(["/workspace/a", "/workspace/a-b", "/workspace/a/c"], "resources")
    check_distinct(["/workspace/a", "/workspace/a-b", "/workspace/ab"], "resources")
