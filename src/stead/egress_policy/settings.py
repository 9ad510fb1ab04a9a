"""The operator's egress settings as pydantic types, so the brain's ``Settings``
and the sandbox host's ``HostSettings`` read ``STEAD_EGRESS_HOSTS`` and
``STEAD_EGRESS_EXTRA_CA_FILE`` by one rule and refuse a bad one alike."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

from pydantic import AfterValidator, BeforeValidator

from stead.egress_policy.resolve import pinned_hosts
from stead.egress_policy.tls import checked_bundle
from stead.setting_paths import expanded

PinnedHosts = Annotated[dict[str, str], AfterValidator(pinned_hosts)]
"""``STEAD_EGRESS_HOSTS``: host name -> IP address, checked and normalised."""
ExtraCaFile = Annotated[Path | None, BeforeValidator(expanded), AfterValidator(checked_bundle)]
"""``STEAD_EGRESS_EXTRA_CA_FILE``: a PEM bundle that must load."""
