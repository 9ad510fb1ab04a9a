"""What a sandbox trusts and what the proxy trusts, for TLS through the egress proxy.

Inside: a bundle of the machine's system CAs plus the installation's egress CA,
mounted read-only at ``SANDBOX_BUNDLE`` and over every system bundle path, and
named by the variables that tools read instead (``CA_ENV``). Outside: the
proxy verifies each origin with ``stead.egress_policy.upstream_context`` (the
host's own trust store plus the operator's optional bundle,
``STEAD_EGRESS_EXTRA_CA_FILE``), never the sandbox's bundle: the egress CA
vouches for the proxy only.
"""

from __future__ import annotations

import os
import ssl
from dataclasses import dataclass
from pathlib import Path

from stead.sandbox_host.egress.ca import CertificateAuthority

SYSTEM_BUNDLES = (
    "/etc/ssl/certs/ca-certificates.crt",  # Debian, Ubuntu, Alpine, Arch
    "/etc/pki/tls/certs/ca-bundle.crt",  # Fedora, RHEL
    "/etc/ssl/ca-bundle.pem",  # openSUSE
    "/etc/ssl/cert.pem",  # OpenSSL's default elsewhere
)
"""Where tools look for the system's CAs; each one present is overlaid in a sandbox."""
SANDBOX_CA_DIR = "/run/stead/ca"
SANDBOX_BUNDLE = f"{SANDBOX_CA_DIR}/bundle.pem"
BUNDLE = "bundle.pem"
CA_ENV = (
    "SSL_CERT_FILE",  # OpenSSL, Python's ssl, Go, Ruby
    "REQUESTS_CA_BUNDLE",  # requests (certifi otherwise)
    "CURL_CA_BUNDLE",
    "NODE_EXTRA_CA_CERTS",  # Node keeps its built-in roots and adds these
    "PIP_CERT",
    "NPM_CONFIG_CAFILE",
    "GIT_SSL_CAINFO",
    "CARGO_HTTP_CAINFO",
)
"""Variables that point a sandbox's tools at ``SANDBOX_BUNDLE``."""


@dataclass(frozen=True, slots=True)
class EgressTls:
    """What the proxy needs to terminate a sandbox's TLS and open the origin's."""

    ca: CertificateAuthority
    upstream: ssl.SSLContext
    """Verifies origins: the host's trust store plus the operator's extra bundle."""


def system_bundles() -> list[str]:
    """The system bundle files present on this machine (and so in a sandbox, whose
    ``/etc`` and ``/usr`` are the machine's), each by its real path, once."""
    found: dict[str, None] = {}
    for path in SYSTEM_BUNDLES:
        if os.path.isfile(path):
            found[os.path.realpath(path)] = None
    return list(found)


def write_sandbox_bundle(directory: Path, ca_pem: bytes) -> Path:
    """Writes ``directory/bundle.pem`` (system CAs + the egress CA), readable by
    every sandbox uid; returns its path."""
    directory.mkdir(parents=True, exist_ok=True)
    os.chmod(directory, 0o755)
    system = b""
    for path in system_bundles()[:1]:
        system = Path(path).read_bytes()
    bundle = directory / BUNDLE
    partial = directory / (BUNDLE + ".partial")
    partial.write_bytes(system.rstrip(b"\n") + b"\n" + ca_pem)
    os.chmod(partial, 0o644)
    partial.rename(bundle)
    return bundle


def trust_environment() -> dict[str, str]:
    """The variables that send a sandbox's tools to its bundle."""
    return dict.fromkeys(CA_ENV, SANDBOX_BUNDLE)
