"""The rooms of DESIGN.md §2: each room's surface, and which rooms may import which."""

from __future__ import annotations

import ast
import importlib
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src" / "stead"
ROOMS = (
    "api",
    "blobs",
    "client",
    "console",
    "harness",
    "runtime",
    "sandbox",
    "sandbox_host",
    "schemas",
    "store",
    "telemetry",
    "testing",
    "tools",
    "vault",
)
SHARED = {
    "blob_settings",
    "config",
    "durations",
    "egress_policy",
    "events",
    "ids",
    "failpoints",
    "jsonvalues",
    "log_levels",
    "media_types",
    "mount_paths",
    "package_specs",
    "prices",
    "sandbox_variables",
    "setting_paths",
    "usage",
}
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
    "sandbox_host": INNER | {"store", "schemas"},
    "blobs": INNER | {"store", "schemas", "sandbox"},
    "client": {"api", "runtime", "store", "harness", "tools", "testing"},
    "vault": INNER | {"store", "schemas", "sandbox", "blobs"},
    "telemetry": set(ROOMS) - {"telemetry"},
    "console": set(ROOMS) - {"console"},  # shipped files; they reach stead by its public API
}
BRAIN = set(ROOMS) - {"sandbox_host"}
"""No brain room imports the body: they meet only through the host protocol."""
for room in BRAIN:
    FORBIDDEN[room] = FORBIDDEN.get(room, set()) | {"sandbox_host"}
BODY_SURFACES = {
    "stead.sandbox.local",
    "stead.sandbox.protocol",
    "stead.sandbox.unix",
    "stead.sandbox.host_tls",
}
LAZY_SURFACES = {"stead.tools.mcp", "stead.store.inmemory"}
"""Subpackages kept out of their room's ``__init__`` because what they import is
heavy (the mcp SDK) or a server never needs them (the in-memory fake store):
other rooms import them by name, when first needed."""
"""What the body shares with the brain besides ``stead.sandbox`` itself: the
workspace code and the host protocol's frames."""
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
            elif (room == "sandbox_host" and ".".join(parts[:3]) in BODY_SURFACES) or ".".join(
                parts[:3]
            ) in LAZY_SURFACES:
                continue
            elif len(parts) > 2:
                problems.append(f"{path.name}: import {'.'.join(parts[:2])}, not {name}")
    assert not problems, "\n".join(problems)


def test_the_shared_egress_rules_import_no_room() -> None:
    """Brain and body both import ``stead.egress_policy``: it stands on neither
    (``setting_paths`` is a leaf both settings read paths by)."""
    for path in (SRC / "egress_policy").rglob("*.py"):
        used = {n.split(".")[1] for n in _imports(path) if n.startswith("stead.")}
        assert used <= {"egress_policy", "setting_paths"}, f"{path.name} imports {used}"


def test_api_touches_no_sql() -> None:
    for path in (SRC / "api").rglob("*.py"):
        used = {name.split(".")[0] for name in _imports(path)} & SQL_DRIVERS
        assert not used, f"{path.name} imports {used}"


def _loaded_after(imports: str, prefixes: tuple[str, ...]) -> list[str]:
    """The modules under ``prefixes`` a fresh interpreter holds after ``import imports``."""
    program = (
        f"import sys, {imports}; "
        f"print(sorted(m for m in sys.modules if m.startswith({prefixes!r})))"
    )
    found = subprocess.run(
        [sys.executable, "-c", program], capture_output=True, text=True, check=True, timeout=60
    )
    return list(ast.literal_eval(found.stdout.strip()))


HOST_PROTOCOL = (
    "stead.sandbox.ops",
    "stead.sandbox.codec",
    "stead.sandbox.client",
    "stead.sandbox.admin",
    "stead.sandbox.protocol",
    "stead.sandbox.host_tls",
)


def test_the_app_factory_loads_no_body_module() -> None:
    """A brain that serves the API loads nothing of the sandbox host, nor the
    in-process workspace of ``unsafe_local`` until that provider is chosen, nor
    the ``anthropic`` SDK (a second of start-up) until a model call needs it, nor
    Alembic (needed only by a database behind the newest migration), nor the
    PostgreSQL dialect of a SQLite server, nor rich (for the commands that print),
    nor the mcp SDK and cryptography (for vault credentials, when first used),
    nor psycopg (the PostgreSQL store and bus), nor YAML (skill uploads), nor
    the in-memory fake store, nor httpx2 (web tools, webhook deliveries and an
    https model upstream's trust, at their first use)."""
    body = ("stead.sandbox_host", "stead.sandbox.local", "obstore")
    lazy = (
        "anthropic",
        "alembic",
        "sqlalchemy.dialects.postgresql",
        "psycopg",
        "rich",
        "mcp",
        "cryptography",
        "yaml",
        "stead.store.inmemory",
        "httpx2",
        "httpcore2",
        "h11",
        *HOST_PROTOCOL,
    )
    imports = "stead.api.app, stead.cli, stead.tools, stead.runtime"
    assert _loaded_after(imports, body + lazy) == []


def test_the_sandbox_host_process_loads_no_brain_module() -> None:
    """``stead sandbox-host`` runs the CLI, then the host: neither loads the
    store (SQLAlchemy), the API, the runtime nor telemetry's exporters, which a
    process that runs for good would carry and every start would pay for."""
    brain = ("sqlalchemy", "stead.store", "fastapi", "stead.api", "stead.runtime")
    brain += ("stead.harness", "prometheus_client")
    assert _loaded_after("stead.cli, stead.sandbox_host.server", brain) == []


def test_checking_the_host_settings_loads_no_blob_store() -> None:
    """``stead serve`` checks the settings of the host it may start; a
    ``BlobConfig`` is read without obstore, which only the host uses."""
    loaded = _loaded_after("stead.sandbox_host.settings", ("obstore", "stead.blobs.store"))
    assert loaded == []


def _served(program: str, **env: str) -> list[str]:
    """The lines ``program`` prints, run in a fresh interpreter on a data
    directory of its own (it serves requests through a ``TestClient``)."""
    with tempfile.TemporaryDirectory() as data_dir:
        found = subprocess.run(
            [sys.executable, "-c", program],
            capture_output=True,
            text=True,
            check=True,
            timeout=60,
            env={**os.environ, "STEAD_DATA_DIR": data_dir, **env},
        )
    return found.stdout.strip().splitlines()


def test_a_server_loads_no_pydantic_v1() -> None:
    """``stead serve`` keeps FastAPI from importing ``pydantic.v1`` (to refuse v1
    models, which stead has none of) and serves as well without it."""
    program = """
import sys
from stead.cli_support import read_settings, without_pydantic_v1
without_pydantic_v1()
from fastapi.testclient import TestClient
from stead.api.app import create_app
with TestClient(create_app(read_settings(data_dir=None))) as client:
    print(sys.modules["pydantic.v1"], client.get("/v1/agents").status_code)
"""
    assert _served(program) == ["None 401"]


def test_a_server_that_has_not_reached_a_host_holds_none_of_its_protocol() -> None:
    """A server made for sandboxes in a host (the default) that has not yet
    used one holds neither the host protocol nor its client: text-only agents
    never pay for them. Its first status check of the host loads them."""
    program = f"""
import sys
from stead.cli_support import read_settings
from fastapi.testclient import TestClient
from stead.api.app import create_app
def held():
    return [m for m in {HOST_PROTOCOL!r} if m in sys.modules]
with TestClient(create_app(read_settings(data_dir=None))) as client:
    print(held(), client.get("/v1/agents").status_code, held())
    client.get("/readyz")
    print(held())
"""
    before, after = _served(program, STEAD_SANDBOX_HOST_AUTOSTART="false")
    assert before == "[] 401 []"
    assert "'stead.sandbox.client'" in after
