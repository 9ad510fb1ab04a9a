"""``stead worker``: a self-hosted environment's worker, an ordinary client of the
public work API (spec §2.3).

It is the SDK's own ``EnvironmentWorker``: poll, ack, heartbeat the lease, follow
the claimed session's events, run each built-in tool call (``bash``, ``read``,
``write``, ``edit``, ``glob``, ``grep``) in ``workdir`` on this machine, post
``user.tool_result``. Given an API key instead of an environment key, it makes
one first (``POST /v1/environments/{id}/keys``).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import anthropic
import anyio
from anthropic.lib.environments import EnvironmentWorker

log = logging.getLogger("stead.worker")

REQUEST_TIMEOUT = 30.0


async def make_environment_key(url: str, api_key: str, environment_id: str) -> str:
    """A new key for the environment, made with an API key of its workspace."""
    async with anthropic.AsyncAnthropic(
        base_url=url, api_key=api_key, timeout=REQUEST_TIMEOUT
    ) as client:
        try:
            made = await client.post(
                f"/v1/environments/{environment_id}/keys", cast_to=object, body={}
            )
        except anthropic.APIError as exc:
            raise WorkerSetupError(f"cannot make an environment key: {exc}") from None
    assert isinstance(made, dict)
    return str(made["key"])


class WorkerSetupError(Exception):
    """The worker could not start (no key, wrong environment)."""


async def run_worker(
    url: str,
    environment_id: str,
    environment_key: str,
    workdir: Path,
    *,
    worker_id: str | None = None,
    max_idle: float | None = 60.0,
    tools: Any = None,
) -> None:
    """Serves the environment's work until cancelled. ``tools``: the worker's
    toolset (the SDK's ``EnvironmentWorker`` ``tools``); None: the SDK's own,
    run in ``workdir`` as this process's user."""
    try:
        await anyio.Path(workdir).mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise WorkerSetupError(f"--workdir {workdir}: {exc.strerror or exc}") from None
    # The worker authenticates every call itself (environment key, then each
    # item's sessions token); the client's own key is never sent.
    async with anthropic.AsyncAnthropic(
        base_url=url, api_key="unused-by-the-worker", timeout=REQUEST_TIMEOUT
    ) as client:
        worker = EnvironmentWorker(
            client,
            environment_id=environment_id,
            environment_key=environment_key,
            workdir=str(workdir),
            max_idle=max_idle,
            memory_sync_interval=None,
            worker_id=worker_id,
            tools=tools,
        )
        log.info("worker for %s serving in %s", environment_id, workdir)
        await worker.run()
