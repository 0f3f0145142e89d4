"""Liveness and readiness."""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import JSONResponse

from gateway.deps import RuntimeDep

router = APIRouter()


@router.get("/health")
async def health() -> dict[str, str]:
    """The process answers; says nothing about the engines (see /ready)."""
    return {"status": "ok"}


@router.get("/ready")
async def ready(runtime: RuntimeDep) -> JSONResponse:
    """200 only when every configured engine is up and the gateway is not shutting
    down (a load balancer then stops sending it new requests); the body says why not."""
    engines = {name: engine.stats().report() for name, engine in runtime.engines.items()}
    held = runtime.containment.held()
    for name, report in engines.items():
        # Kinds of request kept off this engine since one of them stopped it.
        report["held_off"] = held.get(name, [])
    state = runtime.state
    # A store outage degrades learning, not serving: it shows here but keeps 200.
    store = {"up": state.store_up, "backend": type(state.store).__name__,
             "last_error": state.last_error, "outages": state.outages}
    status = "draining" if runtime.admission.closed else "ready" if runtime.ready \
        else "not_ready"
    body = {"status": status, "phase": runtime.phase,
            "error": runtime.error, "engines": engines, "policy_store": store}
    return JSONResponse(body, status_code=200 if runtime.ready else 503)
