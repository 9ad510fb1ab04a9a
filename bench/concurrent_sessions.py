"""100 concurrent sessions, each running a ten-step scripted turn.

What is measured: wall time for 100 sessions to each finish a turn of ten model
steps (nine tool calls answered without a sandbox, then an answer) through
stead's in-process agent loop against the fake model in its own process; turns
per second, model steps per second, and the process's peak RSS. Baseline, same
run: the same 1,000 model requests issued by 100 concurrent tasks straight
through the provider, so the ratio is what the loop (durable commits, tool
results, scheduling) costs at this concurrency on top of the model traffic.
"""

from __future__ import annotations

import resource
import tempfile
import time
from pathlib import Path

import anyio

from stead.harness import AnthropicModel, ModelRequest

# isort: split
from _common import size
from _fake_server import fake_model_process
from _loop import running_loop

SESSIONS = size("SESSIONS", 100, 3)
STEPS = 10


def _peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


async def measure(data_dir: Path, url: str) -> tuple[float, float, float]:
    async with running_loop(data_dir, url, tools=True) as loop:
        sessions = [await loop.new_session() for _ in range(SESSIONS)]
        before = _peak_rss_mib()
        start = time.perf_counter()
        async with anyio.create_task_group() as group:
            for session in sessions:
                group.start_soon(loop.turn, session, "go")
        stead_s = time.perf_counter() - start
        rss = _peak_rss_mib()
    direct = AnthropicModel(base_url=url, api_key="x", read_timeout=60, total_timeout=120)
    request = ModelRequest(
        model="claude-sonnet-4-6",
        system=None,
        tools=[],
        messages=[{"role": "user", "content": [{"type": "text", "text": "go"}]}],
        max_tokens=1024,
    )

    async def calls(n: int) -> None:
        for i in range(STEPS):
            await direct.complete(request, op_key=f"{n}-{i}")

    start = time.perf_counter()
    async with anyio.create_task_group() as group:
        for n in range(SESSIONS):
            group.start_soon(calls, n)
    direct_s = time.perf_counter() - start
    await direct.aclose()
    return stead_s, direct_s, max(rss, before)


def run() -> str:
    with (
        tempfile.TemporaryDirectory(prefix="stead-bench-") as tmp,
        fake_model_process("ten_steps") as url,
    ):
        stead_s, direct_s, rss = anyio.run(measure, Path(tmp), url)
    steps = SESSIONS * STEPS
    return (
        f"concurrent_sessions: {SESSIONS} sessions x {STEPS}-step turns in {stead_s:.2f}s"
        f" = {SESSIONS / stead_s:.1f} turns/s, {steps / stead_s:.0f} steps/s,"
        f" peak RSS {rss:.0f} MiB"
        f" | bare model calls {steps / direct_s:.0f}/s | ratio {stead_s / direct_s:.2f}x"
    )


def main() -> None:
    print(run(), flush=True)


if __name__ == "__main__":
    main()
