"""The providers behind ``SandboxProvider``: the sandbox host, ``unsafe_local``
and ``off``. ``open_provider`` is the one place ``STEAD_SANDBOX`` is read; it
imports only the provider chosen, so a brain never loads the others."""

from __future__ import annotations

from stead.config import Settings
from stead.sandbox.address import HostAddress, parse_address
from stead.sandbox.provider import SandboxProvider


def host_address(settings: Settings) -> HostAddress:
    """Where the sandbox host of ``settings`` answers (``STEAD_SANDBOX_HOST``,
    else the socket in its state directory)."""
    if settings.sandbox_host:
        return parse_address(settings.sandbox_host, settings.sandbox_host_token)
    return HostAddress(unix_path=settings.resolved_sandbox_host_state_dir / "host.sock")


def open_provider(settings: Settings) -> SandboxProvider:
    """The provider ``settings.sandbox`` names; each is imported only when chosen."""
    if settings.sandbox == "off":
        from stead.sandbox.providers.off import OffProvider

        return OffProvider()
    if settings.sandbox == "unsafe_local":
        from stead.sandbox.providers.unsafe_local import UnsafeLocalProvider

        return UnsafeLocalProvider(settings.data_dir / "sandboxes")
    from stead.sandbox.providers.host import HostLauncher, HostProvider

    state_dir = settings.resolved_sandbox_host_state_dir
    address = host_address(settings)
    launcher = None
    if settings.sandbox_host_autostart and address.unix_path is not None:
        # The host listens where this brain dials: STEAD_SANDBOX_HOST, if a path.
        launcher = HostLauncher(
            state_dir,
            {
                "STEAD_DATA_DIR": str(settings.data_dir),
                "STEAD_SANDBOX_HOST_STATE_DIR": str(state_dir),
                "STEAD_SANDBOX_HOST": str(address.unix_path),
                "STEAD_LOG_LEVEL": settings.log_level,
            },
        )
    return HostProvider(address, launcher, token=settings.sandbox_host_token)
