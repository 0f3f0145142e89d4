"""A vLLM engine start that outlives ``engine_start_timeout_s`` is given up: /ready says
which engine failed and the engine-core process it was waiting on is gone."""

from __future__ import annotations

import time
from pathlib import Path

import psutil
import pytest

from bench.gateway_process import GatewayNotReady, GatewayProcess


def test_a_start_past_its_bound_fails_cleanly(tmp_path: Path) -> None:
    # One second is far less than a vLLM CPU engine needs to load the model.
    process = GatewayProcess(tmp_path / "specgate.log",
                             {"SPECGATE_ENGINE_START_TIMEOUT_S": "1"})
    process.start()
    try:
        with pytest.raises(GatewayNotReady) as e:
            process.wait_ready(timeout_s=300)
        assert "did not start within 1 s" in str(e.value), process.log_tail()
        deadline = time.monotonic() + 30
        while alive_children(process.pid) and time.monotonic() < deadline:
            time.sleep(0.5)
        time.sleep(5)       # the abandoned constructor has ended: nothing comes back
        assert alive_children(process.pid) == [], process.log_tail()
        assert psutil.Process(process.pid).is_running()      # the gateway itself stays up
    finally:
        process.stop()


def alive_children(pid: int) -> list[psutil.Process]:
    out = []
    for child in psutil.Process(pid).children(recursive=True):
        try:
            if child.status() != psutil.STATUS_ZOMBIE:
                out.append(child)
        except psutil.NoSuchProcess:
            continue
    return out
