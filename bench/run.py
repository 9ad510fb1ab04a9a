"""Runs every benchmark and prints one summary line per benchmark.

Each benchmark runs as its own subprocess (``python bench/<name>.py``), one after
the other, so none inherits another's threads, servers or warm caches, and a hung
one is cut off by a timeout instead of stalling the rest. The first line names
the machine; then each benchmark's last stdout line, or why it failed.
Performance is reported, never asserted: the exit status is non-zero only when
a benchmark could not run.

    /work/main/.venv/bin/python bench/run.py [name ...]
"""

from __future__ import annotations

import os
import platform
import subprocess
import sys
import time
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parent
BENCHMARKS = (
    "event_append",
    "send_to_stream",
    "scaling",
    "events_list",
    "agent_step",
    "concurrent_sessions",
    "heavy_sessions",
    "brain",
    "sandbox_start",
    "sandbox_exec",
    "sandbox_density",
    "terminal",
    "snapshot",
    "egress_tls",
    "work_queue",
    "request_checks",
    "file_transfer",
    "memory_search",
)
TIMEOUT_S = 120.0


def header() -> str:
    return (
        f"stead benchmarks: {os.cpu_count()} CPUs, {platform.machine()},"
        f" {platform.system()} {platform.release()},"
        f" Python {platform.python_version()} ({platform.python_implementation()})"
    )


def run_one(name: str) -> tuple[bool, str]:
    """(ok, the summary line) for one benchmark."""
    start = time.monotonic()
    try:
        done = subprocess.run(
            [sys.executable, str(BENCH_DIR / f"{name}.py")],
            capture_output=True,
            text=True,
            timeout=TIMEOUT_S,
            stdin=subprocess.DEVNULL,
            cwd=BENCH_DIR.parent,
        )
    except subprocess.TimeoutExpired:
        return False, f"{name}: FAILED (no result within {TIMEOUT_S:.0f}s)"
    took = time.monotonic() - start
    lines = [line for line in done.stdout.splitlines() if line.strip()]
    if done.returncode != 0 or not lines:
        errors = [line for line in done.stderr.splitlines() if line.strip()]
        why = errors[-1] if errors else "no output"
        return False, f"{name}: FAILED (exit {done.returncode}: {why})"
    return True, f"{lines[-1]} [{took:.0f}s]"


def main() -> None:
    names = sys.argv[1:] or list(BENCHMARKS)
    unknown = sorted(set(names) - set(BENCHMARKS))
    if unknown:
        sys.exit(f"unknown benchmark(s): {', '.join(unknown)}; known: {', '.join(BENCHMARKS)}")
    print(header(), flush=True)
    failed = 0
    for name in names:
        ok, line = run_one(name)
        failed += not ok
        print(line, flush=True)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
