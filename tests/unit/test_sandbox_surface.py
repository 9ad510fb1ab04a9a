"""The sandbox's rooms (sandbox, sandbox_host, tools, blobs): explicit
surfaces and the direction of imports."""

from __future__ import annotations

import ast
import importlib
import sys
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src" / "stead"
ALLOWED = {
    "blobs": {"blobs"},
    "sandbox": {"sandbox", "config", "jsonvalues", "package_specs"},
    "sandbox_host": {
        "sandbox_host",
        "sandbox",
        "blobs",
        "jsonvalues",
        "package_specs",
        "egress_policy",
        "mount_paths",  # a leaf (the standard library only), shared with the API's checks
        "log_levels",  # a leaf too, shared with the brain's settings
        "durations",  # a leaf too, shared with the brain's settings
        "setting_paths",  # a leaf too, shared with the brain's settings
        "blob_settings",  # the blob store's settings, shared with the brain's
        "failpoints",  # a leaf too: test-only crash injection, as in the brain
    },
    # telemetry: the trace context an MCP request carries (a leaf: it imports only config).
    "tools": {"tools", "sandbox", "jsonvalues", "egress_policy", "telemetry", "media_types"},
}
SHARED_WITH_THE_BODY = {
    "stead.sandbox.local",
    "stead.sandbox.protocol",
    "stead.sandbox.unix",
    "stead.sandbox.host_tls",
}


def _imports(path: Path) -> list[str]:
    names = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            names.append(node.module)
        elif isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
    return names


@pytest.mark.parametrize("room", sorted(ALLOWED))
def test_surface_lists_what_it_has(room: str) -> None:
    module = importlib.import_module(f"stead.{room}")
    assert module.__all__
    missing = [name for name in module.__all__ if not hasattr(module, name)]
    assert not missing


@pytest.mark.parametrize("room", sorted(ALLOWED))
def test_rooms_import_only_inwards_and_only_through_surfaces(room: str) -> None:
    problems = []
    for path in (SRC / room).rglob("*.py"):
        for name in _imports(path):
            parts = name.split(".")
            if parts[0] != "stead":
                continue
            if parts[1] not in ALLOWED[room]:
                problems.append(f"{path.name}: {room} must not import {name}")
            elif ".".join(parts[:3]) in SHARED_WITH_THE_BODY and room == "sandbox_host":
                continue
            elif parts[1] != room and len(parts) > 2:
                problems.append(f"{path.name}: import stead.{parts[1]}, not {name}")
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize(
    "script",
    ["sandbox/local/walker.py", "sandbox_host/inside/init.py", "sandbox_host/inside/forward.py"],
)
def test_scripts_run_with_python_dash_s_need_only_the_standard_library(script: str) -> None:
    # They run as ``python -I -S``: no site-packages, no stead.
    roots = {name.split(".")[0] for name in _imports(SRC / script)}
    siblings = {path.stem for path in (SRC / script).parent.glob("*.py")}
    assert roots <= set(sys.stdlib_module_names) | {"__future__"} | siblings
