"""The app factory: everything is built here, nothing at import time."""

from __future__ import annotations

import contextlib
import importlib.metadata
import logging
from collections.abc import AsyncIterator

from fastapi import FastAPI

from gateway import generation_router, health, models
from gateway.access_log import AccessLogMiddleware
from gateway.admin import router as admin_router
from gateway.auth import ApiKeyMiddleware
from gateway.body_limit import BodyLimitMiddleware
from gateway.chat.endpoint import ChatEndpoint
from gateway.completions.endpoint import CompletionEndpoint
from gateway.errors import install_error_handlers
from gateway.generation_router import Endpoints
from gateway.metrics import GatewayMetrics, ResponseMetricsMiddleware
from gateway.responses.endpoint import ResponsesEndpoint
from policies.base import Policy
from policies.store.base import PolicyStore
from service.assembly import build_runtime
from service.keys import KeyRing
from service.runtime import Components
from service.settings import OPERATIONAL_ENDPOINTS, Settings

log = logging.getLogger(__name__)


def create_app(settings: Settings, *, components: Components | None = None,
               policy: Policy | None = None, store: PolicyStore | None = None) -> FastAPI:
    """Build the gateway.

    The service it serves is ``service.assembly.build_runtime``'s (see there for
    ``components``, ``policy`` and ``store``); serve the app with
    ``gateway.shutdown.http_server`` for a graceful shutdown.
    """
    runtime = build_runtime(settings, components=components, policy=policy, store=store)
    metrics = GatewayMetrics(runtime)
    runtime.completion_observers.append(metrics.on_completed)
    runtime.decision_observers.append(metrics.on_decision)
    runtime.move_observers.append(metrics.on_move)
    runtime.failover_observers.append(metrics.on_failover)
    runtime.restart_observers.append(metrics.on_engine_restart)

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        await runtime.start()
        try:
            yield
        finally:
            await runtime.stop()

    app = FastAPI(title="SpecGate", version=package_version(), lifespan=lifespan)
    app.state.runtime = runtime
    app.state.settings = settings
    app.state.metrics = metrics
    app.state.endpoints = Endpoints(ChatEndpoint(), CompletionEndpoint(), ResponsesEndpoint(),
                                    on_stream_error=metrics.on_error)
    admin_key = settings.admin_key
    app.state.admin_keys = KeyRing([admin_key.get_secret_value()] if admin_key else [])
    install_error_handlers(app)
    # Outermost last: metrics see every answer, auth runs before any body is read.
    app.add_middleware(BodyLimitMiddleware, max_body_bytes=settings.max_body_bytes,
                       count_error=metrics.on_error)
    app.add_middleware(ApiKeyMiddleware, keys=KeyRing(settings.resolved_api_keys()),
                       protected=set(OPERATIONAL_ENDPOINTS) - set(settings.public_endpoints),
                       count_error=metrics.on_error)
    app.add_middleware(ResponseMetricsMiddleware, metrics=metrics)
    app.add_middleware(AccessLogMiddleware)
    for module in (health, models, generation_router, admin_router):
        app.include_router(module.router)
    app.include_router(metrics.router)
    return app


def package_version() -> str:
    """The installed package's version (pyproject.toml), as /openapi.json reports it."""
    try:
        return importlib.metadata.version("specgate")
    except importlib.metadata.PackageNotFoundError:
        return "0+unknown"
