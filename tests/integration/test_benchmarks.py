"""Every benchmark still runs: each script at a tiny size (``BENCH_SMOKE=1``),
as ``bench/run.py`` runs it, exits 0 and prints its summary line. The numbers
are not looked at; tests never assert on time."""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.databases import PostgresRun

BENCH = Path(__file__).resolve().parents[2] / "bench"
SANDBOX_BENCHMARKS = {
    "sandbox_start",
    "sandbox_exec",
    "sandbox_density",
    "terminal",
    "snapshot",
    "work_queue",
}
NEEDS_SANDBOX_HOST = os.geteuid() != 0 or shutil.which("bwrap") is None
POSTGRES_BENCHMARKS = {"scaling"}
"""These make schemas of their own in the test run's PostgreSQL database."""


def benchmarks() -> list[str]:
    """The list ``bench/run.py`` runs."""
    spec = importlib.util.spec_from_file_location("stead_bench_run", BENCH / "run.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return list(module.BENCHMARKS)


@pytest.mark.timeout(180)
@pytest.mark.parametrize(
    "name",
    [
        pytest.param(n, marks=pytest.mark.postgres) if n in POSTGRES_BENCHMARKS else n
        for n in benchmarks()
    ],
)
def test_the_benchmark_runs(name: str, request: pytest.FixtureRequest) -> None:
    if name in SANDBOX_BENCHMARKS and NEEDS_SANDBOX_HOST:
        pytest.skip("the sandbox benchmarks need root and bubblewrap")
    env = {k: v for k, v in os.environ.items() if not k.startswith("BENCH_")}
    if name in POSTGRES_BENCHMARKS:
        run: PostgresRun = request.getfixturevalue("postgres_run")  # skips without a server
        env["BENCH_POSTGRES_URL"] = run.url()
    done = subprocess.run(
        [sys.executable, str(BENCH / f"{name}.py")],
        capture_output=True,
        text=True,
        timeout=150,
        stdin=subprocess.DEVNULL,
        cwd=BENCH.parent,
        env={**env, "BENCH_SMOKE": "1"},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    lines = [line for line in done.stdout.splitlines() if line.strip()]
    assert lines and lines[-1].startswith(f"{name}: "), done.stdout
