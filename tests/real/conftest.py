"""The real tier: ``specgate serve`` with vLLM CPU engines on the embedded model.

One gateway process is started per test session (engines take minutes to
start) on a free port; tests talk to it over real HTTP.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from bench.gateway_process import GatewayNotReady, GatewayProcess

ADMIN_KEY = "real-tier-admin-key"


@dataclass
class RealGateway:
    url: str
    model: str
    log: Path
    # ``GET /admin/policy`` as the gateway came up, before any test's request.
    policy_at_start: dict[str, Any] = field(default_factory=dict)

    def engine_stats(self, mode: str) -> dict:  # type: ignore[type-arg]
        return httpx.get(self.url + "/ready", timeout=10).json()["engines"][mode]


@pytest.fixture(scope="session")
def real_gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RealGateway]:
    log = tmp_path_factory.mktemp("gateway") / "specgate.log"
    process = GatewayProcess(log, {"SPECGATE_MAX_MODEL_LEN": "1024",
                                   "SPECGATE_ADMIN_KEY": ADMIN_KEY})
    try:
        process.__enter__()
    except GatewayNotReady as e:
        pytest.fail(str(e))
    try:
        model = httpx.get(process.url + "/v1/models").json()["data"][0]["id"]
        policy = httpx.get(process.url + "/admin/policy",
                           headers={"Authorization": f"Bearer {ADMIN_KEY}"}).json()
        yield RealGateway(process.url, model, log, policy)
    finally:
        process.stop()
