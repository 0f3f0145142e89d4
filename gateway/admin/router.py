"""``GET/PUT /admin/policy``: the live settings and what the policy believes now."""

from __future__ import annotations

import json
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse
from pydantic import ValidationError

from gateway.admin.auth import AdminDep
from gateway.deps import RuntimeDep
from gateway.errors import OpenAIError, unavailable
from policies.adaptive_settings import AdaptiveSettings
from policies.store.base import StoreUnavailable

router = APIRouter(prefix="/admin")


@router.get("/policy")
async def get_policy(runtime: RuntimeDep, _: AdminDep) -> dict[str, Any]:
    state = runtime.state
    now = runtime.state.clock()
    dispatcher = runtime.dispatcher
    load: dict[str, Any] = {}
    if dispatcher is not None:
        for name, m in dispatcher.loads().items():
            load[name] = {"up": m.up, "batch_size": m.batch_size,
                          "kv_cache_usage": round(m.kv_cache_usage, 4),
                          "method": m.method, "gpu_group": m.gpu_group,
                          "recent_acceptance_rate": m.acceptance_rate,
                          "recent_mean_accepted_length": m.mean_accepted_length,
                          "step_profile": [{"batch": b, "seconds": round(s, 6), "samples": n}
                                           for b, s, n in m.step_profile]}
    return {"policy": runtime.policy.name, "replica_id": state.replica_id,
            "settings_version": state.settings_version,
            "settings": state.settings.model_dump(mode="json"),
            "load": load, **state.describe(now),
            "previous_winner": dispatcher.memory.describe()["previous_winner"]
            if dispatcher is not None else {}}


@router.put("/policy")
async def put_policy(request: Request, runtime: RuntimeDep, _: AdminDep) -> JSONResponse:
    """Change some or all settings; unnamed settings keep their live values."""
    try:
        patch = json.loads(await request.body())
    except (ValueError, UnicodeDecodeError) as e:
        raise OpenAIError(400, f"the request body is not valid JSON: {e}") from e
    if not isinstance(patch, dict):
        raise OpenAIError(422, "the body must be a JSON object of settings",
                          type="invalid_request_error")
    state = runtime.state
    merged = {**state.settings.model_dump(mode="json"), **patch}
    try:
        settings = AdaptiveSettings.model_validate(merged)
    except ValidationError as e:
        err = e.errors()[0]
        field = ".".join(str(p) for p in err["loc"])
        raise OpenAIError(422, f"{field}: {err['msg']}", param=field,
                          code="invalid_setting") from e
    unknown = sorted(set(settings.enabled_modes or ()) - set(runtime.engines))
    if unknown:
        raise OpenAIError(422, f"enabled_modes: unknown modes {unknown}; configured: "
                               f"{sorted(runtime.engines)}", param="enabled_modes",
                          code="invalid_setting")
    try:
        version = await state.update_settings(settings)
    except StoreUnavailable as e:
        raise unavailable("the policy store is unavailable; settings not changed",
                          code="store_unavailable") from e
    return JSONResponse({"settings_version": version,
                         "settings": settings.model_dump(mode="json")})
