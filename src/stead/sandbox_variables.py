"""Environment variables the sandbox host sets in every sandbox process.

Shared by the body, which sets them (``sandbox_host/environment.py``), and the
API, which refuses a vault credential named like one (its placeholder would
replace the host's value: a credential named ``PATH`` would break every
command). A test checks that the host sets no variable missing here.
"""

from __future__ import annotations

HOST_SET_VARIABLES = frozenset(
    {
        # the fixed environment
        "PATH",
        "NODE_PATH",
        "GEM_PATH",
        "HOME",
        "LANG",
        "TERM",
        "USER",
        "TMPDIR",
        # set by the shell itself
        "PWD",
        "SHELL",
        "LOGNAME",
        # the way out: the egress proxy
        "HTTP_PROXY",
        "HTTPS_PROXY",
        "NO_PROXY",
        "http_proxy",
        "https_proxy",
        "no_proxy",
        # tools pointed at the egress CA bundle
        "SSL_CERT_FILE",
        "REQUESTS_CA_BUNDLE",
        "CURL_CA_BUNDLE",
        "NODE_EXTRA_CA_CERTS",
        "PIP_CERT",
        "NPM_CONFIG_CAFILE",
        "GIT_SSL_CAINFO",
        "CARGO_HTTP_CAINFO",
    }
)
