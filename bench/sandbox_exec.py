"""Warm exec round trip: a command in an awake sandbox, against ``subprocess.run``.

What is measured: the wall time of ``HostSandbox.exec("true", ...)`` from the
brain's side once the sandbox is awake: the RPC to the sandbox host over its
Unix socket, the op-key record written before the command runs and the result
recorded after it (rule 5), the command through the sandbox's persistent bash,
and the answer back. The baseline is ``subprocess.run(["bash", "-c", "true"])``
in the benchmark process: what running the same command costs with no
sandbox, no RPC and no records at all (a fresh bash per command, which is what
a runtime without a persistent shell does). Both alternate, one call at a
time, after a warm-up. DESIGN budget: stead's p50 at most 1.5x the baseline's.
"""

from __future__ import annotations

import subprocess
import sys
import time

import anyio

from stead.sandbox import HostSandbox

# isort: split
from _common import median, ms, percentile, size, verdict
from _sandbox import bench_config, client_of, sandbox_host

ROUNDS = size("ROUNDS", 300, 5)
BUDGET = 1.5


def baseline_once() -> float:
    start = time.perf_counter()
    subprocess.run(["bash", "-c", "true"], check=True)
    return time.perf_counter() - start


async def main() -> None:
    with sandbox_host() as host:
        client = client_of(host)
        sandbox = HostSandbox(client, "bench-exec", bench_config())
        stead: list[float] = []
        bare: list[float] = []
        try:
            for round_ in range(ROUNDS + 20):
                start = time.perf_counter()
                result = await sandbox.exec("true", op_key=f"op-{round_}", timeout=30)
                took = time.perf_counter() - start
                assert result.exit_code == 0, result
                baseline = baseline_once()
                if round_ >= 20:
                    stead.append(took)
                    bare.append(baseline)
        finally:
            await client.destroy(sandbox.sandbox_id)
            await client.aclose()
    p50, base = median(stead), median(bare)
    print(f"stead exec p50 {ms(p50)} p99 {ms(percentile(stead, 99))}; subprocess.run {ms(base)}")
    print(
        f"sandbox_exec: p50 {ms(p50)} vs subprocess.run {ms(base)} ({p50 / base:.2f}x),"
        f" budget {BUDGET}x {verdict(p50 <= BUDGET * base)}"
    )


if __name__ == "__main__":
    sys.exit(anyio.run(main))
