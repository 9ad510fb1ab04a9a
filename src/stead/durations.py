"""Durations in settings, shared by the brain's (``stead.config``) and the
sandbox host's (``stead.sandbox_host.settings``): a leaf, pydantic alone."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

MAX_SECONDS = 10 * 365 * 24 * 3600.0
"""Ten years: longer than any timer stead keeps, and far inside what a date can be
moved by (a webhook's retry wait of 1e20 s overflowed the delivery's next date)."""
Seconds = Annotated[float, Field(gt=0, le=MAX_SECONDS, allow_inf_nan=False)]
"""A duration: positive and finite (a zero or negative timer spins or fails late),
at most ``MAX_SECONDS``."""
