"""``create_app(settings)``: the FastAPI application and the lifespan that owns its resources."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI

from stead.api import agents, environments, errors, events, openapi, sessions
from stead.api.deps import KeyCache, Services
from stead.api.middleware import RequestIdMiddleware
from stead.config import Settings
from stead.runtime import EventBus
from stead.store import Store, open_store


def create_app(settings: Settings, store: Store | None = None) -> FastAPI:
    """The app. With ``store`` given the caller owns it; otherwise the lifespan opens
    and closes the one ``settings`` names."""

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        opened = store or await open_store(
            settings.resolved_database_url, settings.sqlite_synchronous
        )
        app.state.services = Services(
            settings=settings,
            store=opened,
            bus=EventBus(settings.sse_subscriber_buffer),
            keys=KeyCache(ttl=settings.auth_cache_seconds),
        )
        try:
            yield
        finally:
            if store is None:
                await opened.close()

    app = FastAPI(
        title="stead",
        version="0.1.0",
        description="Self-hosted runtime for the Claude Managed Agents API.",
        lifespan=lifespan,
    )
    app.add_middleware(RequestIdMiddleware)
    errors.install(app)
    for module in (agents, environments, sessions, events):
        app.include_router(module.router)
    openapi.install(app)
    return app
