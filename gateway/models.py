"""``GET /v1/models``: the one model every mode serves."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter

from gateway.deps import RuntimeDep
from gateway.errors import ERROR_RESPONSES, OpenAIError

router = APIRouter(responses=ERROR_RESPONSES)


def _model_card(runtime: RuntimeDep) -> dict[str, Any]:
    return {"id": runtime.model_name, "object": "model", "created": runtime.created,
            "owned_by": "specgate"}


@router.get("/v1/models")
async def list_models(runtime: RuntimeDep) -> dict[str, Any]:
    return {"object": "list", "data": [_model_card(runtime)]}


@router.get("/v1/models/{model_id:path}")
async def get_model(model_id: str, runtime: RuntimeDep) -> dict[str, Any]:
    if model_id != runtime.model_name:
        raise OpenAIError(404, f"The model '{model_id}' does not exist", type="not_found_error",
                          param="model", code="model_not_found")
    return _model_card(runtime)
