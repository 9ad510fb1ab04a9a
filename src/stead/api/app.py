"""``create_app(settings)``: the FastAPI application and the lifespan that owns its resources."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from functools import partial

import anyio
from fastapi import FastAPI

from stead.api import (
    agents,
    console,
    credential_checks,
    docs,
    environments,
    errors,
    events,
    files,
    health,
    memories,
    memory_search,
    memory_stores,
    memory_versions,
    openapi,
    resources,
    sandbox,
    sessions,
    skills,
    terminals,
    threads,
    usage,
    vaults,
    webhooks,
    work,
    workspace_limits,
)
from stead.api.deps import KeyCache, Services
from stead.api.idempotency import IdempotencyMiddleware
from stead.api.middleware import RequestIdMiddleware
from stead.api.observe import TelemetryMiddleware
from stead.config import Settings
from stead.failpoints import FailPoints
from stead.runtime import (
    Embedder,
    FileKeeper,
    LeaseSweeper,
    McpGateway,
    MemoryKeeper,
    Runtime,
    SandboxToolbox,
    SessionCredentials,
    SkillKeeper,
    WebhookCourier,
    WebhookEndpoints,
    brain_lock,
    build_loop,
    open_bus,
    webhook_parts,
)
from stead.sandbox import open_provider
from stead.schemas import SkillLimits
from stead.store import Store, open_store, single_brain
from stead.telemetry import Metrics, Telemetry, open_tracing
from stead.vault import load_secret_box

ROUTE_MODULES = (
    # The router tries routes in this order, a microsecond each: the calls of
    # every turn first (a session's events and stream, then sessions).
    events,
    sessions,
    agents,
    environments,
    resources,
    threads,
    vaults,
    credential_checks,
    files,
    skills,
    memory_stores,
    memories,
    memory_versions,
    memory_search,
    sandbox,
    terminals,
    work,
    health,
    usage,
    workspace_limits,
    console,
    webhooks,
)
CURSOR_SECRET = "page_cursors"
"""Made by migration 0004."""
SWEEP_DESTROY_SECONDS = 600.0
"""A destroy takes a final snapshot of the workspace; give a large one time."""


def stop_streams(app: FastAPI) -> None:
    """The server is stopping: open event streams end now. uvicorn waits for
    every open response before it stops (``timeout_graceful_shutdown``) and
    then cancels them with an error and its traceback in the log; an event
    stream only ends when its client leaves, so a server with one open was
    slow to stop, and loud. Its client reconnects (``Last-Event-ID``) to the
    next server."""
    found = getattr(app.state, "services", None)
    if isinstance(found, Services):
        found.stopping.set()


def create_app(
    settings: Settings,
    store: Store | None = None,
    *,
    data_dir_locked: bool = False,
    telemetry: Telemetry | None = None,
) -> FastAPI:
    """The app. With ``store`` given the caller owns it; otherwise the lifespan opens
    the one ``settings`` names, holds the data directory's brain lock while it runs
    (one brain per SQLite store; ``data_dir_locked``: the caller holds it for the
    app's whole life; a PostgreSQL store may have several, so none takes it and
    none treats another's runs as orphans), and closes it. ``telemetry``: the
    app's metrics registry and tracer (default: its own, spans exported as the
    ``OTEL_EXPORTER_OTLP_*`` settings say)."""
    observed = telemetry or Telemetry(Metrics(), open_tracing(settings))

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        async with AsyncExitStack() as stack:
            stack.callback(observed.tracing.shutdown)  # flushes spans not yet exported
            failpoints = FailPoints(settings.failpoints)
            opened = store
            exclusive = store is None and single_brain(settings.resolved_database_url)
            if exclusive and not data_dir_locked:
                stack.enter_context(brain_lock(settings.data_dir, settings.sqlite_file))
            if opened is None:
                opened = await open_store(
                    settings.resolved_database_url,
                    settings.sqlite_synchronous,
                    partial(failpoints.hit, "store.before_commit") if failpoints.armed else None,
                    settings.database_wait_seconds,
                )
                stack.push_async_callback(opened.close)
            bus = open_bus(settings)
            box = load_secret_box(settings)
            credentials = SessionCredentials(opened, box)
            keeper = FileKeeper(
                opened,
                settings.blob_config(),
                purge_interval=settings.file_purge_interval_seconds,
                upload_grace=settings.file_upload_grace_seconds,
                quota_bytes=settings.files_quota_bytes,
                failpoints=failpoints,
            )
            skill_keeper = SkillKeeper(
                opened,
                keeper,
                SkillLimits(
                    settings.skill_max_bytes,
                    settings.skill_max_file_bytes,
                    settings.skill_max_files,
                ),
                failpoints,
            )
            memory_keeper = MemoryKeeper(
                opened,
                keeper.blob_store,
                Embedder(),
                purge_interval=settings.file_purge_interval_seconds,
                upload_grace=settings.file_upload_grace_seconds,
            )
            toolbox = SandboxToolbox(
                settings,
                opened,
                open_provider(settings),
                credentials,
                observed,
                files=keeper,
                skills=skill_keeper.mount_files,
                memories=memory_keeper,
                failpoints=failpoints,
            )
            mcp = McpGateway(settings, opened, box, exclusive=exclusive, failpoints=failpoints)
            deps = build_loop(settings, opened, bus, toolbox, mcp, failpoints, observed)
            runtime = Runtime(deps, exclusive=exclusive)
            sweeper = None
            if toolbox.leased:
                sweeper = LeaseSweeper(
                    opened,
                    runtime.destroy_sandbox,
                    interval=settings.sandbox_sweep_interval_seconds,
                    destroy_timeout=SWEEP_DESTROY_SECONDS,
                )
            egress, terms = webhook_parts(settings)
            courier = WebhookCourier(opened, box, egress, terms, failpoints)
            app.state.services = Services(
                settings=settings,
                store=opened,
                bus=bus,
                keys=KeyCache(ttl=settings.auth_cache_seconds),
                runtime=runtime,
                sandboxes=toolbox,
                sweeper=sweeper,
                cursor_secret=await opened.installation_secret(CURSOR_SECRET),
                secrets=box,
                files=keeper,
                skills=skill_keeper,
                webhooks=WebhookEndpoints(opened, box, egress),
                memories=memory_keeper,
            )
            async with anyio.create_task_group() as group:
                await group.start(runtime.serve)
                if sweeper is not None:
                    group.start_soon(sweeper.serve)
                group.start_soon(keeper.serve)
                group.start_soon(courier.serve)
                group.start_soon(memory_keeper.serve)
                yield
                group.cancel_scope.cancel()

    # The routes go straight onto the app: routers kept nested by include_router
    # are matched again on every request, which cost more than the rest of a call.
    routes = [route for module in ROUTE_MODULES for route in module.router.routes]
    app = FastAPI(
        title="stead",
        version="0.1.0",
        description="Self-hosted runtime for the Claude Managed Agents API.",
        lifespan=lifespan,
        routes=routes,
        docs_url=None,  # docs.install serves them from shipped files, not a CDN
        redoc_url=None,
        # stead's own telemetry (TelemetryMiddleware) traces and counts every
        # request: FastAPI's would count them twice under a global OpenTelemetry
        # provider, and asks for one on every request.
        telemetry={"tracing": False, "metrics": False, "logs": False, "operation_spans": False},
    )
    app.state.telemetry = observed
    # Innermost: a replayed answer is still counted, logged and given a request id.
    app.add_middleware(IdempotencyMiddleware)
    # Added before RequestIdMiddleware, so it runs inside it and logs the request's id.
    app.add_middleware(TelemetryMiddleware, telemetry=observed)
    app.add_middleware(RequestIdMiddleware)
    errors.install(app)
    openapi.install(app)
    docs.install(app)
    console.install(app)
    return app
