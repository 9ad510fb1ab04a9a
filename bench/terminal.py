"""Terminals: keystroke echo through the gateway, and exec throughput.

What is measured, with a real sandbox host and a real ``stead serve``:

* keystroke echo: one byte typed into a PTY running ``cat`` (raw mode, so
  the byte comes straight back) until it is read back, through the WebSocket
  gateway with ``stead.client.Terminal``; the baseline is the same PTY
  attached directly on the sandbox host's socket (``HostTerminal``), which is
  what the gateway adds to. p50 and p99 of each, alternating.
* throughput: ``cat`` of a 100 MB file in the sandbox through an exec
  WebSocket, read to the end by ``Terminal``: MB/s; the baseline is the same
  ``cat`` attached directly on the host's socket.
"""

from __future__ import annotations

import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path

import anyio

from stead.client import Output, Terminal
from stead.sandbox import (
    HostSandbox,
    HostTerminal,
    TerminalEnded,
    TerminalOutput,
    TerminalReplayed,
)
from stead.testing import FakeModel, ServerProcess, Text, Turn, client_tls

# isort: split
from _common import median, ms, percentile, size
from _sandbox import bench_config, client_of, sandbox_host

KEYS = size("KEYS", 300, 10)
MEGABYTES = size("MEGABYTES", 100, 2)


def session(server: ServerProcess) -> str:
    import httpx2

    headers = {"x-api-key": server.first_key or ""}
    with httpx2.Client(
        verify=client_tls(), base_url=server.url, headers=headers, timeout=30
    ) as http:
        agent = http.post("/v1/agents", json={"name": "b", "model": "m"}).json()["id"]
        env = http.post("/v1/environments", json={"name": "bench-terminal"}).json()["id"]
        body = {"agent": agent, "environment_id": env}
        return str(http.post("/v1/sessions", json=body).json()["id"])


async def echo_through_gateway(term: Terminal, outputs: AsyncIterator[Output]) -> float:
    start = time.perf_counter()
    await term.send(b"x")
    async for item in outputs:
        if b"x" in item.data:
            return time.perf_counter() - start
    raise RuntimeError("the terminal ended")


async def main() -> None:
    with sandbox_host() as host, FakeModel(lambda body: Turn([Text("ok")])) as fake:
        env = {
            "STEAD_UPSTREAM_BASE_URL": fake.url,
            "ANTHROPIC_API_KEY": "bench",
            **host.settings_env,
        }
        server = ServerProcess(Path(host.state_dir.parent) / "serve", env=env).start()
        try:
            session_id = session(server)
            key = server.first_key or ""
            direct = HostSandbox(client_of(host), session_id, bench_config())
            await direct.exec(
                f"head -c {MEGABYTES}000000 /dev/zero > big", op_key="big", timeout=120
            )
            async with Terminal(server.url, key, session_id, command="stty raw -echo; cat") as term:
                outputs = term.output()
                attached = await direct.terminal(term.terminal_id or "")
                gateway_times: list[float] = []
                direct_times: list[float] = []
                await anyio.sleep(0.5)
                await skip_replay(attached)
                for n in range(KEYS + 20):
                    took = await echo_through_gateway(term, outputs)
                    start = time.perf_counter()
                    await attached.send_input(b"y")
                    while True:
                        event = await attached.receive()
                        if isinstance(event, TerminalOutput) and b"y" in event.data:
                            break
                        if isinstance(event, TerminalEnded):
                            raise RuntimeError("direct attachment ended")
                    if n >= 20:
                        gateway_times.append(took)
                        direct_times.append(time.perf_counter() - start)
                await attached.aclose()
            start = time.perf_counter()
            async with Terminal(
                server.url, key, session_id, kind="exec", command="cat big"
            ) as term:
                size = sum([len(item.data) async for item in term.output()])
            gateway_rate = size / (time.perf_counter() - start) / 1e6
            start = time.perf_counter()
            attached = await direct.terminal("bench-cat", kind="exec", command="cat big")
            size = 0
            while not isinstance(event := await attached.receive(), TerminalEnded):
                if isinstance(event, TerminalOutput):
                    size += len(event.data)
            direct_rate = size / (time.perf_counter() - start) / 1e6
        finally:
            server.stop()
    g50, d50 = median(gateway_times), median(direct_times)
    print(
        f"keystroke echo p50 {ms(g50)} p99 {ms(percentile(gateway_times, 99))} via the gateway;"
        f" direct on the host p50 {ms(d50)} p99 {ms(percentile(direct_times, 99))}"
    )
    print(
        f"terminal: echo p50 {ms(g50)} vs direct {ms(d50)} ({g50 / d50:.2f}x);"
        f" exec cat {MEGABYTES} MB {gateway_rate:.0f} MB/s vs direct {direct_rate:.0f} MB/s"
    )


async def skip_replay(attached: HostTerminal) -> None:
    while not isinstance(await attached.receive(), TerminalReplayed):
        pass


if __name__ == "__main__":
    sys.exit(anyio.run(main))
