"""``GET /metrics``: Prometheus text from a registry owned by this app.

A registry per app (not prometheus-client's global one) keeps replicas in one
process and tests independent. Values are read at scrape time from the live
objects, so nothing on the request path updates a metric it need not.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from fastapi import APIRouter
from fastapi.responses import Response
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

if TYPE_CHECKING:
    from gateway.runtime import Runtime


class _LiveCollector(Collector):
    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime

    def collect(self) -> Iterator[Metric]:
        state = self.runtime.state
        store_up = GaugeMetricFamily("specgate_policy_store_up",
                                     "1 when the shared policy store answers, else 0")
        store_up.add_metric([], 1.0 if state.store_up else 0.0)
        yield store_up
        outages = GaugeMetricFamily("specgate_policy_store_outages",
                                    "policy store outages seen since start")
        outages.add_metric([], float(state.outages))
        yield outages
        engine_up = GaugeMetricFamily("specgate_engine_up", "1 when the engine serves",
                                      labels=["mode"])
        for name, engine in self.runtime.engines.items():
            engine_up.add_metric([name], 1.0 if engine.is_up else 0.0)
        yield engine_up


class GatewayMetrics:
    def __init__(self, runtime: Runtime) -> None:
        self.registry = CollectorRegistry()
        self.registry.register(_LiveCollector(runtime))
        self.router = APIRouter()
        self.router.add_api_route("/metrics", self.scrape, methods=["GET"],
                                  include_in_schema=False)

    async def scrape(self) -> Response:
        return Response(generate_latest(self.registry), media_type=CONTENT_TYPE_LATEST)
