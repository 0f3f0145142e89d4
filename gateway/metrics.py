"""``GET /metrics``: Prometheus text from a registry owned by this app.

A registry per app (not prometheus-client's global one) keeps several apps in
one process (tests, replicas) independent. Request-path metrics are updated
where the facts arise (a completed request, a decision, an error); engine and
policy-store state is read at scrape time from the live objects, so the
request path pays nothing for it. Every metric is listed in docs/metrics.md.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import TYPE_CHECKING

from fastapi import APIRouter
from fastapi.responses import Response
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Histogram,
    generate_latest,
)
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from engines.stats import LOAD_FIELDS
from service.stream import Completed, Move, Routing

if TYPE_CHECKING:
    from service.runtime import Runtime

# LLM latencies span milliseconds (a cached short answer) to minutes (long
# generations queued behind a full batch).
LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 30.0,
                   60.0, 120.0, 300.0, 600.0)
PER_TOKEN_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.15, 0.2, 0.3,
                     0.5, 1.0, 2.5)


GENERATION_ENDPOINTS = frozenset({"/v1/chat/completions", "/v1/completions", "/v1/responses"})


class _LiveCollector(Collector):
    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime

    def collect(self) -> Iterator[Metric]:
        state = self.runtime.state
        yield _gauge("specgate_policy_store_up", "1 when the shared policy store answers",
                     [([], 1.0 if state.store_up else 0.0)])
        outages = CounterMetricFamily("specgate_policy_store_outages",
                                      "policy store outages since start")
        outages.add_metric([], float(state.outages))
        yield outages
        load: dict[str, list[tuple[list[str], float]]] = {f: [] for f in LOAD_FIELDS}
        rate, length, drafts, draft_tokens, accepted = [], [], [], [], []
        for name, engine in self.runtime.engines.items():
            s = engine.stats()
            for field, value in s.load().items():
                load[field].append(([name], value))
            if s.spec is not None:
                drafts.append(([name], float(s.spec.num_drafts)))
                draft_tokens.append(([name], float(s.spec.num_draft_tokens)))
                accepted.append(([name], float(s.spec.num_accepted_tokens)))
                if s.recent_acceptance_rate is not None:
                    rate.append(([name, "all"], s.recent_acceptance_rate))
                if s.recent_mean_accepted_length is not None:
                    length.append(([name, "all"], s.recent_mean_accepted_length))
        now = state.clock()
        for cls in state.known_classes():
            for mode, learned in state.acceptance_for(cls, now).items():
                rate.append(([mode, cls], learned.acceptance_rate))
                length.append(([mode, cls], learned.mean_accepted_length))
        admission = self.runtime.admission
        yield _gauge("specgate_admitted_requests", "requests admitted to the mode and not "
                     "finished (what max_in_flight_per_mode bounds)",
                     [([name], float(admission.in_flight(name))) for name in self.runtime.engines],
                     ["mode"])
        yield _gauge("specgate_admission_limit", "admitted requests allowed before 429 "
                     "(0 = no bound)", [(["per_mode"], float(admission.per_mode)),
                                        (["total"], float(admission.total_limit))], ["scope"])
        yield _gauge("specgate_draining", "1 while shutting down (new requests get 503)",
                     [([], 1.0 if admission.closed else 0.0)])
        for field, (metric, help_text) in _LOAD_GAUGES.items():
            yield _gauge(metric, help_text, load[field], ["mode"])
        yield _gauge("specgate_acceptance_rate", "accepted / drafted tokens, recent window "
                     "(class=all: the engine's last 60 s; else the policy's decayed estimate)",
                     rate, ["mode", "class"])
        yield _gauge("specgate_mean_accepted_length", "tokens per verification step, bonus "
                     "token included, recent window", length, ["mode", "class"])
        for metric, help_text, values in (
                ("specgate_spec_drafts", "verification steps with drafts", drafts),
                ("specgate_spec_draft_tokens", "draft tokens proposed", draft_tokens),
                ("specgate_spec_accepted_tokens", "draft tokens accepted", accepted)):
            family = CounterMetricFamily(metric, help_text, labels=["mode"])
            for labels, value in values:
                family.add_metric(labels, value)
            yield family


# One gauge per engine load field (``EngineStats.load``).
_LOAD_GAUGES = {
    "up": ("specgate_engine_up", "1 when the engine serves"),
    "running": ("specgate_engine_running_requests", "requests in the engine's batch"),
    "waiting": ("specgate_engine_waiting_requests", "requests queued in the engine"),
    "in_flight": ("specgate_engine_in_flight_requests",
                  "requests the gateway has handed to the engine"),
    "kv_cache_usage": ("specgate_engine_kv_cache_usage", "fraction of KV-cache blocks in use"),
}


def _gauge(name: str, help_text: str, values: list[tuple[list[str], float]],
           labels: list[str] | None = None) -> GaugeMetricFamily:
    family = GaugeMetricFamily(name, help_text, labels=labels or [])
    for label_values, value in values:
        family.add_metric(label_values, value)
    return family


class GatewayMetrics:
    def __init__(self, runtime: Runtime) -> None:
        r = self.registry = CollectorRegistry()
        self.requests = Counter("specgate_requests", "requests answered",
                                ["endpoint", "mode", "status", "forced"], registry=r)
        self.decisions = Counter("specgate_decisions", "routing decisions",
                                 ["mode", "reason"], registry=r)
        self.moves = Counter("specgate_moves", "requests in flight continued on the mode "
                             "auto moved their device group to", ["source", "target"],
                             registry=r)
        self.failovers = Counter("specgate_failovers", "requests in flight continued on "
                                 "another mode after their engine died", ["source", "target"],
                                 registry=r)
        self.ttft = Histogram("specgate_time_to_first_token_seconds",
                              "decision to first generated token", ["mode"],
                              buckets=LATENCY_BUCKETS, registry=r)
        self.tpot = Histogram("specgate_time_per_output_token_seconds",
                              "mean time per output token after the first", ["mode"],
                              buckets=PER_TOKEN_BUCKETS, registry=r)
        self.e2e = Histogram("specgate_e2e_request_latency_seconds",
                             "request arrival to last byte", ["endpoint", "mode"],
                             buckets=LATENCY_BUCKETS, registry=r)
        self.prompt_tokens = Counter("specgate_prompt_tokens", "prompt tokens served",
                                     ["mode"], registry=r)
        self.completion_tokens = Counter("specgate_completion_tokens",
                                         "completion tokens generated", ["mode"], registry=r)
        self.errors = Counter("specgate_errors", "error responses by type and code",
                              ["type", "code"], registry=r)
        self.engine_restarts = Counter("specgate_engine_restarts", "attempts to restart an "
                                       "engine that died, by outcome (ok, failed)",
                                       ["mode", "outcome"], registry=r)
        r.register(_LiveCollector(runtime))
        self.runtime = runtime
        self._zeroed = False
        self.router = APIRouter()
        self.router.add_api_route("/metrics", self.scrape, methods=["GET"],
                                  include_in_schema=False)

    def on_decision(self, routing: Routing) -> None:
        self.decisions.labels(routing.decision.mode, routing.decision.kind.value).inc()

    def on_completed(self, done: Completed) -> None:
        mode = done.routing.decision.mode
        f = done.finished
        self.prompt_tokens.labels(mode).inc(f.prompt_tokens)
        self.completion_tokens.labels(mode).inc(f.completion_tokens)
        if done.first_token_s is not None:
            self.ttft.labels(mode).observe(done.first_token_s)
            if f.completion_tokens > 1:
                self.tpot.labels(mode).observe(
                    (done.total_s - done.first_token_s) / (f.completion_tokens - 1))

    def on_response(self, endpoint: str, mode: str, status: int, forced: bool,
                    seconds: float) -> None:
        self.requests.labels(endpoint, mode, str(status), "1" if forced else "0").inc()
        self.e2e.labels(endpoint, mode).observe(seconds)

    def on_move(self, move: Move) -> None:
        self.moves.labels(move.source, move.target).inc()

    def on_failover(self, move: Move) -> None:
        self.failovers.labels(move.source, move.target).inc()

    def _zero_rare_counters(self) -> None:
        """Engine deaths are rare: their counters are at 0 from the first scrape once the
        engines are known, so that a first death is an increase, not a new series."""
        modes = list(self.runtime.engines)
        if self._zeroed or not modes:
            return
        for mode in modes:
            for outcome in ("ok", "failed"):
                self.engine_restarts.labels(mode, outcome)
            for target in modes:
                if target != mode:
                    self.failovers.labels(mode, target)
        self._zeroed = True

    def on_error(self, type_: str, code: str | None) -> None:
        self.errors.labels(type_, code or "").inc()

    def on_engine_restart(self, mode: str, ok: bool) -> None:
        self.engine_restarts.labels(mode, "ok" if ok else "failed").inc()

    async def scrape(self) -> Response:
        self._zero_rare_counters()
        return Response(generate_latest(self.registry), media_type=CONTENT_TYPE_LATEST)


class ResponseMetricsMiddleware:
    """Counts every ``/v1/*`` response by mode, status and override, and times it to
    its last byte. Pure ASGI (not BaseHTTPMiddleware), which would break streaming
    disconnect detection; the routing is what the endpoint left on the request's
    state (none for a request refused before a mode was chosen)."""

    def __init__(self, app: object, metrics: GatewayMetrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: dict, receive: object, send: object) -> None:  # type: ignore[type-arg]
        path = scope.get("path", "")
        if scope["type"] != "http" or path not in GENERATION_ENDPOINTS:
            await self.app(scope, receive, send)  # type: ignore[operator]
            return
        began = time.monotonic()
        status = 499  # the client left before any response started
        state = scope.setdefault("state", {})  # shared by copies of the scope downstream

        async def wrapped(message: dict) -> None:  # type: ignore[type-arg]
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)  # type: ignore[operator]

        try:
            await self.app(scope, receive, wrapped)  # type: ignore[operator]
        finally:
            routing = state.get("routing")
            mode = routing.decision.mode if isinstance(routing, Routing) else "none"
            forced = isinstance(routing, Routing) and routing.forced
            self.metrics.on_response(path, mode, status, forced, time.monotonic() - began)
