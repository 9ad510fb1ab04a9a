"""The environment the host gives sandbox processes, and the names it keeps."""

from __future__ import annotations

from stead.sandbox_host.environment import sandbox_environment
from stead.sandbox_variables import HOST_SET_VARIABLES


def test_every_variable_the_host_sets_is_kept_from_credentials() -> None:
    # A credential named like one of these would replace it with a placeholder.
    full = sandbox_environment(None, network=True, trust=True)
    assert set(full) <= HOST_SET_VARIABLES, set(full) - HOST_SET_VARIABLES
