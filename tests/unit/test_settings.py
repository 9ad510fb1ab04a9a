"""Bad settings stop the ``stead`` command before it starts anything, with one
line per bad setting that names it as the operator sets it."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from stead.cli import app


@pytest.mark.parametrize(
    ("env", "line"),
    [
        ({"STEAD_SANDBOX_UID_BASE": "1000"}, "STEAD_SANDBOX_UID_BASE: Input should be greater"),
        ({"STEAD_SANDBOX_UID_COUNT": "many"}, "STEAD_SANDBOX_UID_COUNT: Input should be a valid"),
        (
            {"STEAD_SANDBOX_UID_BASE": "2147000000", "STEAD_SANDBOX_UID_COUNT": "1000000"},
            "STEAD_SANDBOX_UID_BASE: 2147000000 + STEAD_SANDBOX_UID_COUNT (1000000) - 1 is past",
        ),
        ({"STEAD_EGRESS_HOSTS": '{"db.internal": "nowhere"}'}, "STEAD_EGRESS_HOSTS: 'db.internal'"),
        ({"STEAD_EGRESS_HOSTS": '{"bad name": "10.0.0.1"}'}, "STEAD_EGRESS_HOSTS: 'bad name' is"),
        ({"STEAD_EGRESS_HOSTS": "[1]"}, "STEAD_EGRESS_HOSTS: Input should be a valid"),
        (
            {"STEAD_EGRESS_EXTRA_CA_FILE": "/nonexistent/ca.pem"},
            "STEAD_EGRESS_EXTRA_CA_FILE: /nonexistent/ca.pem: not a readable PEM",
        ),
    ],
)
def test_a_bad_setting_stops_start_up_with_one_line_naming_it(
    env: dict[str, str], line: str, tmp_path: Path
) -> None:
    # A data directory of the test's own, should the settings ever pass.
    result = CliRunner().invoke(app, ["sandbox-host", "--data-dir", str(tmp_path)], env=env)
    assert result.exit_code == 2
    assert result.stderr.startswith(f"stead: {line}")
    assert result.stderr.count("\n") == 1


@pytest.mark.parametrize(
    ("env", "line"),
    [
        ({"STEAD_WEB_SEARCH_URL": "searx.internal"}, "STEAD_WEB_SEARCH_URL: 'searx.internal' is"),
        ({"STEAD_WEB_SEARCH_URL": "ftp://searx.internal"}, "STEAD_WEB_SEARCH_URL: 'ftp://"),
        ({"STEAD_WEB_TIMEOUT_SECONDS": "0"}, "STEAD_WEB_TIMEOUT_SECONDS: Input should be greater"),
        ({"STEAD_WEB_FETCH_MAX_BYTES": "-1"}, "STEAD_WEB_FETCH_MAX_BYTES: Input should be greater"),
        ({"STEAD_EGRESS_HOSTS": '{"bad name": "10.0.0.1"}'}, "STEAD_EGRESS_HOSTS: 'bad name' is"),
        (
            {"STEAD_EGRESS_EXTRA_CA_FILE": "/nonexistent/ca.pem"},
            "STEAD_EGRESS_EXTRA_CA_FILE: /nonexistent/ca.pem: not a readable PEM",
        ),
    ],
)
def test_the_brain_names_a_bad_web_tool_setting_in_one_line(
    env: dict[str, str], line: str, tmp_path: Path
) -> None:
    """The brain's web tools read these too, so ``stead serve`` (any command
    that reads the brain's settings) refuses them."""
    result = CliRunner().invoke(app, ["db", "check", "--data-dir", str(tmp_path)], env=env)
    assert result.exit_code == 2
    assert result.stderr.startswith(f"stead: {line}")
    assert result.stderr.count("\n") == 1
