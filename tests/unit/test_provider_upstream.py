"""How a model provider's client trusts its upstream: the system's CAs for
https; for plain HTTP no CA at all (it makes no TLS connection, and one it were
led to fails)."""

from __future__ import annotations

import ssl

from stead.harness.providers.upstream import upstream_verify


def test_https_is_verified_with_the_systems_cas() -> None:
    assert upstream_verify("https://api.anthropic.com") is True
    assert upstream_verify("HTTPS://models.internal:8443/v1") is True


def test_plain_http_loads_no_ca_and_would_refuse_any_tls() -> None:
    context = upstream_verify("http://127.0.0.1:8000/v1")
    assert isinstance(context, ssl.SSLContext)
    assert context.cert_store_stats()["x509_ca"] == 0
    assert context.verify_mode == ssl.CERT_REQUIRED and context.check_hostname
