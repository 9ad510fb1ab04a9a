"""The rooms of DESIGN.md §2: each room's surface, and which rooms may import which."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src" / "stead"
ROOMS = (
    "api",
    "blobs",
    "client",
    "egress",
    "harness",
    "runtime",
    "sandbox",
    "schemas",
    "store",
    "testing",
    "tools",
)
SHARED = {"config", "ids", "failpoints", "jsonvalues"}
INNER = {"api", "runtime", "harness", "tools", "client", "testing"}
"""Rooms that sit above the sandbox and what it stands on (DESIGN §2)."""
FORBIDDEN = {
    "schemas": {"api", "runtime", "store", "testing", "sandbox", "tools", "harness"},
    "store": {"api", "runtime", "testing", "sandbox", "tools", "harness"},
    "runtime": {"api", "testing"},
    "api": {"testing"},
    "harness": {"api", "runtime", "store", "sandbox", "tools", "testing"},
    "tools": {"api", "runtime", "store", "harness", "testing"},
    "sandbox": INNER | {"store", "schemas"},
    "egress": INNER | {"store", "schemas", "sandbox"},
    "blobs": INNER | {"store", "schemas", "sandbox", "egress"},
    "client": {"api", "runtime", "store", "harness", "tools", "testing"},
}
SQL_DRIVERS = {"sqlalchemy", "sqlite3", "psycopg", "alembic"}


def _imports(path: Path) -> list[str]:
    tree = ast.parse(path.read_text())
    names = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            names.append(node.module)
        elif isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
    return names


@pytest.mark.parametrize("room", ROOMS)
def test_rooms_export_an_explicit_surface(room: str) -> None:
    module = importlib.import_module(f"stead.{room}")
    assert module.__all__
    for name in module.__all__:
        assert hasattr(module, name), f"stead.{room} lists {name} but lacks it"


@pytest.mark.parametrize("room", ROOMS)
def test_rooms_import_others_only_through_their_surface(room: str) -> None:
    problems = []
    for path in (SRC / room).rglob("*.py"):
        for name in _imports(path):
            parts = name.split(".")
            if parts[0] != "stead" or len(parts) < 2 or parts[1] in SHARED or parts[1] == room:
                continue
            if parts[1] in FORBIDDEN.get(room, set()):
                problems.append(f"{path.name}: {room} must not import {name}")
            elif len(parts) > 2:
                problems.append(f"{path.name}: import {'.'.join(parts[:2])}, not {name}")
    assert not problems, "\n".join(problems)


def test_api_touches_no_sql() -> None:
    for path in (SRC / "api").rglob("*.py"):
        used = {name.split(".")[0] for name in _imports(path)} & SQL_DRIVERS
        assert not used, f"{path.name} imports {used}"
