"""Say where a test hangs: every pending asyncio task's stack and every thread's.

A hung asyncio test usually shows an idle event loop: the main thread's
stack only says "in select()", and the await that never returns is in some
task's coroutine chain, which no thread dump shows. So shortly before
pytest-timeout fails a test, a timer thread prints both to the terminal
(capture suspended, so the dump survives even a run that is then killed).
pytest-timeout's ``signal`` method (``tests/conftest.py`` sets it) then fails
just that test; its ``thread`` method would end the whole session.
"""

from __future__ import annotations

import asyncio
import faulthandler
import gc
import io
import sys
import threading
import traceback
from collections.abc import Iterator
from typing import Any, TextIO

import pytest

# The dump fires this long before the test's timeout (at most a tenth of it).
LEAD_S = 5.0

def _running_loops() -> list[asyncio.AbstractEventLoop]:
    """The loops running now, in any thread. The running loop is a thread-local
    that another thread cannot read, and a test's loop belongs to pytest-asyncio,
    so the timer thread finds them among live objects. By type, not isinstance():
    that reads ``__class__``, which some lazy modules (torch's) answer with a
    deprecation warning, an error under this suite's filters."""
    return [o for o in gc.get_objects()
            if issubclass(type(o), asyncio.AbstractEventLoop) and o.is_running()]


def dump_tasks(loop: asyncio.AbstractEventLoop, out: TextIO) -> int:
    """Print every pending task of ``loop`` with its await chain; return how many.

    Called from another thread while the loop may be running: good enough for
    a diagnosis (``all_tasks`` copes with the set changing underneath it)."""
    tasks = [t for t in asyncio.all_tasks(loop) if not t.done()]
    print(f"--- {len(tasks)} pending asyncio tasks ---", file=out)
    for task in tasks:
        print(f"\n{task!r}", file=out)
        for line in _await_chain(task):
            print(line, file=out)
    return len(tasks)


def _await_chain(task: asyncio.Task[Any]) -> Iterator[str]:
    """The task's stack down to the innermost await (``Task.print_stack`` shows only
    the outermost frame of a suspended coroutine)."""
    coro: Any = task.get_coro()
    depth = 0
    while coro is not None and depth < 100:
        frame = getattr(coro, "cr_frame", None) or getattr(coro, "ag_frame", None) \
            or getattr(coro, "gi_frame", None)
        if frame is not None:
            code = frame.f_code
            yield f"  {code.co_filename}:{frame.f_lineno} in {code.co_name}"
        nxt = getattr(coro, "cr_await", None) or getattr(coro, "ag_await", None) \
            or getattr(coro, "gi_yieldfrom", None)
        if nxt is None:
            if coro is not None and not hasattr(coro, "cr_frame"):
                yield f"  awaiting {coro!r}"
            break
        coro = nxt
        depth += 1


def dump_everything(title: str, out: TextIO) -> None:
    print(f"\n{'+' * 20} {title} {'+' * 20}", file=out)
    for loop in _running_loops():
        dump_tasks(loop, out)
    print("--- threads ---", file=out, flush=True)
    try:
        faulthandler.dump_traceback(out, all_threads=True)
    except (io.UnsupportedOperation, AttributeError, ValueError):  # no real file descriptor
        for ident, frame in sys._current_frames().items():
            print(f"thread {ident}:", file=out)
            traceback.print_stack(frame, file=out)
    print("+" * 60, file=out, flush=True)


def _dump_for(item: pytest.Item, timeout: float) -> None:
    capman = item.config.pluginmanager.getplugin("capturemanager")
    title = f"{item.nodeid} is about to overrun its {timeout:g} s timeout"
    if capman is None:
        dump_everything(title, sys.stderr)
        return
    with capman.global_and_fixture_disabled():
        dump_everything(title, sys.stderr)


@pytest.hookimpl(hookwrapper=True)
def pytest_timeout_set_timer(item: pytest.Item, settings: Any) -> Iterator[None]:
    timeout = float(settings.timeout)
    timer = threading.Timer(max(timeout - min(LEAD_S, timeout / 10), 0.0), _dump_for,
                            (item, timeout))
    timer.daemon = True
    timer.name = f"hang guard {item.nodeid}"
    item.stash[_TIMER] = timer
    timer.start()
    yield


@pytest.hookimpl(hookwrapper=True)
def pytest_timeout_cancel_timer(item: pytest.Item) -> Iterator[None]:
    timer = item.stash.get(_TIMER, None)
    if timer is not None:
        timer.cancel()
    yield


_TIMER = pytest.StashKey[threading.Timer]()
