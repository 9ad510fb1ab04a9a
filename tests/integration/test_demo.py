"""``stead demo`` runs a scripted session offline and says the model is scripted."""

from __future__ import annotations

import os
import subprocess
import sys


def test_demo_runs_offline_and_says_the_model_is_scripted() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ANTHROPIC_", "STEAD_"))}
    done = subprocess.run(
        [sys.executable, "-m", "stead", "demo"],
        env={**env, "COLUMNS": "200"},
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    out = done.stdout
    assert "scripted" in out
    assert out.count("agent.tool_use") == 2
    assert "hello from stead" in out
    assert "stop reason: end_turn" in out
