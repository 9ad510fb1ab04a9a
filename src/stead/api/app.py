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

ROUTE_MODULES = (agents, environments, sessions, events)


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

    # The routes go straight onto the app: routers kept nested by include_router
    # are matched again on every request, which cost more than the rest of a call.
    routes = [route for module in ROUTE_MODULES for route in module.router.routes]
    app = FastAPI(
        title="stead",
        version="0.1.0",
        description="Self-hosted runtime for the Claude Managed Agents API.",
        lifespan=lifespan,
        routes=routes,
    )
    app.add_middleware(RequestIdMiddleware)
    errors.install(app)
    openapi.install(app)
    return app
