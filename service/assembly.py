"""Build the service a gateway runs from the one settings object."""

from __future__ import annotations

import os
import socket

from policies.base import Policy
from policies.registry import build_policy
from policies.shared_state import SharedPolicyState
from policies.store.base import PolicyStore
from service.admission import Admission
from service.runtime import Components, Runtime
from service.settings import Settings


def build_store(settings: Settings) -> PolicyStore:
    if settings.redis_url:
        from policies.store.redis_store import RedisStore

        return RedisStore(settings.redis_url, prefix=settings.redis_prefix,
                          timeout_s=settings.redis_timeout_s)
    from policies.store.memory import MemoryStore

    return MemoryStore()


def build_runtime(settings: Settings, *, components: Components | None = None,
                  policy: Policy | None = None, store: PolicyStore | None = None) -> Runtime:
    """``components`` injects a ready-made model, tokenizer and engines (tests use
    fakes); without it ``Runtime.start`` prepares the model and starts vLLM engines
    as ``settings`` describe. ``store`` defaults to Redis when ``redis_url`` is set,
    else in-memory."""
    if policy is None:
        chosen = settings.policy
        params = chosen.adaptive.model_dump() if chosen.name == "adaptive" \
            else chosen.rule.model_dump()
        policy = build_policy(chosen.name, params)
    store = store or build_store(settings)
    replica_id = settings.replica_id or f"{socket.gethostname()}-{os.getpid()}"
    state = SharedPolicyState(store, replica_id, settings.policy.adaptive.model_copy())
    state.on_settings_change(policy.follow)

    if components is not None:
        given = components

        async def load() -> Components:
            return given
        model_name = components.model_name
    else:
        from service.bootstrap import load_components, served_model_name

        async def load() -> Components:
            return await load_components(settings)
        model_name = served_model_name(settings)

    admission = Admission(per_mode=settings.max_in_flight_per_mode,
                          total=settings.max_in_flight)
    return Runtime(model_name, policy, state, store, settings.max_n, load, admission=admission,
                   request_timeout_s=settings.request_timeout_s,
                   keepalive_s=settings.sse_keepalive_s,
                   drain_timeout_s=settings.drain_timeout_s,
                   engine_start_timeout_s=settings.engine_start_timeout_s,
                   final_sync_s=final_sync_s(settings),
                   move_min_remaining_tokens=settings.move_min_remaining_tokens
                   if settings.move_in_flight else None,
                   fault_hold_s=settings.engine_fault_hold_s,
                   max_failovers=settings.max_failovers,
                   burst_window_s=settings.burst_window_s)


def final_sync_s(settings: Settings) -> float:
    """The last flush at shutdown: a few store calls' worth, not one per buffered key."""
    return 8 * settings.redis_timeout_s
