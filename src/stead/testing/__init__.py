"""Test support shipped with stead: used by its tests, benchmarks and demos."""

from stead.testing.server import ServerProcess, free_port

__all__ = ["ServerProcess", "free_port"]
