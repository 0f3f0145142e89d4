"""The app factory: everything is built here, nothing at import time."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
from collections.abc import AsyncIterator

from fastapi import FastAPI

from gateway import generation_router, health, models
from gateway.access_log import AccessLogMiddleware
from gateway.admin import router as admin_router
from gateway.admission import Admission
from gateway.auth import ApiKeyMiddleware
from gateway.body_limit import BodyLimitMiddleware
from gateway.errors import install_error_handlers
from gateway.keys import KeyRing
from gateway.metrics import GatewayMetrics, ResponseMetricsMiddleware
from gateway.runtime import Components, Runtime
from gateway.settings import OPERATIONAL_ENDPOINTS, Settings
from gateway.shutdown import Drain
from policies.adaptive import AdaptivePolicy
from policies.adaptive_settings import AdaptiveSettings
from policies.base import Policy
from policies.bounded import bounded, stop_tasks
from policies.registry import build_policy
from policies.shared_state import SharedPolicyState
from policies.store.base import PolicyStore, StoreUnavailable

log = logging.getLogger(__name__)

# How long a cancelled background task (engine boot, store sync) may take to end.
STOP_TASKS_S = 5.0


def build_store(settings: Settings) -> PolicyStore:
    if settings.redis_url:
        from policies.store.redis_store import RedisStore

        return RedisStore(settings.redis_url, prefix=settings.redis_prefix,
                          timeout_s=settings.redis_timeout_s)
    from policies.store.memory import MemoryStore

    return MemoryStore()


def create_app(settings: Settings, *, components: Components | None = None,
               policy: Policy | None = None, store: PolicyStore | None = None) -> FastAPI:
    """Build the gateway.

    ``components`` injects a ready-made model, tokenizer and engines (tests use
    fakes); without it the lifespan prepares the model and starts vLLM engines
    as ``settings`` describe. ``store`` defaults to Redis when ``redis_url``
    is set, else in-memory. Serve it with ``gateway.shutdown.DrainingServer``
    (``app.state.drain``) for a graceful shutdown.
    """
    if policy is None:
        chosen = settings.policy
        params = chosen.adaptive.model_dump() if chosen.name == "adaptive" \
            else chosen.rule.model_dump()
        policy = build_policy(chosen.name, params)
    store = store or build_store(settings)
    replica_id = settings.replica_id or f"{socket.gethostname()}-{os.getpid()}"
    state = SharedPolicyState(store, replica_id, settings.policy.adaptive.model_copy())
    if isinstance(policy, AdaptivePolicy):
        adaptive: AdaptivePolicy = policy

        def follow(new: AdaptiveSettings) -> None:
            adaptive.settings = new
        state.on_settings_change(follow)

    if components is not None:
        given = components

        async def load() -> Components:
            return given
        model_name = components.model_name
    else:
        from gateway.bootstrap import load_components, served_model_name

        async def load() -> Components:
            return await load_components(settings)
        model_name = served_model_name(settings)

    admission = Admission(per_mode=settings.max_in_flight_per_mode,
                          total=settings.max_in_flight)
    drain = Drain(admission, settings.drain_timeout_s)
    runtime = Runtime(model_name, policy, state, settings.max_n, load, admission=admission,
                      request_timeout_s=settings.request_timeout_s,
                      keepalive_s=settings.sse_keepalive_s)
    metrics = GatewayMetrics(runtime)
    runtime.completion_observers.append(metrics.on_completed)
    runtime.decision_observers.append(metrics.on_decision)
    runtime.stream_error_observers.append(metrics.on_error)
    runtime.restart_observers.append(metrics.on_engine_restart)

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        await _adopt_or_publish_settings(state)
        tasks = [asyncio.create_task(runtime.boot()), asyncio.create_task(state.run())]
        try:
            yield
        finally:
            # DrainingServer has drained already; under any other server, whatever
            # is still in flight is stopped cleanly here rather than cut off.
            # Every step is bounded: a shutdown must end even with the store gone,
            # black-holed or flapping (a lost cancellation once hung it for good).
            drain.stop_now()
            state.stop()
            await stop_tasks(tasks, STOP_TASKS_S, "background task")
            await runtime.shutdown()
            with contextlib.suppress(StoreUnavailable, TimeoutError):
                # last observations and decisions
                await bounded(state.sync_once, final_sync_s(settings))
            with contextlib.suppress(TimeoutError):
                await bounded(store.close, final_sync_s(settings))

    app = FastAPI(title="SpecGate", version="0.1.0", lifespan=lifespan)
    app.state.runtime = runtime
    app.state.settings = settings
    app.state.metrics = metrics
    app.state.drain = drain
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


def final_sync_s(settings: Settings) -> float:
    """The last flush at shutdown: a few store calls' worth, not one per buffered key."""
    return 8 * settings.redis_timeout_s


async def _adopt_or_publish_settings(state: SharedPolicyState) -> None:
    """Shared live settings win; the first replica to find none publishes its own."""
    if not await state.sync_once():
        log.warning("policy store unreachable at start-up; using configured settings")
        return
    if state.remote_state().settings_version == 0:
        with contextlib.suppress(StoreUnavailable):
            await state.update_settings(state.settings)
