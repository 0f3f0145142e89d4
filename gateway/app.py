"""The app factory: everything is built here, nothing at import time."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

from fastapi import FastAPI

from gateway import health, models
from gateway.chat import router as chat_router
from gateway.completions import router as completions_router
from gateway.errors import install_error_handlers
from gateway.runtime import Components, Runtime
from gateway.settings import Settings
from policies.base import Policy
from policies.registry import build_policy


def create_app(settings: Settings, *, components: Components | None = None,
               policy: Policy | None = None) -> FastAPI:
    """Build the gateway.

    ``components`` injects a ready-made model, tokenizer and engines (tests use
    fakes); without it the lifespan prepares the model and starts vLLM engines
    as ``settings`` describe.
    """
    if policy is None:
        params = settings.policy.model_dump(exclude={"name"})
        policy = build_policy(settings.policy.name, params)

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

    runtime = Runtime(model_name, policy, settings.max_n, load)

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        boot = asyncio.create_task(runtime.boot())
        try:
            yield
        finally:
            boot.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await boot
            await runtime.shutdown()

    app = FastAPI(title="SpecGate", version="0.1.0", lifespan=lifespan)
    app.state.runtime = runtime
    app.state.settings = settings
    install_error_handlers(app)
    for module in (health, models, chat_router, completions_router):
        app.include_router(module.router)
    return app
