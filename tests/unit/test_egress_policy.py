"""The shared egress rules: EgressPolicy (the networking config's shapes, host
matching, the address blocklist), a web tool's DomainPolicy, resolving through
checked_addresses, and STEAD_EGRESS_HOSTS pins."""

from __future__ import annotations

from typing import Any

import pytest

from stead.egress_policy import (
    PACKAGE_MANAGER_HOSTS,
    Denied,
    DomainPolicy,
    EgressPolicy,
    InvalidPolicy,
    UpstreamFailed,
    block_reason,
    checked_addresses,
    normalize_host,
    pinned_hosts,
)

NOT_LISTED = "host not in the environment's allowed_hosts"


def limited(*hosts: str, mcp: bool = False, packages: bool = False) -> dict[str, Any]:
    return {
        "type": "limited",
        "allowed_hosts": list(hosts),
        "allow_mcp_servers": mcp,
        "allow_package_managers": packages,
    }


def test_unrestricted_allows_every_host_but_lists_none_explicitly() -> None:
    policy = EgressPolicy({"type": "unrestricted"})
    assert policy.allows_host("example.com")
    assert policy.allows_host("10.0.0.1")
    assert not policy.is_explicit("example.com")


def test_limited_allows_only_listed_hosts_and_says_why_not() -> None:
    policy = EgressPolicy(limited("api.example.com"))
    policy.check_host("api.example.com")
    with pytest.raises(Denied) as denied:
        policy.check_host("other.example.com")
    assert denied.value.host == "other.example.com"
    assert denied.value.reason == NOT_LISTED
    assert str(denied.value) == f"egress to other.example.com denied: {NOT_LISTED}"


@pytest.mark.parametrize(
    "request_host", ["API.Example.COM", "api.example.com.", "Api.Example.Com."]
)
def test_matching_ignores_case_and_one_trailing_dot(request_host: str) -> None:
    assert EgressPolicy(limited("api.example.com")).allows_host(request_host)
    assert EgressPolicy(limited("API.EXAMPLE.COM.")).allows_host(request_host)


def test_a_wildcard_matches_subdomains_at_any_depth_but_not_the_apex() -> None:
    policy = EgressPolicy(limited("*.example.com"))
    assert policy.allows_host("a.example.com")
    assert policy.allows_host("a.b.example.com")
    assert policy.allows_host("A.Example.Com.")
    assert not policy.allows_host("example.com")
    assert not policy.allows_host("badexample.com")
    assert not policy.allows_host("example.com.evil.net")


def test_addresses_match_in_canonical_form() -> None:
    policy = EgressPolicy(limited("127.0.0.1", "::1"))
    assert policy.allows_host("127.0.0.1")
    assert policy.allows_host("[::1]")
    assert policy.allows_host("0:0::1")
    assert not policy.allows_host("127.0.0.2")


def test_package_managers_are_added_only_when_asked() -> None:
    assert {"pypi.org", "files.pythonhosted.org", "registry.npmjs.org"} <= set(
        PACKAGE_MANAGER_HOSTS
    )
    assert {"deb.debian.org", "static.crates.io", "rubygems.org", "proxy.golang.org"} <= set(
        PACKAGE_MANAGER_HOSTS
    )
    without = EgressPolicy(limited())
    with_them = EgressPolicy(limited(packages=True))
    for host in PACKAGE_MANAGER_HOSTS:
        assert not without.allows_host(host)
        assert with_them.allows_host(host)
        assert not with_them.is_explicit(host)


def test_mcp_server_hosts_are_added_only_when_asked() -> None:
    hosts = ["mcp.example.com", "*.tools.example.net"]
    assert not EgressPolicy(limited(), mcp_server_hosts=hosts).allows_host("mcp.example.com")
    policy = EgressPolicy(limited(mcp=True), mcp_server_hosts=hosts)
    assert policy.allows_host("mcp.example.com")
    assert policy.allows_host("x.tools.example.net")
    assert not policy.is_explicit("mcp.example.com")
    assert not EgressPolicy(limited(mcp=True)).allows_host("mcp.example.com")


def test_extra_hosts_are_allowed_and_explicit_in_both_modes() -> None:
    for networking in ({"type": "unrestricted"}, limited()):
        policy = EgressPolicy(networking, extra_hosts=["pypi.mirror.internal"])
        assert policy.allows_host("pypi.mirror.internal")
        assert policy.is_explicit("pypi.mirror.internal")
        policy.check_addresses("pypi.mirror.internal", ["10.1.2.3"])


def test_from_config_is_the_constructor() -> None:
    policy = EgressPolicy.from_config(limited("a.example"), extra_hosts=["b.example"])
    assert policy.allows_host("a.example") and policy.allows_host("b.example")


@pytest.mark.parametrize(
    ("address", "reason"),
    [
        ("127.0.0.1", "loopback"),
        ("127.8.9.10", "loopback"),
        ("::1", "loopback"),
        ("169.254.169.254", "link-local"),
        ("fe80::1", "link-local"),
        ("0.0.0.0", "unspecified"),
        ("::", "unspecified"),
        ("224.0.0.1", "multicast"),
        ("ff02::1", "multicast"),
        ("10.0.0.1", "private"),
        ("172.16.5.4", "private"),
        ("192.168.1.1", "private"),
        ("fc00::1", "private"),
        ("fd12:3456::1", "private"),
        ("100.64.0.1", "shared address space"),
        ("100.127.255.254", "shared address space"),
        ("::ffff:127.0.0.1", "loopback"),
        ("::ffff:169.254.169.254", "link-local"),
        ("64:ff9b::a00:1", "private"),
        ("2002:7f00:1::1", "loopback"),
    ],
)
def test_the_blocklist_names_why(address: str, reason: str) -> None:
    assert block_reason(address) == reason


@pytest.mark.parametrize(
    "address", ["8.8.8.8", "93.184.216.34", "2606:4700:4700::1111", "::ffff:8.8.8.8"]
)
def test_public_addresses_are_not_blocked(address: str) -> None:
    assert block_reason(address) is None


def test_blocked_addresses_are_refused_in_both_modes() -> None:
    for policy in (EgressPolicy({"type": "unrestricted"}), EgressPolicy(limited("*.example"))):
        with pytest.raises(Denied) as denied:
            policy.check_addresses("db.example", ["169.254.169.254"])
        assert denied.value.reason == "address 169.254.169.254 is blocked (link-local)"


def test_a_literal_allowed_host_may_reach_blocked_addresses() -> None:
    policy = EgressPolicy(limited("127.0.0.1", "db.internal", "*.corp.example"))
    policy.check_addresses("127.0.0.1", ["127.0.0.1"])
    policy.check_addresses("DB.internal.", ["10.0.0.7"])
    # A wildcard is not a literal listing: whoever runs the subdomain's DNS
    # must not be able to point it at the host's loopback.
    assert policy.allows_host("x.corp.example")
    with pytest.raises(Denied, match=r"address 127\.0\.0\.1 is blocked"):
        policy.check_addresses("x.corp.example", ["127.0.0.1"])


def test_one_blocked_address_among_public_ones_refuses_the_host() -> None:
    policy = EgressPolicy({"type": "unrestricted"})
    policy.check_addresses("example.com", ["93.184.216.34"])
    with pytest.raises(Denied, match=r"address 10\.0\.0\.1 is blocked"):
        policy.check_addresses("example.com", ["93.184.216.34", "10.0.0.1"])


@pytest.mark.parametrize(
    "networking",
    [
        {},
        {"type": "cloud"},
        {"type": "unrestricted", "allowed_hosts": []},
        {"type": "limited"},
        {"type": "limited", "allowed_hosts": []},
        {**limited(), "extra": True},
        {**limited(), "allowed_hosts": "example.com"},
        {**limited(), "allow_mcp_servers": "yes"},
        {**limited(), "allow_package_managers": 1},
        limited("http://example.com"),
        limited("example.com:443"),
        limited("*"),
        limited("*.*.example.com"),
        limited("api.*.example.com"),
        limited("exa mple.com"),
        limited(""),
        limited("a" * 64 + ".com"),
    ],
)
def test_anything_but_the_two_shapes_is_rejected(networking: dict[str, Any]) -> None:
    with pytest.raises(InvalidPolicy):
        EgressPolicy(networking)


def test_bad_extra_and_mcp_hosts_are_rejected() -> None:
    with pytest.raises(InvalidPolicy, match=r"extra_hosts\.0"):
        EgressPolicy({"type": "unrestricted"}, extra_hosts=["https://mirror"])
    with pytest.raises(InvalidPolicy, match=r"mcp_server_hosts\.1"):
        EgressPolicy(limited(mcp=True), mcp_server_hosts=["ok.example", "bad/host"])


def test_normalize_host() -> None:
    assert normalize_host("Example.COM.") == "example.com"
    assert normalize_host("[0:0::1]") == "::1"
    assert normalize_host("127.0.0.1") == "127.0.0.1"


# --- a web tool's domain lists ------------------------------------------------------


def test_allowed_domains_match_the_name_and_its_subdomains_only() -> None:
    policy = DomainPolicy(["docs.example.com", "10.0.0.5"], tool="web_fetch")
    assert policy.allows_host("docs.example.com")
    assert policy.allows_host("A.Docs.Example.COM.")
    assert policy.allows_host("10.0.0.5")
    assert not policy.allows_host("example.com")
    assert not policy.allows_host("baddocs.example.com")
    assert not policy.allows_host("docs.example.com.evil.net")
    with pytest.raises(Denied, match="not in the web_fetch tool's allowed_domains"):
        policy.check_host("other.example.com")


def test_blocked_domains_refuse_the_name_and_its_subdomains() -> None:
    policy = DomainPolicy(None, ["ads.example.com"], tool="web_search")
    assert policy.allows_host("example.com")
    assert not policy.allows_host("x.ads.example.com")
    with pytest.raises(Denied, match="in the web_search tool's blocked_domains"):
        policy.check_host("ads.example.com")


def test_no_domain_lists_allow_every_host_but_keep_the_blocklist() -> None:
    policy = DomainPolicy()
    policy.check_host("example.com")
    policy.check_addresses("example.com", ["93.184.216.34"])
    for address in ("127.0.0.1", "10.1.2.3", "169.254.169.254"):
        with pytest.raises(Denied, match="is blocked"):
            policy.check_addresses("example.com", [address])


def test_an_allowed_domain_named_literally_may_reach_private_addresses() -> None:
    """As a sandbox's literal allowed_hosts: the agent's author named it. A
    subdomain reached through the entry may not (its DNS is someone else's)."""
    policy = DomainPolicy(["db.internal", "127.0.0.1"])
    policy.check_addresses("DB.internal.", ["10.0.0.7"])
    policy.check_addresses("127.0.0.1", ["127.0.0.1"])
    with pytest.raises(Denied, match=r"address 127\.0\.0\.1 is blocked"):
        policy.check_addresses("x.db.internal", ["127.0.0.1"])


def test_an_empty_allowlist_allows_nothing() -> None:
    assert not DomainPolicy([]).allows_host("example.com")


@pytest.mark.parametrize(
    "entry", ["https://example.com", "example.com:443", "example.com/docs", "*.example.com", "", 7]
)
def test_domain_entries_are_plain_host_names(entry: object) -> None:
    with pytest.raises(InvalidPolicy, match=r"allowed_domains\.1: .* is not a plain host name"):
        DomainPolicy(["ok.example", entry])


def test_a_domain_policy_reads_a_resolved_tool_config() -> None:
    policy = DomainPolicy.from_config({"name": "web_fetch", "blocked_domains": ["x.example"]})
    assert policy.tool == "web_fetch" and not policy.allows_host("x.example")
    with pytest.raises(InvalidPolicy, match="allowed_domains"):
        DomainPolicy.from_config({"name": "web_fetch", "allowed_domains": "x.example"})


# --- resolving ----------------------------------------------------------------------


class Resolver:
    def __init__(self, answers: dict[str, list[str]]) -> None:
        self.answers = answers
        self.asked: list[str] = []

    async def __call__(self, host: str, port: int) -> list[str]:
        self.asked.append(host)
        if host not in self.answers:
            raise OSError("no such name")
        return self.answers[host]


@pytest.mark.anyio
async def test_checked_addresses_resolve_once_and_check_every_address() -> None:
    resolver = Resolver({"a.example": ["93.184.216.34", "93.184.216.34"], "b.example": []})
    policy = DomainPolicy()
    found = await checked_addresses("a.example", 443, policy, resolver=resolver, resolve_seconds=5)
    assert found == ["93.184.216.34"] and resolver.asked == ["a.example"]
    with pytest.raises(UpstreamFailed, match="cannot resolve"):
        await checked_addresses("c.example", 443, policy, resolver=resolver, resolve_seconds=5)
    with pytest.raises(UpstreamFailed, match="no addresses"):
        await checked_addresses("b.example", 443, policy, resolver=resolver, resolve_seconds=5)


@pytest.mark.anyio
async def test_a_pinned_name_skips_resolving_and_the_blocklist_but_not_the_lists() -> None:
    resolver = Resolver({})
    pinned = pinned_hosts({"Page.Test": "127.0.0.1"})
    found = await checked_addresses(
        "page.test", 80, DomainPolicy(), resolver=resolver, resolve_seconds=5, pinned=pinned
    )
    assert found == ["127.0.0.1"] and resolver.asked == []
    with pytest.raises(Denied, match="blocked_domains"):
        await checked_addresses(
            "page.test",
            80,
            DomainPolicy(None, ["page.test"]),
            resolver=resolver,
            resolve_seconds=5,
            pinned=pinned,
        )


@pytest.mark.anyio
async def test_a_literal_address_is_not_resolved() -> None:
    resolver = Resolver({})
    with pytest.raises(Denied, match="loopback"):
        await checked_addresses("[::1]", 80, DomainPolicy(), resolver=resolver, resolve_seconds=5)
    assert resolver.asked == []


def test_pinned_hosts_are_checked() -> None:
    assert pinned_hosts({"DB.internal.": "0:0::1"}) == {"db.internal": "::1"}
    with pytest.raises(ValueError, match="is not a host name"):
        pinned_hosts({"http://x": "10.0.0.1"})
    with pytest.raises(ValueError, match="is not an IP address"):
        pinned_hosts({"x.internal": "x.other"})
