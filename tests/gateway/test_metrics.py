"""/metrics: every SpecGate metric is there, and moves with traffic."""

from __future__ import annotations

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.conftest import MODEL, FakeGateway


async def scrape(gateway: FakeGateway) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    r = await gateway.client.get("/metrics")
    assert r.status_code == 200
    assert r.headers["content-type"].startswith("text/plain")
    samples = {}
    for family in text_string_to_metric_families(r.text):
        for s in family.samples:
            samples[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return samples


def value(samples: dict, name: str, **labels: str) -> float:  # type: ignore[type-arg]
    return float(samples.get((name, tuple(sorted(labels.items()))), 0.0))


EXPECTED = [
    "specgate_requests_total", "specgate_decisions_total",
    "specgate_time_to_first_token_seconds_bucket", "specgate_time_per_output_token_seconds_bucket",
    "specgate_e2e_request_latency_seconds_bucket", "specgate_prompt_tokens_total",
    "specgate_completion_tokens_total", "specgate_errors_total", "specgate_engine_up",
    "specgate_engine_running_requests", "specgate_engine_waiting_requests",
    "specgate_engine_in_flight_requests", "specgate_engine_kv_cache_usage",
    "specgate_acceptance_rate", "specgate_mean_accepted_length", "specgate_spec_drafts_total",
    "specgate_spec_draft_tokens_total", "specgate_spec_accepted_tokens_total",
    "specgate_policy_store_up", "specgate_policy_store_outages_total",
    "specgate_admitted_requests", "specgate_admission_limit", "specgate_draining",
]


async def test_metrics_move_with_traffic(gateway: FakeGateway) -> None:
    before = await scrape(gateway)
    body = {"model": MODEL, "max_tokens": 5, "messages": [{"role": "user", "content": "hi"}],
            "metadata": {"workload_class": "chat"}}
    for stream in (False, True):
        r = await gateway.client.post("/v1/chat/completions", json={**body, "stream": stream},
                                      headers={"x-spec-mode": "dflash"})
        assert r.status_code == 200
    await gateway.client.post("/v1/chat/completions", json=body)
    await gateway.client.post("/v1/chat/completions", json={"model": MODEL})
    after = await scrape(gateway)
    names = {name for name, _ in after}
    assert not [m for m in EXPECTED if m not in names]

    endpoint = "/v1/chat/completions"
    assert value(after, "specgate_requests_total", endpoint=endpoint, mode="dflash",
                 status="200", forced="1") - value(before, "specgate_requests_total",
                                                   endpoint=endpoint, mode="dflash",
                                                   status="200", forced="1") == 2
    assert value(after, "specgate_requests_total", endpoint=endpoint, mode="none",
                 status="400", forced="0") == 1
    assert value(after, "specgate_errors_total", type="invalid_request_error",
                 code="validation") == 1
    assert value(after, "specgate_decisions_total", mode="dflash", reason="override") == 2
    assert value(after, "specgate_completion_tokens_total", mode="dflash") == 10
    assert value(after, "specgate_time_to_first_token_seconds_count", mode="dflash") == 2
    assert value(after, "specgate_time_per_output_token_seconds_count", mode="dflash") == 2
    assert value(after, "specgate_spec_draft_tokens_total", mode="dflash") > 0
    assert value(after, "specgate_acceptance_rate", mode="dflash",
                 **{"class": "chat"}) == pytest.approx(0.8, abs=0.01)
    assert value(after, "specgate_engine_up", mode="standard") == 1
    assert value(after, "specgate_policy_store_up") == 1


async def test_engine_failure_inside_a_stream_is_counted(gateway: FakeGateway) -> None:
    gateway.engines["ngram"].fail_after_tokens = 1
    body = {"model": MODEL, "max_tokens": 5, "stream": True,
            "messages": [{"role": "user", "content": "hi"}]}
    r = await gateway.client.post("/v1/chat/completions", json=body,
                                  headers={"x-spec-mode": "ngram"})
    assert r.status_code == 200 and "engine_failed" in r.text
    samples = await scrape(gateway)
    assert value(samples, "specgate_errors_total", type="server_error", code="engine_failed") == 1
