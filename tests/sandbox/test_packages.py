"""Environment packages of every ecosystem are installed once per package set,
cargo, gem, go, npm and pip inside a sandbox of their own through the egress
proxy, apt by the host's apt, each from a registry on loopback; what they
install is then used from bash inside a sandbox. One sandbox host serves the
module, pointed at every registry by its settings."""

from __future__ import annotations

import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest

from stead.sandbox import HostSandbox, PackagesUnavailable, SandboxNotFound, SandboxUnavailable
from stead.sandbox_host.installers import missing_toolchain
from stead.testing import HostProcess, ServeForker
from tests.sandbox.conftest import client_of, config, new_id, requires_isolation
from tests.sandbox.registries import CRATE, GEM, HAS_GEM, NPM_NAME, WHEEL, Registry, loopback_name

pytestmark = [pytest.mark.anyio, requires_isolation]

INSTALL_SECONDS = 120.0
"""Longest a first exec waits: it installs the packages (a crate compiles)."""


def requires_toolchain(manager: str) -> pytest.MarkDecorator:
    missing = missing_toolchain({manager: ["probe"]})
    return pytest.mark.skipif(missing is not None, reason=f"{missing} (./scripts/setup)")


@pytest.fixture(scope="module")
def registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Registry]:
    with Registry(tmp_path_factory.mktemp("registry")) as served:
        yield served


@pytest.fixture(scope="module")
def package_host(
    tmp_path_factory: pytest.TempPathFactory, registry: Registry, forker: ServeForker
) -> Iterator[HostProcess]:
    process = HostProcess(
        tmp_path_factory.mktemp("package-host") / "state", env=registry.env(), forker=forker
    ).start()
    yield process
    process.stop()


async def run_with(host: HostProcess, packages: dict[str, list[str]], command: str) -> str:
    """What ``command`` prints in a new sandbox with ``packages``; it must succeed."""
    client = client_of(host)
    sandbox = HostSandbox(client, new_id(), config(packages=packages))
    try:
        result = await sandbox.exec(command, op_key="probe", timeout=INSTALL_SECONDS)
        assert result.exit_code == 0, result.output
        return result.output
    finally:
        await client.destroy(sandbox.sandbox_id)
        await client.aclose()


@requires_toolchain("pip")
async def test_pip_packages_install_once_per_package_set(
    package_host: HostProcess, registry: Registry
) -> None:
    client = client_of(package_host)
    wanted = config(packages={"pip": ["steadprobe==1.0"]})
    first, second = (HostSandbox(client, new_id(), wanted) for _ in range(2))
    try:
        probe = "python -c 'import steadprobe; print(steadprobe.VALUE)'"
        result = await first.exec(probe, op_key="probe", timeout=INSTALL_SECONDS)
        assert (result.exit_code, result.output) == (0, "42\n")
        fetched = list(registry.requests)
        assert any(WHEEL in path for path in fetched)
        result = await second.exec(probe, op_key="probe", timeout=30)
        assert (result.exit_code, result.output) == (0, "42\n")
        assert registry.requests == fetched  # the second sandbox installed nothing
        denied = await first.exec("touch /opt/stead/x", op_key="ro", timeout=10)
        assert denied.exit_code != 0  # installed packages are read-only in sandboxes
    finally:
        for sandbox in (first, second):
            await client.destroy(sandbox.sandbox_id)
        await client.aclose()


async def test_a_package_that_cannot_install_is_a_clear_error(package_host: HostProcess) -> None:
    """Three sandboxes of one environment wake at once: one installs, the
    others wait for it, and its failure is theirs, in one install (before,
    each tried again in turn)."""
    client = client_of(package_host)
    wanted = config(packages={"pip": ["no-such-package-x"]})
    sandboxes = [HostSandbox(client, new_id(), wanted) for _ in range(3)]
    errors: list[str] = []

    async def wake(sandbox: HostSandbox) -> None:
        with pytest.raises(PackagesUnavailable) as failed:
            await sandbox.exec("true", op_key="k", timeout=INSTALL_SECONDS)
        errors.append(str(failed.value))

    try:
        async with anyio.create_task_group() as group:
            for sandbox in sandboxes:
                group.start_soon(wake, sandbox)
        assert len(errors) == 3 and all("no-such-package-x" in e for e in errors)
        installs = [
            line
            for line in package_host.log_text().splitlines()
            if "installing packages" in line and "no-such-package-x" in line
        ]
        assert len(installs) == 1
        # A config stored before the API checked specs is refused before any install.
        refused = HostSandbox(client, new_id(), config(packages={"cargo": ["--config=x"]}))
        with pytest.raises(PackagesUnavailable, match=r"packages\.cargo\.0: '--config=x'"):
            await refused.exec("true", op_key="k", timeout=10)
        # So is a list longer than the API takes now (one argument of bash -c
        # over Linux's 128 KiB was a host error, retried for good).
        many = config(packages={"pip": [f"p{i}" for i in range(300)]})
        with pytest.raises(PackagesUnavailable, match=r"packages\.pip: at most 256"):
            await HostSandbox(client, new_id(), many).exec("true", op_key="k", timeout=10)
    finally:
        for sandbox in sandboxes:
            await client.destroy(sandbox.sandbox_id)
        await client.aclose()


@requires_toolchain("npm")
async def test_npm_packages_install_with_their_commands_on_path(
    package_host: HostProcess, registry: Registry
) -> None:
    assert await run_with(package_host, {"npm": [NPM_NAME]}, "steadprobe") == "42\n"
    assert f"/npm/{NPM_NAME}" in registry.requests


@requires_toolchain("cargo")
async def test_cargo_crates_build_and_install_with_their_commands_on_path(
    package_host: HostProcess, registry: Registry
) -> None:
    output = await run_with(package_host, {"cargo": [f"{CRATE}@1.0.0"]}, CRATE)
    assert output == "42\n"
    assert f"/cargo/dl/{CRATE}/1.0.0/download" in registry.requests


@requires_toolchain("gem")
@pytest.mark.skipif(not HAS_GEM, reason="no gem to build the test's gem source with")
async def test_gems_install_with_their_commands_and_libraries(
    package_host: HostProcess, registry: Registry
) -> None:
    command = "steadprobe-gem && ruby -e 'require \"steadprobe\"; puts Steadprobe::VALUE + 1'"
    assert await run_with(package_host, {"gem": [f"{GEM}:1.0.0"]}, command) == "42\n43\n"
    assert f"/gems/gems/{GEM}-1.0.0.gem" in registry.requests


@requires_toolchain("go")
@pytest.mark.skipif(
    loopback_name() is None,
    reason="go sends no request for localhost or a loopback address through a proxy,"
    " and this machine's name does not resolve to loopback",
)
async def test_go_packages_install_with_their_commands_on_path(
    package_host: HostProcess, registry: Registry
) -> None:
    assert await run_with(package_host, {"go": ["example.com/steadprobe"]}, "steadprobe") == "42\n"
    assert "/go/example.com/steadprobe/@v/v1.0.0.zip" in registry.requests


async def test_apt_packages_are_unpacked_without_touching_the_machine(
    package_host: HostProcess,
) -> None:
    assert await run_with(package_host, {"apt": ["steadprobe-apt"]}, "steadprobe-apt") == (
        "from apt\n"
    )
    assert not machine_has("steadprobe-apt")


async def test_an_apt_name_is_taken_as_it_is_never_as_a_pattern(
    package_host: HostProcess,
) -> None:
    """``steadprobe-a.t`` names no package; apt would read it as a regular
    expression and install ``steadprobe-apt`` (``texlive.+``: 345 packages)."""
    client = client_of(package_host)
    sandbox = HostSandbox(client, new_id(), config(packages={"apt": ["steadprobe-a.t"]}))
    try:
        with pytest.raises(PackagesUnavailable, match=r"no package named 'steadprobe-a\.t'"):
            await sandbox.exec("true", op_key="k", timeout=INSTALL_SECONDS)
    finally:
        await client.destroy(sandbox.sandbox_id)
        await client.aclose()


def machine_has(package: str) -> bool:
    """Whether the machine itself has the package: its file, or dpkg's record of it."""
    if Path("/usr/bin", package).exists():
        return True
    query = subprocess.run(["dpkg-query", "-W", package], capture_output=True, timeout=30)
    return query.returncode == 0


@pytest.fixture
def stalled_host(tmp_path: Path, forker: ServeForker) -> Iterator[HostProcess]:
    """A sandbox host whose pip index takes connections and never answers
    (pip gives up after its timeouts and retries, about 100 s)."""
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(64)
        index = f"http://127.0.0.1:{silent.getsockname()[1]}/simple/"
        host = HostProcess(
            tmp_path / "state", env={"STEAD_PIP_INDEX_URL": index}, forker=forker
        ).start()
        try:
            yield host
        finally:
            host.stop()


@requires_toolchain("pip")
async def test_destroy_does_not_wait_for_an_install_on_a_stalled_registry(
    stalled_host: HostProcess,
) -> None:
    """Destroy cuts short the install its sandbox's wake waits for, and the
    call that woke it hears the sandbox is being destroyed or gone (before,
    destroy waited until pip gave up)."""
    client = client_of(stalled_host)
    sandbox = HostSandbox(client, new_id(), config(packages={"pip": ["steadprobe"]}))
    failed: list[BaseException] = []

    async def wake() -> None:
        try:
            await sandbox.exec("true", op_key="k", timeout=INSTALL_SECONDS)
        except Exception as exc:
            failed.append(exc)

    try:
        async with anyio.create_task_group() as group:
            group.start_soon(wake)
            # The host's log is a file: nothing to wait on but the line itself.
            while "installing packages" not in stalled_host.log_text():  # noqa: ASYNC110
                await anyio.sleep(0.1)
            with anyio.fail_after(INSTALL_SECONDS / 2):  # pip alone would take about 100 s
                await client.destroy(sandbox.sandbox_id)
    finally:
        await client.aclose()
    # Gone, or (the call's retry not yet made) being destroyed.
    assert len(failed) == 1 and isinstance(failed[0], SandboxNotFound | SandboxUnavailable), failed


def _networking(*, package_managers: bool) -> dict[str, object]:
    return {
        "type": "limited",
        "allowed_hosts": [],
        "allow_mcp_servers": False,
        "allow_package_managers": package_managers,
    }


@requires_toolchain("pip")
async def test_the_agents_own_package_managers_use_the_operators_mirrors(
    package_host: HostProcess, registry: Registry
) -> None:
    """With ``allow_package_managers``, bash in the sandbox gets the mirrors the
    installer gets: their settings (``PIP_INDEX_URL`` and its kin) and their
    hosts through the egress proxy, so ``pip install`` works from the mirror
    (before, only the installer had them: pip went to PyPI, the mirror was 403).
    Without it, neither."""
    client = client_of(package_host)
    allowed = HostSandbox(client, new_id(), config(networking=_networking(package_managers=True)))
    closed = HostSandbox(client, new_id(), config(networking=_networking(package_managers=False)))
    status = f"curl -s -o /dev/null -w '%{{http_code}}' {registry.pip_url}steadprobe/"
    settings = "printenv PIP_INDEX_URL npm_config_registry GOPROXY GOSUMDB; true"
    try:
        shown = await allowed.exec(settings, op_key="env", timeout=30)
        assert shown.output.split() == [registry.pip_url, registry.npm_url, registry.go_url, "off"]
        assert (await allowed.exec(status, op_key="curl", timeout=30)).output == "200"
        pip = (
            "python3 -m venv /tmp/v && /tmp/v/bin/pip install -q --no-input"
            " --disable-pip-version-check steadprobe"
            " && /tmp/v/bin/python -c 'import steadprobe; print(steadprobe.VALUE)'"
        )
        installed = await allowed.exec(pip, op_key="pip", timeout=INSTALL_SECONDS)
        assert (installed.exit_code, installed.output) == (0, "42\n")

        assert (await closed.exec(settings, op_key="env", timeout=30)).output == ""
        assert (await closed.exec(status, op_key="curl", timeout=30)).output == "403"
    finally:
        for sandbox in (allowed, closed):
            await client.destroy(sandbox.sandbox_id)
        await client.aclose()
