"""Every setting a stead process reads is named in the README (its settings
table, or the section it belongs to), so an operator can find it: the server's
``Settings`` and the sandbox host's ``HostSettings``, by the variable each
reads (an alias where a field has one, else ``STEAD_`` and its name)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from pydantic import AliasChoices
from pydantic_settings import BaseSettings

from stead.config import Settings
from stead.sandbox_host.settings import HostSettings

README = (Path(__file__).resolve().parents[2] / "README.md").read_text()


def _variables(settings: type[BaseSettings]) -> list[str]:
    prefix = str(settings.model_config.get("env_prefix", ""))
    found = []
    for name, field in settings.model_fields.items():
        alias = field.validation_alias
        if isinstance(alias, AliasChoices):
            found.append(str(alias.choices[0]))
        elif isinstance(alias, str):
            found.append(alias)
        else:
            found.append(f"{prefix}{name}".upper())
    return found


@pytest.mark.parametrize("settings", [Settings, HostSettings], ids=lambda s: s.__name__)
def test_every_setting_is_in_the_readme(settings: type[BaseSettings]) -> None:
    missing = [v for v in _variables(settings) if not re.search(rf"\b{v}\b", README)]
    assert not missing, f"not in the README: {missing}"
