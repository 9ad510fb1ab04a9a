"""The fake model in a process of its own, so its CPU work does not share the
GIL with the stead code a benchmark measures. Prints its URL, then serves until
its stdin closes (the benchmark exits or closes the pipe)."""

from __future__ import annotations

import gc
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from stead.testing import FakeModel, ServerProcess, Text, ToolCall, Turn, assistant_turns, echo


def ten_steps(body: dict[str, Any]) -> Turn:
    """Nine tool calls, then an answer: a ten-step turn."""
    step = assistant_turns(body)
    if step < 9:
        return Turn([ToolCall("glob", {"pattern": f"*.step{step}"})])
    return Turn([Text("ten steps done")])


def bash_once(body: dict[str, Any]) -> Turn:
    """A user message starting with "bash" gets one ``bash`` call (``true``), then an
    answer once its result is in; any other message is echoed."""
    content = body["messages"][-1]["content"]
    blocks = content if isinstance(content, list) else [{"type": "text", "text": content}]
    if any(block.get("type") == "tool_result" for block in blocks):
        return Turn([Text("ran it")])
    if any(str(block.get("text", "")).startswith("bash") for block in blocks):
        return Turn([ToolCall("bash", {"command": "true"})])
    return echo(body)


def brief(body: dict[str, Any]) -> Turn:
    """A short answer to anything, however long the conversation."""
    return Turn([Text("noted")])


SCRIPTS = {"echo": echo, "ten_steps": ten_steps, "bash_once": bash_once, "brief": brief}


@contextmanager
def fake_model_process(script: str) -> Iterator[str]:
    """Starts the fake model in a subprocess and yields its URL."""
    process = subprocess.Popen(
        [sys.executable, str(Path(__file__)), script],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None
        url = process.stdout.readline().strip()
        if not url.startswith("http"):
            raise RuntimeError(f"the fake model did not start: {url!r}")
        yield url
    finally:
        if process.stdin is not None:
            process.stdin.close()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)


@contextmanager
def served_without_sandbox(script: str) -> Iterator[ServerProcess]:
    """A started ``stead serve`` (``STEAD_SANDBOX=off``, its own data directory)
    whose model is the fake in a process of its own, answering by ``script``."""
    with (
        tempfile.TemporaryDirectory(prefix="stead-bench-") as tmp,
        fake_model_process(script) as model_url,
    ):
        env = {
            "STEAD_UPSTREAM_BASE_URL": model_url,
            "ANTHROPIC_API_KEY": "bench-key-for-the-fake-model",
            "STEAD_LOG_LEVEL": "warning",
            "STEAD_SANDBOX": "off",
        }
        server = ServerProcess(Path(tmp) / "data", env=env).start()
        try:
            yield server
        finally:
            server.stop()


def main() -> None:
    # The fake keeps every request it is sent (tests read them), and in a long
    # session each one carries the whole history: its collections would walk an
    # ever larger log, pausing for tens of milliseconds, which the latencies
    # measured through it (stead's and the baselines') must not count.
    gc.disable()
    with FakeModel(SCRIPTS[sys.argv[1]]) as fake:
        print(fake.url, flush=True)
        sys.stdin.read()


if __name__ == "__main__":
    main()
