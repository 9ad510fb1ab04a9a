"""The log levels a stead process takes (``STEAD_LOG_LEVEL``): shared by the
brain's settings and the sandbox host's, which each read it and may import
neither the other's settings nor anything of the other's side."""

from __future__ import annotations

from typing import Literal

LogLevel = Literal["critical", "error", "warning", "info", "debug"]
"""The levels ``telemetry.configure_logging`` and uvicorn both take."""


def any_case(value: object) -> object:
    """A ``mode="before"`` validator: a level in any case (``INFO``) is its name."""
    return value.lower() if isinstance(value, str) else value
