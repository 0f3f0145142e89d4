"""The live policy, for operators: what it believes now, and changing its settings."""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from policies.adaptive_settings import AdaptiveSettings
from policies.store.base import StoreUnavailable
from service.errors import InvalidSetting, Unavailable
from service.runtime import Runtime


def describe(runtime: Runtime) -> dict[str, Any]:
    state = runtime.state
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
                                           for b, s, n in m.step_profile],
                          "prefill_s": m.prefill_s,
                          "draft_token_s": m.draft_token_s,
                          "step_drafted": m.step_drafted}
    return {"policy": runtime.policy.name, "replica_id": state.replica_id,
            "settings_version": state.settings_version,
            "settings": state.settings.model_dump(mode="json"),
            "load": load, **state.describe(state.clock()),
            "previous_winner": dispatcher.memory.describe()["previous_winner"]
            if dispatcher is not None else {}}


async def update_settings(runtime: Runtime, patch: dict[str, Any]) -> tuple[int, AdaptiveSettings]:
    """Change some or all settings (unnamed ones keep their live values) for every
    replica; returns the new settings version and settings."""
    state = runtime.state
    merged = {**state.settings.model_dump(mode="json"), **patch}
    try:
        settings = AdaptiveSettings.model_validate(merged)
    except ValidationError as e:
        err = e.errors()[0]
        field = ".".join(str(p) for p in err["loc"])
        raise InvalidSetting(f"{field}: {err['msg']}", param=field,
                             code="invalid_setting") from e
    unknown = sorted(set(settings.enabled_modes or ()) - set(runtime.engines))
    if unknown:
        raise InvalidSetting(f"enabled_modes: unknown modes {unknown}; configured: "
                             f"{sorted(runtime.engines)}", param="enabled_modes",
                             code="invalid_setting")
    try:
        version = await state.update_settings(settings)
    except StoreUnavailable as e:
        raise Unavailable("the policy store is unavailable; settings not changed",
                          code="store_unavailable") from e
    return version, settings
