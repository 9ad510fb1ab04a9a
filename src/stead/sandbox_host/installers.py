"""What the package installer's body runs for cargo, gem, go, npm and pip: the
script, its environment, the mirror hosts its egress proxy allows, and the
toolchains it needs from the machine.

The installer sees the machine's ``/usr`` read-only, as every body does, so a
toolchain counts only if it lives there (root's rustup in ``~/.cargo`` does
not). Each ecosystem installs under its own directory of ``/opt/stead``, whose
``bin`` is on every sandbox's ``PATH`` (``environment.PACKAGE_PATH``). Caches and
build trees go to the installer's workspace, which is thrown away.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import urllib.parse
from collections.abc import Callable, Mapping, Sequence

from stead.sandbox_host.config import HostOptions
from stead.sandbox_host.environment import PROXY_URL

BODY_PATH = ("/usr/local/bin", "/usr/bin")
"""Where a body's commands come from: ``/bin`` inside is a link to ``/usr/bin``."""
TOOLCHAINS: dict[str, tuple[str, str]] = {
    "cargo": ("cargo", "cargo (Debian 12: cargo-web)"),
    "gem": ("gem", "ruby"),
    "go": ("go", "golang-go"),
    "npm": ("npm", "npm"),
    "pip": ("python3", "python3-venv"),
}
"""Per ecosystem: the command its installer runs and the Debian package holding it."""
IN_BODY = ("cargo", "gem", "go", "npm", "pip")
"""The ecosystems installed inside the installer's body, in the API's order."""
DEFAULT_GOPROXY = "https://proxy.golang.org"
"""go's own default without its ``direct`` fallback: fetching from version
control would reach hosts the installer's proxy does not allow."""


def missing_toolchain(
    packages: Mapping[str, Sequence[str]], search: Sequence[str] = BODY_PATH
) -> str | None:
    """What to install on the machine before ``packages`` can be, or None."""
    for manager, (command, package) in TOOLCHAINS.items():
        if not packages.get(manager):
            continue
        found = shutil.which(command, path=os.pathsep.join(search))
        # A link out of /usr (to a home directory, say) dangles inside a body.
        if found is None or not os.path.realpath(found).startswith("/usr/"):
            return (
                f"packages.{manager}: the sandbox host has no {command} under /usr;"
                f" install {package} on the machine (./scripts/setup does)"
            )
    return None


def install_script(packages: Mapping[str, Sequence[str]], options: HostOptions) -> str:
    """The bash script that installs every in-body ecosystem of ``packages``."""
    lines = ["set -euo pipefail", "cd /workspace"]
    for manager in IN_BODY:
        if specs := list(packages.get(manager) or ()):
            lines += _COMMANDS[manager](specs, options)
    return "\n".join(lines) + "\n"


def _cargo(specs: list[str], options: HostOptions) -> list[str]:
    command = ["cargo", "install", "--locked", "--root", "/opt/stead/cargo"]
    if options.cargo_index_url:
        index = options.cargo_index_url.removeprefix("sparse+")
        # `--config` takes TOML, whose basic strings read JSON's escapes.
        command += [
            "--config", 'source.crates-io.replace-with="stead-mirror"',
            "--config", f"source.stead-mirror.registry={json.dumps('sparse+' + index)}",
        ]  # fmt: skip
    return [_quoted([*command, "--", *specs])]


def _gem(specs: list[str], options: HostOptions) -> list[str]:
    command = ["gem", "install", "--no-document", "--install-dir", "/opt/stead/gem"]
    command += ["--bindir", "/opt/stead/gem/bin"]
    if options.gem_source:
        command += ["--clear-sources", "--source", options.gem_source]
    # gem takes no `--`; the specs cannot start with '-' (``package_specs``).
    return [_quoted([*command, *specs])]


def _go(specs: list[str], options: HostOptions) -> list[str]:
    # One module per `go install`: with an @version every argument must name
    # the same module. No version means the latest, as in the other ecosystems.
    return [
        _quoted(["go", "install", "--", spec if "@" in spec else f"{spec}@latest"])
        for spec in specs
    ]


def _npm(specs: list[str], options: HostOptions) -> list[str]:
    command = ["npm", "install", "--global", "--no-fund", "--no-audit"]
    command += ["--prefix", "/opt/stead/node"]
    return ["mkdir -p /opt/stead/node", _quoted([*command, "--", *specs])]


def _pip(specs: list[str], options: HostOptions) -> list[str]:
    command = ["/opt/stead/venv/bin/pip", "install", "--no-input", "--disable-pip-version-check"]
    command += ["--no-cache-dir"]
    return ["python3 -m venv /opt/stead/venv", _quoted([*command, "--", *specs])]


_COMMANDS: dict[str, Callable[[list[str], HostOptions], list[str]]] = {
    "cargo": _cargo,
    "gem": _gem,
    "go": _go,
    "npm": _npm,
    "pip": _pip,
}


def _quoted(command: list[str]) -> str:
    return " ".join(map(shlex.quote, command))


def installer_env(options: HostOptions) -> dict[str, str]:
    """The installer's environment on top of a body's (``sandbox_environment``)."""
    env = {
        # npm reads its proxy from its own config first; say it there too.
        "npm_config_cache": "/workspace/.npm",
        "npm_config_proxy": PROXY_URL,
        "npm_config_https_proxy": PROXY_URL,
        "npm_config_update_notifier": "false",
        "PIP_NO_COLOR": "1",
        "CARGO_HOME": "/workspace/.cargo",
        "CARGO_TARGET_DIR": "/workspace/.cargo-target",
        "CARGO_TERM_COLOR": "never",
        "GEM_SPEC_CACHE": "/workspace/.gem/specs",
        "GOPATH": "/workspace/go",
        "GOCACHE": "/workspace/.cache/go-build",
        "GOBIN": "/opt/stead/go/bin",
        # The module cache is read-only by default, which the cleanup would trip on.
        "GOFLAGS": "-modcacherw",
        # Never fetch a newer go than the machine's: it would not be on PATH later.
        "GOTOOLCHAIN": "local",
        "GOPROXY": DEFAULT_GOPROXY,
    }
    return env | mirror_env(options)


def mirror_env(options: HostOptions) -> dict[str, str]:
    """The environment that points pip, npm and go at the configured mirrors
    (cargo's and gem's are options of their commands, ``_cargo``, ``_gem``):
    the installer's, and that of a sandbox whose networking allows package
    managers (``lifecycle.HostedSandbox.environment``)."""
    env: dict[str, str] = {}
    if options.goproxy:
        env["GOPROXY"] = options.goproxy
    if options.gosumdb:
        env["GOSUMDB"] = options.gosumdb
    if options.pip_index_url:
        env["PIP_INDEX_URL"] = options.pip_index_url
    if options.npm_registry:
        env["npm_config_registry"] = options.npm_registry
    return env


def mirror_hosts(options: HostOptions) -> list[str]:
    """The hosts of every configured mirror, plus ``package_hosts``."""
    urls = [
        options.pip_index_url,
        options.npm_registry,
        (options.cargo_index_url or "").removeprefix("sparse+"),
        options.gem_source,
    ]
    urls += (options.goproxy or "").replace("|", ",").split(",")
    sumdb = (options.gosumdb or "off").split()
    if sumdb[0] != "off":
        # "name[+key] [url]": the url when given, else the database's name is its host.
        urls.append(sumdb[-1] if len(sumdb) > 1 else "https://" + sumdb[0].split("+")[0])
    hosts = list(options.package_hosts)
    for url in urls:
        if url and (host := urllib.parse.urlsplit(url.strip()).hostname):
            hosts.append(host)
    return hosts
