"""``GET/PUT /admin/policy``: the live settings and what the policy believes now."""

from __future__ import annotations

import json
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from gateway.admin.auth import AdminDep
from gateway.deps import RuntimeDep
from gateway.errors import OpenAIError
from service import policy_admin

router = APIRouter(prefix="/admin")


@router.get("/policy")
async def get_policy(runtime: RuntimeDep, _: AdminDep) -> dict[str, Any]:
    return policy_admin.describe(runtime)


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
    version, settings = await policy_admin.update_settings(runtime, patch)
    return JSONResponse({"settings_version": version,
                         "settings": settings.model_dump(mode="json")})
