"""The dashboard and the alert rules against a real Prometheus scraping a real gateway.

The gateway runs in-process with fake engines, served over HTTP on loopback;
Prometheus (the Debian binary) scrapes it every second and evaluates the alert
rules. After some traffic, every panel query and every alert expression must be
valid PromQL, every panel must show data, and every rule must evaluate cleanly.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest

from service.settings import Settings
from tests.conftest import MODEL, FakeGateway, fake_engines, serve
from tests.deploy.files import (
    ALERTS,
    alert_rules,
    concrete,
    load_dashboard,
    panel_queries,
)
from tests.deploy.prometheus_server import PrometheusServer

MODES = ("standard", "ngram", "eagle3", "dflash")
TRAFFIC_S = 3.5


@pytest.fixture
async def gateway() -> AsyncIterator[FakeGateway]:
    # The adaptive policy (the default), so auto traffic gets cost/hold/explore decisions.
    async for g in serve(fake_engines(token_delay_s=0.002), settings=Settings()):
        yield g


@pytest.fixture
async def prometheus(gateway: FakeGateway, tmp_path: Path) -> AsyncIterator[PrometheusServer]:
    server = PrometheusServer(tmp_path, target=urlsplit(gateway.url).netloc, rule_files=[ALERTS])
    server.start()
    try:
        async with httpx.AsyncClient(timeout=5) as client:
            await server.wait_ready(client)
        yield server
    finally:
        server.kill()


async def one_round(gateway: FakeGateway, i: int) -> None:
    client = gateway.client
    chat = {"model": MODEL, "max_tokens": 6, "messages": [{"role": "user", "content": "hi"}]}
    for mode in MODES:
        r = await client.post("/v1/chat/completions", json={**chat, "stream": i % 2 == 1},
                              headers={"x-spec-mode": mode, "x-workload-class": "chat"})
        assert r.status_code == 200, r.text
    for cls in ("chat", "code"):
        r = await client.post("/v1/chat/completions", json=chat,
                              headers={"x-workload-class": cls})
        assert r.status_code == 200, r.text
    r = await client.post("/v1/completions", json={"model": MODEL, "prompt": "a b a b",
                                                   "max_tokens": 5})
    assert r.status_code == 200, r.text
    # Two kinds of 400: a body that does not validate, and an unknown forced mode.
    assert (await client.post("/v1/chat/completions", json={"model": MODEL})).status_code == 400
    r = await client.post("/v1/chat/completions", json=chat, headers={"x-spec-mode": "bogus"})
    assert r.status_code == 400


async def wait_for(what: str, check: Any, prometheus: PrometheusServer,
                   timeout_s: float = 20.0) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            result = await check()
        except httpx.TransportError:
            result = None
        if result:
            return result
        await asyncio.sleep(0.2)
    pytest.fail(f"Prometheus: {what} within {timeout_s} s; its log:\n{prometheus.log_tail()}")


async def test_every_panel_and_alert_query_runs_and_panels_show_data(
        gateway: FakeGateway, prometheus: PrometheusServer) -> None:
    async with httpx.AsyncClient(timeout=10) as client:
        async def target_up() -> bool:
            targets = (await prometheus.api(client, "targets"))["data"]["activeTargets"]
            return bool(targets) and all(t["health"] == "up" for t in targets)

        await wait_for("scraped the gateway", target_up, prometheus)

        # Traffic over several scrapes, so every counter moves between two of them.
        began = time.monotonic()
        i = 0
        while time.monotonic() - began < TRAFFIC_S:
            await one_round(gateway, i)
            i += 1
            await asyncio.sleep(0.05)
        ended = time.time()

        async def scraped_twice_since() -> bool:
            answer = await prometheus.api(client, "query", query="timestamp(specgate_engine_up)")
            samples = answer["data"]["result"]
            return bool(samples) and min(float(s["value"][1]) for s in samples) > ended + 1.5

        await wait_for("scraped twice after the traffic", scraped_twice_since, prometheus)

        failures = []
        for name, expr in panel_queries(load_dashboard()):
            answer = await prometheus.api(client, "query", query=concrete(expr))
            if answer["status"] != "success":
                failures.append(f"{name}: {answer.get('error')}\n    {concrete(expr)}")
                continue
            values = [float(s["value"][1]) for s in answer["data"]["result"]]
            if not values:
                failures.append(f"{name}: no data after traffic\n    {concrete(expr)}")
            elif not any(math.isfinite(v) for v in values):
                failures.append(f"{name}: only NaN/Inf {values}\n    {concrete(expr)}")
        for rule in alert_rules():
            answer = await prometheus.api(client, "query", query=rule["expr"])
            if answer["status"] != "success":
                failures.append(f"alert {rule['alert']}: {answer.get('error')}")
        assert not failures, "\n".join(failures)

        # The rules as Prometheus itself loaded and evaluated them, every second.
        async def rules_evaluated() -> list[dict[str, Any]] | None:
            groups = (await prometheus.api(client, "rules"))["data"]["groups"]
            rules = [r for g in groups for r in g["rules"]]
            return rules if rules and all(r["health"] != "unknown" for r in rules) else None

        loaded = await wait_for("evaluated every rule", rules_evaluated, prometheus)
        assert sorted(r["name"] for r in loaded) == sorted(r["alert"] for r in alert_rules())
        bad = [f"{r['name']}: {r['health']} {r.get('lastError')}" for r in loaded
               if r["health"] != "ok"]
        assert not bad, bad
        # Healthy fake engines and store: nothing fires, nothing pends.
        firing = [r["name"] for r in loaded if r["state"] != "inactive"]
        assert not firing, firing


async def test_dashboard_variables_list_every_mode_and_replica(
        gateway: FakeGateway, prometheus: PrometheusServer) -> None:
    variables = {v["name"]: v for v in load_dashboard()["templating"]["list"]}
    async with httpx.AsyncClient(timeout=10) as client:
        for name in ("mode", "instance"):
            query = variables[name]["definition"]
            metric, label = query.removeprefix("label_values(").removesuffix(")").split(", ")

            async def values(metric: str = metric, label: str = label) -> list[str] | None:
                answer = await prometheus.api(client, f"label/{label}/values",
                                              **{"match[]": metric})
                return list(answer["data"]) or None

            found = await wait_for(f"answered {query}", values, prometheus)
            expected = set(MODES) if name == "mode" else {urlsplit(gateway.url).netloc}
            assert set(found) == expected, (query, found)
