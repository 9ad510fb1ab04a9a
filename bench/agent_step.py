"""Agent step overhead: what the runtime adds to one model step, no tools.

What is measured: turns of one model step each (user message -> model -> answer
-> idle) through stead's real agent loop in-process (store with durable
commits, bus, runtime, the Anthropic SDK provider) against the zero-latency
fake model. Baseline, same run, interleaved: the same provider asking the same
fake model directly, with a request the size of a turn's. The overhead is the
turn time minus the direct call time: building context, the three durable
commits of a turn (the message; the claim, which records the request as
started; the answer), status events, scheduling. DESIGN budget: p50 <= 2 ms.
Every turn runs in a fresh session, so the turn's model request is the same size
as the baseline's (a longer history would only make the fake model slower).
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

import anyio

from stead.harness import AnthropicModel, ModelRequest

# isort: split
from _common import ms, percentile, size, verdict
from _fake_server import fake_model_process
from _loop import running_loop

TURNS = size("TURNS", 300, 5)
WARMUP = size("WARMUP", 20, 1)
PER_SESSION = 1
BUDGET_MS = 2.0


async def measure(data_dir: Path, url: str) -> tuple[list[float], list[float]]:
    direct = AnthropicModel(base_url=url, api_key="x", read_timeout=30, total_timeout=60)
    request = ModelRequest(
        model="claude-sonnet-4-6",
        system=None,
        tools=[],
        messages=[{"role": "user", "content": [{"type": "text", "text": "step"}]}],
        max_tokens=1024,
    )
    turns: list[float] = []
    calls: list[float] = []
    async with running_loop(data_dir, url, tools=False) as loop:
        session = await loop.new_session()
        for i in range(WARMUP + TURNS):
            if i % PER_SESSION == 0:
                session = await loop.new_session()
            start = time.perf_counter()
            await loop.turn(session, f"step {i}")
            turn = time.perf_counter() - start
            start = time.perf_counter()
            await direct.complete(request, op_key=f"bench-{i}")
            call = time.perf_counter() - start
            if i >= WARMUP:
                turns.append(turn)
                calls.append(call)
    await direct.aclose()
    return turns, calls


def run() -> str:
    with (
        tempfile.TemporaryDirectory(prefix="stead-bench-") as tmp,
        fake_model_process("echo") as url,
    ):
        turns, calls = anyio.run(measure, Path(tmp), url)
    overheads = [t - c for t, c in zip(turns, calls, strict=True)]
    p50, p99 = percentile(overheads, 50), percentile(overheads, 99)
    turn, call = percentile(turns, 50), percentile(calls, 50)
    return (
        f"agent_step: runtime overhead per model step p50 {ms(p50)} p99 {ms(p99)}"
        f" (budget <= {BUDGET_MS:g} ms, {verdict(p50 * 1000 <= BUDGET_MS)})"
        f" | turn p50 {ms(turn)} vs direct model call p50 {ms(call)}"
        f" | ratio {turn / call:.2f}x | n={len(turns)}"
    )


def main() -> None:
    print(run(), flush=True)


if __name__ == "__main__":
    main()
