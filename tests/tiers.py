"""Each test tier fails on its own time limit, not the suite-wide 900 s.

The tiers are folders: everything under ``tests/real`` is marked ``real``
(``pytest -m "not real"`` runs the rest); ``_SLOW`` lists the slow ones.

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


def tier_timeout(item: pytest.Item) -> float:
    path = Path(str(item.path))
    if item.get_closest_marker("real") is not None:
        return REAL_S
    if any(path.is_relative_to(_TESTS / slow) for slow in _SLOW):
        return SLOW_S
    return FAST_S


@pytest.hookimpl(tryfirst=True)  # before ``-m "not real"`` deselects by marker
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if Path(str(item.path)).is_relative_to(_TESTS / "real"):
            item.add_marker(pytest.mark.real)  # the real tier is its folder
        if item.get_closest_marker("timeout") is None:
            item.add_marker(pytest.mark.timeout(tier_timeout(item), method="signal"))
