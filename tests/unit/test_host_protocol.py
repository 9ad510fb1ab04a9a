"""The host protocol's types: every request has a handler in the host, and
requests and replies survive the wire unchanged."""

from __future__ import annotations

import pytest

from stead.sandbox import (
    EnvironmentCredential,
    ExecResult,
    HostIdentity,
    InvalidArgument,
    codec,
    ops,
)
from stead.sandbox_host.egress import HeaderSecret, PlaceholderSecret, Secrets
from stead.sandbox_host.rpc import HostRpc


def test_every_request_type_has_a_handler_in_the_host() -> None:
    rpc = HostRpc(manager=None, token=None, identity=HostIdentity("h", None))  # type: ignore[arg-type]
    assert set(rpc.handlers) == set(codec.request_types()) - {ops.Hello}


def test_requests_round_trip_through_their_wire_form() -> None:
    request = ops.WriteFile(sandbox_id="s", config={}, path="a", data=b"\x00\xffbytes")
    assert codec.parse_request(codec.encode(request)) == request
    assert codec.encode(request)["data"] == "AP9ieXRlcw=="


def test_replies_decode_into_their_records() -> None:
    request = ops.Exec(sandbox_id="s", command="true", op_key="k", timeout=1)
    result = ExecResult("out", 0, truncated=True)
    assert codec.decode_reply(request, codec.encode(result)) == result
    with pytest.raises(ValueError, match="malformed reply to Exec"):
        codec.decode_reply(request, {"output": 1})


def test_a_credential_never_shows_its_value() -> None:
    credential = ops.Credential(host="api.example", header="authorization", value="s3cret")
    variable = ops.SecretVariable(name="API_KEY", placeholder="p" * 20, value="s3cret")
    assert "s3cret" not in repr(credential) + repr(variable)
    request = ops.SetSecrets(
        sandbox_id="s", generation=1, credentials=[credential], variables=[variable]
    )
    assert "s3cret" not in str(request) + repr(request)
    brain_side = EnvironmentCredential("vcrd_1", "API_KEY", "s3cret", ("api.example",))
    proxy_side = PlaceholderSecret("vcrd_1", b"p" * 20, b"s3cret", None)
    header = HeaderSecret("api.example", b"authorization", b"s3cret")
    shown = repr(brain_side) + repr(proxy_side) + repr(header)
    shown += repr(Secrets([header], [proxy_side]).for_host("api.example", 443))
    assert "s3cret" not in shown


def test_a_malformed_frame_names_its_field() -> None:
    with pytest.raises(InvalidArgument, match=r"^max_bytes: Input should be greater"):
        codec.parse_request({"op": "read_file", "sandbox_id": "s", "path": "a", "max_bytes": -1})


def test_a_header_scoped_to_paths_goes_only_to_them() -> None:
    """A repository's token reaches that repository's paths, never its neighbours'
    nor a path that dot segments or escapes could turn into another one, as
    some origin reads it (``..;``: Tomcat's path parameters; ``\\``: a
    separator; ``#``: a character of the path)."""
    token = HeaderSecret("git.test", b"authorization", b"s3cret", "rsc_1", (b"/o/r", b"/o/r.git"))
    secrets = Secrets([token])
    mine = [b"/o/r", b"/o/r/info/refs?service=git-upload-pack", b"/o/r.git/git-upload-pack"]
    mine += [b"/o/r/", b"/o/r/a;p=1/b", b"/o/r/.hidden/a?x=/../.."]
    others = [b"/o/rx/info/refs", b"/o/r/../x/info/refs", b"/o/r/%2e%2e/x", b"/o//r/a", b"/"]
    others += [b"/o/r/..;/x", b"/o/r/.;/..;/x", b"/o/r/a/..;p", b"/o/r/;/../x", b"/o/r/.../x"]
    others += [b"/o/r/a\\..\\..\\x", b"/o/r/a#/../../x", b"/o/r/a%5c..%5c..%5cx", b"/o/r/a/..%2f"]
    others += [b"https://git.test?x=/o/r", b"https://git.test:8443#/o/r"]
    for target in [*mine, b"https://git.test:8443/o/r/info/refs"]:
        found = secrets.for_host("git.test", 443)
        assert (b"authorization", b"s3cret") in found.head(target, [], "git.test"), target
        assert found.used == {"rsc_1"}
    for target in others:
        sent = [(b"authorization", b"Basic own")]
        found = secrets.for_host("git.test", 443)
        assert found.head(target, sent, "git.test") == sent, target
        assert found.used == set()


def test_a_header_goes_only_to_its_port() -> None:
    """A token for ``https://git.test:8443/o/r`` goes to port 8443 only, and one
    for ``https://git.test/o/r`` to 443 only. Before, the port was dropped: the
    token reached whatever other service the host ran, on any port."""
    default = HeaderSecret("git.test", b"authorization", b"one", "rsc_1")
    other = HeaderSecret("git.test", b"authorization", b"two", "rsc_2", port=8443)
    secrets = Secrets([default, other])
    assert list(secrets.for_host("git.test", 443).set_headers) == [default]
    assert list(secrets.for_host("git.test", 8443).set_headers) == [other]
    assert list(secrets.for_host("git.test", 9000).set_headers) == []


def test_a_header_matches_its_host_however_either_side_spells_it() -> None:
    """One host spelled two ways (case, a trailing dot, an IPv6 address in
    brackets or not canonical) is one host to the proxy's credentials, as to
    its policy; any other host gets nothing. Before, the set was keyed by the
    host lower-cased only, so ``example.com.`` or ``[::1]`` matched no request."""
    named = HeaderSecret("API.Test.", b"x-api-key", b"s3cret", "named")
    address = HeaderSecret("[0:0::1]", b"x-api-key", b"s3cret", "address")
    secrets = Secrets([named, address])
    for host, wanted in [("api.test", named), ("API.TEST.", named), ("::1", address)]:
        assert list(secrets.for_host(host, 443).set_headers) == [wanted], host
    for host in ["[::1]", "0::1"]:
        assert list(secrets.for_host(host, 443).set_headers) == [address], host
    for host in ["api.test..", "xapi.test", "api.test.evil", "test", "::2", "::ffff:0:1"]:
        assert list(secrets.for_host(host, 443).set_headers) == [], host
