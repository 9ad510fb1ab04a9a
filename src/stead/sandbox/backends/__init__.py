"""Sandbox backends, one module each. Only ``unsafe_local`` exists so far; it
isolates nothing and is used only when named (DESIGN rule 7)."""

from __future__ import annotations

from stead.sandbox.backends.unsafe_local import UnsafeLocalSandbox

__all__ = ["UnsafeLocalSandbox"]
