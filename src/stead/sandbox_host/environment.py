"""The environment of processes in a bwrap sandbox: fixed by the host, never
the host's own, plus what the sandbox's config and credentials add."""

from __future__ import annotations

from collections.abc import Mapping

from stead.sandbox import WORKSPACE
from stead.sandbox_host.egress import trust_environment

PROXY_URL = "http://127.0.0.1:3128"
PACKAGE_DIRS = ("venv", "node", "cargo", "gem", "go", "apt/usr")
PACKAGE_PATH = ":".join(f"/opt/stead/{d}/bin" for d in PACKAGE_DIRS)
"""Where the environment's packages put their commands (``installers.py``, ``packages.py``)."""


def sandbox_environment(
    extra: Mapping[str, str] | None, *, network: bool, trust: bool = False
) -> dict[str, str]:
    """The environment of processes in a bwrap sandbox: fixed, never the host's.
    ``trust``: the body has the egress CA bundle (``BodySpec.ca_dir``)."""
    env = {
        "PATH": PACKAGE_PATH + ":/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin",
        "NODE_PATH": "/opt/stead/node/lib/node_modules",
        "GEM_PATH": "/opt/stead/gem:",  # the trailing ':' keeps ruby's own gems too
        "HOME": WORKSPACE,
        "LANG": "C.UTF-8",
        "TERM": "dumb",
        "USER": "sandbox",
        "TMPDIR": "/tmp",
    }
    if network:
        for name in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy"):
            env[name] = PROXY_URL
        env["NO_PROXY"] = env["no_proxy"] = ""
    if trust:
        env |= trust_environment()
    return env | dict(extra or {})
