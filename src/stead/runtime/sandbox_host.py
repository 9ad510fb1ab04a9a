"""How the brain reaches the sandbox host: its address and options from
settings, and a local host started (detached) when none answers.

The host is a separate process that outlives ``stead serve`` (rule 6): it is
started in its own session with its output in ``host.log``, and a later
``stead serve`` finds it by its socket instead of starting another.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from typing import Any

import anyio

from stead.blobs import BlobConfig
from stead.config import Settings
from stead.sandbox import (
    HostAddress,
    HostClient,
    HostOptions,
    SandboxConfig,
    SandboxUnavailable,
    default_work_dir,
    parse_address,
)

log = logging.getLogger("stead.runtime.sandbox_host")

START_SECONDS = 60.0
"""How long a freshly started host may take to pass its self-check and listen."""
PROBE_INTERVAL = 0.1

Json = dict[str, Any]


def host_options(settings: Settings) -> HostOptions:
    state_dir = settings.resolved_sandbox_host_state_dir
    return HostOptions(
        state_dir=state_dir,
        work_dir=settings.sandbox_work_dir or default_work_dir(state_dir),
        blobs=BlobConfig(
            url=settings.resolved_blob_url,
            s3_endpoint=settings.s3_endpoint,
            s3_region=settings.s3_region,
            s3_access_key_id=settings.s3_access_key_id,
            s3_secret_access_key=settings.s3_secret_access_key,
        ),
        uid_base=settings.sandbox_uid_base,
        uid_count=settings.sandbox_uid_count,
        uid_registry=settings.sandbox_uid_registry,
        snapshot_ttl_seconds=settings.snapshot_ttl_seconds,
        gc_interval_seconds=settings.snapshot_gc_interval_seconds,
        exec_record_seconds=settings.sandbox_exec_record_seconds,
        idle_check_seconds=settings.sandbox_idle_check_seconds,
        listen_tcp=settings.sandbox_host_listen_tcp,
        token=settings.sandbox_host_token,
        pip_index_url=settings.pip_index_url,
        npm_registry=settings.npm_registry,
        package_hosts=tuple(settings.package_hosts),
        apt_sources=settings.apt_sources,
        terminal_send_seconds=settings.terminal_send_timeout_seconds,
    )


def host_address(settings: Settings) -> HostAddress:
    if settings.sandbox_host:
        return parse_address(settings.sandbox_host, settings.sandbox_host_token)
    return HostAddress(unix_path=host_options(settings).socket_path)


def sandbox_config(settings: Settings, environment_config: Json) -> SandboxConfig:
    """The sandbox's config: ``networking`` and ``packages`` from its
    environment, as the API defines them; limits and ``sleep_after`` from the
    server's settings (the API's environment config has no fields for them)."""
    packages = environment_config.get("packages") or {}
    return SandboxConfig.from_json(
        {
            "memory_bytes": settings.sandbox_memory_mb * 1024**2,
            "pids": settings.sandbox_pids,
            "cpus": settings.sandbox_cpus,
            "sleep_after": settings.sandbox_sleep_after_seconds,
            "networking": environment_config.get("networking") or {"type": "unrestricted"},
            "packages": {k: v for k, v in packages.items() if k != "type" and v},
        }
    )


async def connect_host(settings: Settings) -> HostClient:
    """A client of a host that answers, starting a local one if allowed."""
    client = HostClient(host_address(settings))
    try:
        await client.ping()
        return client
    except SandboxUnavailable:
        if not settings.sandbox_host_autostart or client.address.unix_path is None:
            await client.aclose()
            raise
    launch_host(settings)
    with anyio.move_on_after(START_SECONDS):
        while True:
            try:
                await client.ping()
                return client
            except SandboxUnavailable:
                await anyio.sleep(PROBE_INTERVAL)
    await client.aclose()
    log_path = settings.resolved_sandbox_host_state_dir / "host.log"
    raise SandboxUnavailable(f"the sandbox host did not start; see {log_path}")


def launch_host(settings: Settings) -> None:
    """Starts ``stead sandbox-host`` detached: its own session, no stdin, its
    output appended to ``host.log``; it is not this process's to stop."""
    state_dir = settings.resolved_sandbox_host_state_dir
    state_dir.mkdir(parents=True, exist_ok=True)
    os.chmod(state_dir, 0o700)
    env = {k: v for k, v in os.environ.items() if not k.startswith("STEAD_")}
    env.update(_settings_env(settings))
    with open(state_dir / "host.log", "ab") as output:
        subprocess.Popen(
            [sys.executable, "-m", "stead", "sandbox-host"],
            stdin=subprocess.DEVNULL,
            stdout=output,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
            close_fds=True,
        )
    log.info("started a sandbox host in %s", state_dir)


HOST_SETTINGS = (
    "data_dir",
    "sandbox_host_state_dir",
    "sandbox_work_dir",
    "sandbox_host_listen_tcp",
    "sandbox_host_token",
    "sandbox_uid_base",
    "sandbox_uid_count",
    "sandbox_uid_registry",
    "sandbox_idle_check_seconds",
    "snapshot_ttl_seconds",
    "snapshot_gc_interval_seconds",
    "sandbox_exec_record_seconds",
    "blob_url",
    "s3_endpoint",
    "s3_region",
    "s3_access_key_id",
    "s3_secret_access_key",
    "pip_index_url",
    "npm_registry",
    "package_hosts",
    "apt_sources",
    "terminal_send_timeout_seconds",
    "log_level",
)


def _settings_env(settings: Settings) -> dict[str, str]:
    """The settings the host reads, as ``STEAD_*`` variables, so a host
    started from ``stead serve --data-dir X`` serves X too."""
    env: dict[str, str] = {}
    for name in HOST_SETTINGS:
        value = getattr(settings, name)
        if value is None:
            continue
        text = json.dumps(value) if isinstance(value, list | dict) else str(value)
        env[f"STEAD_{name.upper()}"] = text
    return env
