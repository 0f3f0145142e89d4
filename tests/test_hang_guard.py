"""The test harness's own guards: tier timeouts, and the dump of where a hang sits."""

from __future__ import annotations

import asyncio
import io

import pytest

from tests.hang_guard import dump_everything, dump_tasks
from tests.tiers import FAST_S


async def test_the_dump_shows_each_task_down_to_its_innermost_await() -> None:
    gate = asyncio.Event()

    async def waits_at_the_gate() -> None:
        await gate.wait()
    stuck = asyncio.create_task(waits_at_the_gate(), name="stuck-task")
    await asyncio.sleep(0)
    out = io.StringIO()
    try:
        assert dump_tasks(asyncio.get_running_loop(), out) == 2   # it, and this test
    finally:
        gate.set()
        await stuck
    text = out.getvalue()
    assert "stuck-task" in text and "in waits_at_the_gate" in text
    assert "asyncio/locks.py" in text                            # the await inside Event.wait


def test_a_dump_without_a_file_descriptor_still_lists_threads() -> None:
    out = io.StringIO()
    dump_everything("title", out)
    assert "title" in out.getvalue() and "--- threads ---" in out.getvalue()
    assert "test_a_dump_without_a_file_descriptor" in out.getvalue()


def test_a_fast_test_gets_the_fast_tier_timeout(request: pytest.FixtureRequest) -> None:
    marker = request.node.get_closest_marker("timeout")
    assert marker is not None
    assert marker.args == (FAST_S,) and marker.kwargs == {"method": "signal"}
