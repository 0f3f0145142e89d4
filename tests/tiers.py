"""Each test tier fails on its own time limit, not the suite-wide 900 s.

The tiers are folders: everything under ``tests/real`` is marked ``real``
(``pytest -m "not real"`` runs the rest); ``_SLOW`` lists the slow ones. The
``unit`` tier (``make test-unit``, the developer's loop) is the policy, service,
engine-contract and gateway tests that need nothing but the Python packages: no
redis-server, Prometheus, prepared model, subprocess or fuzzing run.

A hang in a fast test used to cost the whole 900 s (pyproject's ``timeout``,
kept as the outer bound) before anyone saw it. Every collected test without
a ``timeout`` marker of its own gets its tier's limit, always with the
``signal`` method: it fails just that test, after ``tests/hang_guard.py`` has
printed every pending asyncio task and thread (the ``thread`` method would
end the whole session).
"""

from __future__ import annotations

from pathlib import Path

import pytest

FAST_S = 60.0
# Subprocesses, hypothesis fuzzing, simulator sweeps: longer, still far from 900 s.
SLOW_S = 300.0
# The session's vLLM CPU engines start inside the first real test (minutes).
REAL_S = 900.0

_TESTS = Path(__file__).parent
_SLOW = ("sim", "deploy", "gateway/test_fuzz_openapi.py", "gateway/test_hostile_input.py",
         "gateway/test_clients_fake.py")
_UNIT = ("policies", "service", "engines", "gateway", "test_layers.py", "test_doc_links.py")
# Not in the unit tier: what needs redis-server or the prepared model, and the server's
# life-cycle tests, which wait out real timers (deadlines, keep-alives, idle
# connections, drains).
_NOT_UNIT = (*_SLOW, "engines/embedded", "gateway/test_shared_redis.py",
             "policies/test_redis_store.py", "gateway/test_timeouts.py",
             "gateway/test_keepalive.py", "gateway/test_http_server.py",
             "gateway/test_shutdown.py", "gateway/test_shutdown_store_outage.py")
# Modules that import vLLM's tool parsers and request models (seconds, tens on a busy
# machine): one worker of the unit tier's two runs them all (``--dist loadgroup``), so
# that only one pays the import; they, and the module that imports vLLM's n-gram
# proposer, get the slow limit.
_VLLM_GROUP = ("gateway/test_vllm_fields.py", "gateway/test_tools.py",
               "gateway/test_responses_tools.py", "gateway/test_responses.py")
_VLLM = (*_VLLM_GROUP, "engines/test_prompt_lookup.py")
# Fixtures that start a server process of their own (redis-server).
_PROCESS_FIXTURES = frozenset({"redis_server"})


def is_unit(item: pytest.Item) -> bool:
    path = Path(str(item.path))
    return any(path.is_relative_to(_TESTS / unit) for unit in _UNIT) \
        and not any(path.is_relative_to(_TESTS / slow) for slow in _NOT_UNIT) \
        and not _PROCESS_FIXTURES & set(getattr(item, "fixturenames", ()))


def tier_timeout(item: pytest.Item) -> float:
    path = Path(str(item.path))
    if item.get_closest_marker("real") is not None:
        return REAL_S
    if any(path.is_relative_to(_TESTS / slow) for slow in (*_SLOW, *_VLLM)):
        return SLOW_S
    return FAST_S


@pytest.hookimpl(tryfirst=True)  # before ``-m "not real"`` deselects by marker
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if Path(str(item.path)).is_relative_to(_TESTS / "real"):
            item.add_marker(pytest.mark.real)  # the real tier is its folder
        elif is_unit(item):
            item.add_marker(pytest.mark.unit)
        if any(Path(str(item.path)).is_relative_to(_TESTS / v) for v in _VLLM_GROUP):
            item.add_marker(pytest.mark.xdist_group("vllm"))
        if item.get_closest_marker("timeout") is None:
            item.add_marker(pytest.mark.timeout(tier_timeout(item), method="signal"))
