"""The hostile-input suite at release size: many more examples than the test suite runs.

Runs ``tests/integration/test_fuzz.py`` (schemathesis on the served OpenAPI
document, stateful sequences included) and ``test_hostile_bodies.py`` (hostile
bodies for every POST route) with ``STEAD_FUZZ_EXAMPLES`` examples per operation
and property (default 500; the test suite uses 15-25). Not a speed benchmark and
not in ``bench/run.py``: it reports what it found, and exits non-zero on any 5xx,
undocumented status or misnamed refusal.

    .venv/bin/python bench/fuzz.py [examples]
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MODULES = ("tests/integration/test_fuzz.py", "tests/integration/test_hostile_bodies.py")


def main() -> int:
    examples = sys.argv[1] if len(sys.argv) > 1 else "500"
    started = time.monotonic()
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "-o",
            "timeout=0",
            *MODULES,
        ],
        cwd=ROOT,
        env={**os.environ, "STEAD_FUZZ_EXAMPLES": examples},
        stdin=subprocess.DEVNULL,
    )
    verdict = "no failures" if done.returncode == 0 else f"FAILED (pytest exit {done.returncode})"
    print(f"fuzz: {examples} examples per operation, {time.monotonic() - started:.0f} s, {verdict}")
    return done.returncode


if __name__ == "__main__":
    raise SystemExit(main())
