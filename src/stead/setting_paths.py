"""Paths in settings, shared by the brain's (``stead.config``) and the sandbox
host's (``stead.sandbox_host.settings``): a leaf, pydantic alone.

A leading ``~`` (or ``~user``) is that user's home directory, as a shell makes
it of a word it expands: a value it does not expand (quoted, or set by a
compose file, a unit's ``Environment=``, a chart) would otherwise name a
directory called ``~`` in whatever directory the process started in."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

from pydantic import BeforeValidator


def expanded(value: object) -> object:
    """``value`` with its leading ``~`` expanded when it is a path; anything else as it is."""
    if isinstance(value, str | Path) and str(value).startswith("~"):
        try:
            return Path(value).expanduser()
        except RuntimeError:  # ~someone, and no such user
            raise ValueError(f"{value}: no such user's home directory") from None
    return value


def expanded_address(value: object) -> object:
    """A sandbox host address (``STEAD_SANDBOX_HOST``) whose socket path starts
    with ``~``, expanded; a ``tcp://`` address as it is."""
    if not isinstance(value, str) or value.startswith("tcp://"):
        return value
    scheme = "unix://" if value.startswith("unix://") else ""
    return f"{scheme}{expanded(value.removeprefix(scheme))}"


SettingPath = Annotated[Path, BeforeValidator(expanded)]
"""A path setting (a directory or a file), ``~`` expanded."""
