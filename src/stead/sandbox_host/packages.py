"""An environment's ``packages``, installed once per package set and mounted
read-only at ``/opt/stead`` in every sandbox of that environment.

cargo, gem, go, npm and pip run inside a bwrap body of their own (the
installer uid, a writable ``/opt/stead``, network only through an egress proxy
that allows the package registries and their configured mirrors), so a hostile
package's build or install script is as confined as the agent will be; what
each runs is in ``installers.py``. apt packages are resolved and downloaded by
the host's own apt (it needs root and the host's package lists) and unpacked
with ``dpkg-deb -x`` under ``/opt/stead/apt``; nothing is configured or
installed on the host itself.

The set is keyed by ``SandboxConfig.package_key``; a ``ready`` marker is
written only after every installer succeeded, so a failed or interrupted
install is redone from scratch by the next warm-up.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import anyio
from anyio import to_thread

from stead.egress_policy import EgressPolicy
from stead.package_specs import packages_problem
from stead.sandbox import PackagesUnavailable, SandboxConfig
from stead.sandbox.local.shell import OutputTail
from stead.sandbox_host.bwrap import (
    BodySpec,
    SandboxedProcess,
    run_body,
)
from stead.sandbox_host.cgroups import CgroupLimits, Cgroups
from stead.sandbox_host.config import HostOptions
from stead.sandbox_host.egress import EgressProxy
from stead.sandbox_host.environment import sandbox_environment
from stead.sandbox_host.installers import (
    IN_BODY,
    install_script,
    installer_env,
    mirror_hosts,
    missing_toolchain,
)

log = logging.getLogger("stead.sandbox.host")

INSTALL_LIMITS = CgroupLimits(memory_bytes=4 * 1024**3, pids=1024, cpus=2.0)
OUTPUT_TAIL = 4000
"""Bytes of installer output an error carries."""
APT_SECONDS = 600.0


class PackageCache:
    def __init__(self, options: HostOptions, cgroups: Cgroups, *, installer_uid: int) -> None:
        self._options = options
        self._cgroups = cgroups
        self._installer_uid = installer_uid
        self._root = options.work_dir / "packages"
        self._locks: dict[str, anyio.Lock] = {}
        self._attempts: dict[str, int] = {}
        """By package key: how many installs of it ended."""
        self._failed: dict[str, tuple[int, PackagesUnavailable]] = {}
        """By package key: the last install that failed (its number), and why."""

    async def ensure(self, config: SandboxConfig) -> Path | None:
        """The directory to mount at ``/opt/stead``, installing on first use;
        None when the environment lists no packages. Sandboxes that waited for
        an install that failed get its error: trying again at once, one after
        another, would fail the same way N times over (a stalled registry: N
        install timeouts)."""
        key = config.package_key
        if key is None:
            return None
        lock = self._locks.setdefault(key, anyio.Lock())
        ended_before = self._attempts.get(key, 0)
        async with lock:
            home = self._root / key
            content = home / "opt"
            if await to_thread.run_sync((home / "ready").exists):
                return content
            failed = self._failed.get(key)
            if failed is not None and failed[0] > ended_before:
                raise PackagesUnavailable(str(failed[1]))
            try:
                await self._install(config, home, key)
            except PackagesUnavailable as exc:
                self._failed[key] = (self._attempts.get(key, 0) + 1, exc)
                raise
            finally:
                self._attempts[key] = self._attempts.get(key, 0) + 1
            self._failed.pop(key, None)
            return content

    async def _install(self, config: SandboxConfig, home: Path, key: str) -> None:
        """Installs the packages into ``home``'s ``opt``, or raises ``PackagesUnavailable``."""
        content = home / "opt"
        _check_specs(config.packages)
        if problem := await to_thread.run_sync(missing_toolchain, config.packages):
            raise PackagesUnavailable(problem)
        log.info("installing packages %s for key %s", config.packages, key)
        await to_thread.run_sync(self._fresh, home)
        partial = home / "partial"
        if config.packages.get("apt"):
            names = list(config.packages["apt"])
            await to_thread.run_sync(_unpack_apt, names, partial, self._options)
        if any(config.packages.get(manager) for manager in IN_BODY):
            await self._install_in_body(config, home, partial, key)
        await to_thread.run_sync(self._publish, home, partial, content)

    def _fresh(self, home: Path) -> None:
        shutil.rmtree(home, ignore_errors=True)
        for path in (home, home / "partial", home / "work", home / "egress"):
            path.mkdir(parents=True, exist_ok=True)
            os.chmod(path, 0o755)
        uid = self._installer_uid
        for name in ("partial", "work"):
            os.chown(home / name, uid, uid)

    def _publish(self, home: Path, partial: Path, content: Path) -> None:
        partial.rename(content)
        shutil.rmtree(home / "work", ignore_errors=True)
        shutil.rmtree(home / "egress", ignore_errors=True)
        (home / "ready").touch()

    async def _install_in_body(
        self, config: SandboxConfig, home: Path, partial: Path, key: str
    ) -> None:
        options = self._options
        policy = EgressPolicy.from_config(
            {
                "type": "limited",
                "allowed_hosts": [],
                "allow_mcp_servers": False,
                "allow_package_managers": True,
            },
            extra_hosts=mirror_hosts(options),
        )
        spec = BodySpec(
            uid=self._installer_uid,
            workspace=home / "work",
            egress_dir=home / "egress",
            packages_dir=partial,
            packages_writable=True,
            lib_dir=options.work_dir / "lib",
            bwrap=options.bwrap,
            open_files=options.sandbox_open_files,
        )
        env = sandbox_environment(installer_env(options), network=True)
        cgroup = await to_thread.run_sync(self._cgroups.create, f"pkg-{key[:16]}", INSTALL_LIMITS)
        tail = OutputTail(OUTPUT_TAIL)
        unstarted: str | None = None
        spawned = False
        try:
            async with (
                EgressProxy(
                    home / "egress" / "proxy.sock",
                    policy,
                    connect_timeout=options.proxy_connect_timeout,
                    idle_timeout=options.proxy_idle_timeout,
                ),
                run_body(spec, cgroup) as body,
            ):
                script = install_script(config.packages, options)
                process = await body.spawn(["/bin/bash", "-c", script], env)
                spawned = True
                try:
                    with anyio.move_on_after(options.install_timeout_seconds) as scope:
                        while chunk := await _receive(process):
                            tail.feed(chunk)
                        code = await process.wait()
                finally:
                    await process.dispose()
        except* OSError as failed:
            if spawned:
                raise  # the host's own trouble past the start (EMFILE, ENOSPC, ...)
            # The body or its installer did not start: not the host's failure,
            # and retrying it as one would only fail the same way.
            unstarted = f"the package installer could not start: {failed.exceptions[0]}"
        finally:
            with anyio.CancelScope(shield=True), contextlib.suppress(OSError):
                await to_thread.run_sync(cgroup.destroy)
        if unstarted is not None:
            raise PackagesUnavailable(unstarted)
        output, _ = tail.text()
        if scope.cancelled_caught:
            raise PackagesUnavailable(
                f"installing packages took longer than {options.install_timeout_seconds:g} s"
                f"; last output:\n{output}"
            )
        if code != 0:
            raise PackagesUnavailable(
                f"installing packages failed (exit {code}); last output:\n{output}"
            )


async def _receive(process: SandboxedProcess) -> bytes:
    try:
        return await process.receive(65536)
    except (anyio.EndOfStream, anyio.ClosedResourceError, OSError):
        return b""


def _check_specs(packages: dict[str, list[str]]) -> None:
    """Refuses what the API would refuse today; a config may predate a rule."""
    if problem := packages_problem(packages):
        raise PackagesUnavailable(problem)


def _unpack_apt(names: list[str], partial: Path, options: HostOptions) -> None:
    """Downloads the packages (and what they need that the host lacks) with the
    host's apt, then unpacks them under ``/opt/stead/apt`` without running any
    maintainer script. With ``apt_sources`` set, apt reads those sources and
    keeps its package lists in the work directory, never the machine's."""
    with tempfile.TemporaryDirectory(prefix="stead-apt-") as tmp:
        archives = Path(tmp) / "archives"
        (archives / "partial").mkdir(parents=True)
        settings = ["-o", f"Dir::Cache::archives={archives}", "-o", "Debug::NoLocking=1"]
        if options.apt_sources is not None:
            settings += _private_sources(options, Path(tmp))
        fetch = [
            "apt-get", "install", "--download-only", "--yes", "--no-install-recommends",
            *settings, "--", *names,
        ]  # fmt: skip
        update = ["apt-get", "update", *settings]
        if options.apt_sources is not None:
            _run(update)
        failed_update = ""
        if _unknown_apt_names(names, settings):
            updated = _run(update)  # the lists may predate the package
            if updated.returncode != 0:
                failed_update = f"; apt-get update failed: {updated.stdout[-500:]}"
        if unknown := _unknown_apt_names(names, settings):
            raise PackagesUnavailable(
                f"apt: no package named {unknown[0]!r} in the sources (a name is taken as it"
                f" is: apt would read a name it does not know as a pattern of many){failed_update}"
            )
        result = _run(fetch)
        if result.returncode != 0 and "Unable to locate package" in result.stdout:
            _run(update)
            result = _run(fetch)
        if result.returncode != 0:
            raise PackagesUnavailable(f"apt-get could not fetch {names}: {result.stdout[-1000:]}")
        target = partial / "apt"
        target.mkdir(parents=True, exist_ok=True)
        for deb in sorted(archives.glob("*.deb")):
            unpacked = _run(["dpkg-deb", "-x", str(deb), str(target)])
            if unpacked.returncode != 0:
                raise PackagesUnavailable(f"cannot unpack {deb.name}: {unpacked.stdout[-500:]}")
        owner = partial.stat()
        for path in [target, *target.rglob("*")]:
            os.lchown(path, owner.st_uid, owner.st_gid)


def _unknown_apt_names(specs: list[str], settings: list[str]) -> list[str]:
    """The specs whose package name (before ``:arch`` or ``=version``) apt does
    not know. ``apt-get install`` takes a name it does not know for a regular
    expression (``texlive.+`` is 345 packages); ``apt-cache pkgnames
    --all-names`` lists every name it knows, virtual ones (``libz-dev``) too."""
    listed = _run(["apt-cache", "pkgnames", "--all-names", *settings])
    if listed.returncode != 0:
        raise PackagesUnavailable(f"apt-cache could not list packages: {listed.stdout[-1000:]}")
    known = set(listed.stdout.split())
    return [spec for spec in specs if re.split("[:=]", spec, maxsplit=1)[0] not in known]


def _private_sources(options: HostOptions, tmp: Path) -> list[str]:
    assert options.apt_sources is not None
    sources = tmp / "sources.list"
    sources.write_text(options.apt_sources.strip() + "\n")
    (tmp / "sources.list.d").mkdir()
    lists = options.work_dir / "apt" / "lists"
    (lists / "partial").mkdir(parents=True, exist_ok=True)
    return [
        "-o", f"Dir::Etc::SourceList={sources}",
        "-o", f"Dir::Etc::SourceParts={tmp / 'sources.list.d'}",
        "-o", f"Dir::State::Lists={lists}",
    ]  # fmt: skip


def _run(command: list[str]) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(
            command,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            timeout=APT_SECONDS,
            env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "DEBIAN_FRONTEND": "noninteractive"},
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise PackagesUnavailable(f"{command[0]} failed: {exc}") from None
