"""Package specs: what each ecosystem accepts, and what the installer makes of
it (the script it runs, the hosts its proxy allows, the toolchains it needs)."""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any

import pytest

from stead.blobs import BlobConfig
from stead.package_specs import (
    MAX_SPEC_BYTES,
    MAX_SPECS,
    PACKAGE_MANAGERS,
    spec_problem,
    specs_problem,
)
from stead.sandbox_host.config import HostOptions
from stead.sandbox_host.installers import install_script, mirror_hosts, missing_toolchain

GOOD = {
    "apt": ["curl", "g++", "libssl3:amd64", "curl=7.88.1-10+deb12u5", "python3.11"],
    "cargo": ["ripgrep", "ripgrep@14.1.0", "cargo-edit@^0.12", "serde_json"],
    "gem": ["rake", "rake:13.0.6", "nokogiri:~>1.16", "net-http"],
    "go": ["golang.org/x/tools/cmd/goimports", "github.com/a/b/v2@v2.0.1", "example.com/x@latest"],
    "npm": ["typescript", "@types/node", "@scope/name@^1.2.3", "left-pad@latest", "JSONStream"],
    "pip": ["numpy", "numpy==2.2.0", "requests[socks]>=2,<3", "zope.interface~=6.0", "a_b-c"],
}
BAD = {
    "apt": ["-o=Dir=/", "curl;id", "Curl", "curl-", "c", "curl=1.0 bash", "curl*"],
    "cargo": ["--git=https://x", "rip grep", "1ripgrep", "ripgrep@1;id", "ripgrep$(id)"],
    "gem": ["--source=http://x", "rake -v 1", "rake:`id`", "rake:abc", "rake\n"],
    "go": ["-modfile=x", "fmt", "./cmd/x", "example.com/../x", "example.com/x@v1 y", "/abs"],
    "npm": [
        "--prefix=/",
        "git+https://x/y.git",
        "./local",
        "user/repo",
        "a@1 || 2",
        "file:x",
        "-g",
        "~x",
        "@-s/x",
    ],
    "pip": ["-r/etc/passwd", "numpy >= 2", "https://x/y.whl", "numpy; os_name=='nt'", "x'y"],
}


@pytest.mark.parametrize(("manager", "spec"), [(m, s) for m, specs in GOOD.items() for s in specs])
def test_registry_packages_with_their_ecosystems_version_notation_pass(
    manager: str, spec: str
) -> None:
    assert spec_problem(manager, spec) is None


@pytest.mark.parametrize(("manager", "spec"), [(m, s) for m, specs in BAD.items() for s in specs])
def test_options_paths_urls_and_shell_syntax_are_refused(manager: str, spec: str) -> None:
    problem = spec_problem(manager, spec)
    assert problem is not None and problem.startswith(repr(spec[:80]))


def test_every_manager_has_rules_and_anything_else_is_named() -> None:
    assert sorted(GOOD) == sorted(BAD) == sorted(PACKAGE_MANAGERS)
    assert spec_problem("brew", "wget") == "'brew' is not one of apt, cargo, gem, go, npm, pip"


def options(tmp_path: Path, **given: Any) -> HostOptions:
    blobs = BlobConfig(url=f"file://{tmp_path}/blobs")
    return HostOptions(state_dir=tmp_path, work_dir=tmp_path, blobs=blobs, **given)


def test_the_script_installs_in_the_apis_order_one_go_module_at_a_time(tmp_path: Path) -> None:
    packages = {
        "pip": ["numpy==2.2.0"],
        "go": ["example.com/a", "example.com/b@v1.0.0"],
        "gem": ["rake:13.0.6"],
        "cargo": ["ripgrep@14.1.0"],
        "npm": ["@scope/x"],
        "apt": ["curl"],
    }
    lines = install_script(packages, options(tmp_path)).splitlines()
    commands = [shlex.split(line) for line in lines[2:]]
    assert [c[0] for c in commands] == [
        "cargo", "gem", "go", "go", "mkdir", "npm", "python3", "/opt/stead/venv/bin/pip",
    ]  # fmt: skip
    assert commands[2][-1] == "example.com/a@latest"
    assert commands[3][-1] == "example.com/b@v1.0.0"
    assert "curl" not in "\n".join(lines)  # apt is the host's own job


def test_mirrors_replace_the_public_registries_and_are_reachable(tmp_path: Path) -> None:
    mirrored = options(
        tmp_path,
        cargo_index_url="https://crates.mirror.test/index/",
        gem_source="https://gems.mirror.test/",
        goproxy="https://goproxy.mirror.test,https://second.test|direct",
        gosumdb="sum.golang.org+033de0ae+Ac4zctda0e5eza https://sumdb.mirror.test",
        package_hosts=("extra.test",),
    )
    script = install_script({"cargo": ["x"], "gem": ["y"]}, mirrored)
    assert 'source.stead-mirror.registry="sparse+https://crates.mirror.test/index/"' in script
    assert "--clear-sources --source https://gems.mirror.test/" in script
    assert mirror_hosts(mirrored) == [
        "extra.test",
        "crates.mirror.test",
        "gems.mirror.test",
        "goproxy.mirror.test",
        "second.test",
        "sumdb.mirror.test",
    ]
    assert mirror_hosts(options(tmp_path, gosumdb="sum.example.test")) == ["sum.example.test"]
    assert "--source" not in install_script({"gem": ["y"]}, options(tmp_path))


def test_a_toolchain_missing_from_the_machine_is_named_with_its_package(tmp_path: Path) -> None:
    """Only commands under /usr count: a body sees nothing else of the machine."""
    assert missing_toolchain({"go": ["x"]}, search=[str(tmp_path)]) == (
        "packages.go: the sandbox host has no go under /usr; install golang-go on the"
        " machine (./scripts/setup does)"
    )
    elsewhere = tmp_path / "cargo"
    elsewhere.write_text("#!/bin/sh\n")
    elsewhere.chmod(0o755)
    assert "install cargo" in str(missing_toolchain({"cargo": ["x"]}, search=[str(tmp_path)]))
    assert missing_toolchain({"cargo": [], "apt": ["curl"]}, search=[str(tmp_path)]) is None


def test_a_package_list_is_bounded_per_manager_and_in_all() -> None:
    assert specs_problem({"pip": ["numpy"] * MAX_SPECS, "npm": ["x"] * MAX_SPECS}) is None
    assert specs_problem({"pip": ["numpy"] * (MAX_SPECS + 1)}) == (
        f"packages.pip: at most {MAX_SPECS} packages, not {MAX_SPECS + 1}"
    )
    long = "a" * 500
    problem = specs_problem({m: [long] * 12 for m in ("pip", "npm", "gem", "cargo", "go", "apt")})
    assert problem is not None and problem.startswith(f"packages: at most {MAX_SPEC_BYTES} bytes")
