"""What ``stead serve`` says at start about what it will use: models, sandboxes,
store. Pure, from the settings, so an operator sees a missing model before the
first turn fails, and never sees a secret."""

from __future__ import annotations

from urllib.parse import urlsplit

from stead.config import Settings


def summary(settings: Settings) -> list[str]:
    return [_models(settings), _sandboxes(settings), _store(settings)]


def _models(settings: Settings) -> str:
    used = []
    if settings.anthropic_api_key:
        where = settings.upstream_base_url or "https://api.anthropic.com"
        used.append(f"Anthropic at {_without_credentials(where)}")
    for name, url in sorted(settings.openai_models.items()):
        used.append(f"{name} at {_without_credentials(url)} (OpenAI-compatible)")
    if not used:
        return (
            "models: none configured, so every turn fails; set ANTHROPIC_API_KEY or map "
            "models in STEAD_OPENAI_MODELS"
        )
    return "models: " + "; ".join(used)


def _sandboxes(settings: Settings) -> str:
    if settings.sandbox == "off":
        return "sandboxes: off (built-in tools answer that there is no sandbox)"
    if settings.sandbox == "unsafe_local":
        return "sandboxes: unsafe_local (tools run as this user, NOT isolated)"
    where = settings.sandbox_host or str(settings.resolved_sandbox_host_state_dir / "host.sock")
    started = ", started if none answers" if settings.sandbox_host_autostart else ""
    return (
        f"sandboxes: bwrap, by the sandbox host at {_without_credentials(where)}{started} "
        "(it outlives this server; stop it with stead sandbox-host stop)"
    )


def _store(settings: Settings) -> str:
    url = settings.resolved_database_url
    if url.startswith("sqlite"):
        return f"store: SQLite at {url.split(':///', 1)[-1]}"
    from stead.store.postgres import shown

    return f"store: PostgreSQL at {_without_credentials(shown(url))}"


def _without_credentials(url: str) -> str:
    parts = urlsplit(url)
    if parts.password is None and parts.username is None:
        return url
    host = parts.hostname or ""
    netloc = f"{host}:{parts.port}" if parts.port else host
    return parts._replace(netloc=netloc).geturl()
