"""The real tier: ``specgate serve`` with vLLM CPU engines on the embedded model.

One gateway process is started per test session (engines take minutes to
start) on a free port; tests talk to it over real HTTP.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from tests.conftest import free_port

STARTUP_TIMEOUT_S = 1500
ADMIN_KEY = "real-tier-admin-key"


@dataclass
class RealGateway:
    url: str
    model: str
    log: Path

    def engine_stats(self, mode: str) -> dict:  # type: ignore[type-arg]
        return httpx.get(self.url + "/ready", timeout=10).json()["engines"][mode]


@pytest.fixture(scope="session")
def real_gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RealGateway]:
    port = free_port()
    log = tmp_path_factory.mktemp("gateway") / "specgate.log"
    env = {**os.environ, "SPECGATE_PORT": str(port), "SPECGATE_MAX_MODEL_LEN": "1024",
           "SPECGATE_ADMIN_KEY": ADMIN_KEY, "HF_HUB_OFFLINE": "1"}
    with log.open("w") as out:
        proc = subprocess.Popen([sys.executable, "-m", "gateway.cli", "serve"], env=env,
                                stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        _wait_ready(url, proc, log)
        model = httpx.get(url + "/v1/models").json()["data"][0]["id"]
        yield RealGateway(url, model, log)
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def _wait_ready(url: str, proc: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + STARTUP_TIMEOUT_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"specgate exited with {proc.returncode}:\n{log.read_text()[-4000:]}")
        try:
            r = httpx.get(url + "/ready", timeout=5)
            if r.status_code == 200:
                return
            if r.json().get("phase") == "failed":
                pytest.fail(f"start-up failed: {r.json()['error']}\n{log.read_text()[-4000:]}")
        except httpx.TransportError:
            pass
        time.sleep(2)
    pytest.fail(f"gateway not ready after {STARTUP_TIMEOUT_S}s:\n{log.read_text()[-4000:]}")
