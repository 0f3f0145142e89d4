"""Load and acceptance of a remote vLLM server, read from its Prometheus ``/metrics``.

Counters arrive as running totals; the acceptance window and the step-time
profile are fed the differences between two polls. A counter that goes down
means the server restarted: the new value is the whole difference.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from prometheus_client.parser import text_string_to_metric_families

from engines.stats import AcceptanceWindow, SpecDecodeCounters, StepTimeProfile

_GAUGES = {"vllm:num_requests_running": "running", "vllm:num_requests_waiting": "waiting",
           "vllm:kv_cache_usage_perc": "kv_cache_usage"}
_COUNTERS = {"vllm:spec_decode_num_drafts": "drafts",
             "vllm:spec_decode_num_draft_tokens": "draft_tokens",
             "vllm:spec_decode_num_accepted_tokens": "accepted"}
_ITL = "vllm:inter_token_latency_seconds"


@dataclass
class RemoteMetrics:
    running: float = 0.0
    waiting: float = 0.0
    kv_cache_usage: float = 0.0
    totals: dict[str, float] = field(default_factory=dict)   # counter -> running total
    window: AcceptanceWindow = field(default_factory=AcceptanceWindow)
    steps: StepTimeProfile = field(default_factory=StepTimeProfile)
    reachable: bool = False
    polled_at: float = 0.0
    _itl: tuple[float, float] = (0.0, 0.0)                  # (sum, count) at the last poll

    def update(self, text: str, now: float) -> None:
        gauges: dict[str, float] = {}
        counters: dict[str, float] = {}
        itl_sum = itl_count = 0.0
        # Match on sample names: how the parser groups samples into families
        # depends on HELP/TYPE lines that exporters write differently.
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                name = sample.name
                if name in _GAUGES:
                    gauges[_GAUGES[name]] = gauges.get(_GAUGES[name], 0.0) + sample.value
                elif name.endswith("_total") and name.removesuffix("_total") in _COUNTERS:
                    key = _COUNTERS[name.removesuffix("_total")]
                    counters[key] = counters.get(key, 0.0) + sample.value
                elif name == _ITL + "_sum":
                    itl_sum += sample.value
                elif name == _ITL + "_count":
                    itl_count += sample.value
        self.running = gauges.get("running", 0.0)
        self.waiting = gauges.get("waiting", 0.0)
        self.kv_cache_usage = gauges.get("kv_cache_usage", 0.0)
        deltas = {k: _delta(self.totals.get(k), v) for k, v in counters.items()}
        self.totals = counters
        if deltas.get("drafts", 0.0) > 0:
            self.window.add(now, int(deltas["drafts"]), int(deltas.get("draft_tokens", 0)),
                            int(deltas.get("accepted", 0)))
        d_sum, d_count = _delta(self._itl[0], itl_sum), _delta(self._itl[1], itl_count)
        if d_count > 0 and self.running >= 1:
            # Inter-token latency is measured per engine step: a step-time sample
            # at (roughly) the batch the server reports now.
            self.steps.add(round(self.running), d_sum / d_count)
        self._itl = (itl_sum, itl_count)
        self.reachable = True
        self.polled_at = now

    def spec_counters(self) -> SpecDecodeCounters:
        return SpecDecodeCounters(num_drafts=int(self.totals.get("drafts", 0)),
                                  num_draft_tokens=int(self.totals.get("draft_tokens", 0)),
                                  num_accepted_tokens=int(self.totals.get("accepted", 0)))


def _delta(previous: float | None, current: float) -> float:
    if previous is None:
        return 0.0
    return current - previous if current >= previous else current
