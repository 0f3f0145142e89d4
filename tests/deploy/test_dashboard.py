"""The Grafana dashboard and its provisioning, checked as files (the live queries are in
test_prometheus_live.py)."""

from __future__ import annotations

import re
from typing import Any

from tests.deploy.files import (
    DEPLOY,
    concrete,
    data_panels,
    documented_metrics,
    exported_series_names,
    load_dashboard,
    load_yaml,
    metric_names,
    panel_queries,
)

# What the dashboard must show (the list), by the metrics that carry it.
REQUIRED_METRICS = {
    "traffic per mode": "specgate_requests_total",
    "decisions per mode": "specgate_decisions_total",
    "latency per mode": "specgate_time_to_first_token_seconds_bucket",
    "acceptance per mode": "specgate_spec_accepted_tokens_total",
    "acceptance gauge": "specgate_acceptance_rate",
    "engine load": "specgate_engine_running_requests",
    "KV-cache use": "specgate_engine_kv_cache_usage",
    "store health": "specgate_policy_store_up",
    "errors": "specgate_errors_total",
}


def test_panels_have_unique_ids_a_datasource_and_queries() -> None:
    dashboard = load_dashboard()
    assert dashboard["uid"] == "specgate" and dashboard["title"]
    nested = [p for row in dashboard["panels"] for p in row.get("panels", [])]
    ids = [p["id"] for p in dashboard["panels"] + nested]
    assert len(ids) == len(set(ids)), ids
    titles = [p["title"] for p in data_panels(dashboard)]
    assert len(titles) == len(set(titles)), titles
    for panel in data_panels(dashboard):
        assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, panel
        assert panel["targets"], panel["title"]
        refs = [t["refId"] for t in panel["targets"]]
        assert len(refs) == len(set(refs)), panel["title"]
        for target in panel["targets"]:
            assert target["expr"].strip() and target["datasource"] == panel["datasource"]


def test_panels_fit_the_grid_without_overlapping() -> None:
    boxes: list[tuple[str, dict[str, Any]]] = [(p["title"], p["gridPos"])
                                               for p in load_dashboard()["panels"]]
    for title, g in boxes:
        assert g["x"] >= 0 and g["w"] > 0 and g["x"] + g["w"] <= 24, title
    for i, (a, ga) in enumerate(boxes):
        for b, gb in boxes[i + 1:]:
            apart = (ga["x"] + ga["w"] <= gb["x"] or gb["x"] + gb["w"] <= ga["x"]
                     or ga["y"] + ga["h"] <= gb["y"] or gb["y"] + gb["h"] <= ga["y"])
            assert apart, (a, b)


def test_queries_use_only_documented_metrics() -> None:
    known = exported_series_names()
    used: set[str] = set()
    for name, expr in panel_queries(load_dashboard()):
        unknown = metric_names(expr) - known
        assert not unknown, (name, unknown, sorted(documented_metrics()))
        used |= metric_names(expr)
    missing = {what: m for what, m in REQUIRED_METRICS.items() if m not in used}
    assert not missing


def test_counters_and_histograms_are_read_the_prometheus_way() -> None:
    kinds = documented_metrics()
    for name, expr in panel_queries(load_dashboard()):
        for metric in metric_names(expr):
            base = re.sub(r"_(bucket|count|sum)$", "", metric)
            if kinds.get(base) == "histogram":
                # Quantiles from buckets, over Grafana's rate interval.
                assert metric.endswith("_bucket"), (name, metric)
                assert re.search(r"histogram_quantile\(0\.\d+, sum by \(le\b.*\(rate\("
                                 + metric + r"\{[^}]*\}\[\$__rate_interval\]\)\)\)", expr), name
            elif kinds.get(metric) == "counter":
                assert re.search(r"\b(rate|increase)\(" + metric + r"\{[^}]*\}\[\$__(rate_"
                                 r"interval|range)\]\)", expr), (name, metric)


def test_every_query_is_filtered_by_the_dashboard_variables() -> None:
    for name, expr in panel_queries(load_dashboard()):
        for selector in re.findall(r"specgate_\w+\{([^}]*)\}", expr):
            assert 'instance=~"$instance"' in selector, (name, selector)
        concrete(expr)  # no variable the tests (and Grafana) do not know


def test_provisioning_points_grafana_at_prometheus_and_the_dashboard() -> None:
    datasources = load_yaml(DEPLOY / "grafana" / "provisioning" / "datasources" /
                            "prometheus.yaml")["datasources"]
    (prometheus,) = datasources
    assert prometheus["type"] == "prometheus" and prometheus["url"] == "http://prometheus:9090"
    variables = {v["name"]: v for v in load_dashboard()["templating"]["list"]}
    assert variables["datasource"]["current"]["value"] == prometheus["uid"]
    scrape = load_yaml(DEPLOY / "prometheus" / "prometheus.yml")["global"]["scrape_interval"]
    assert prometheus["jsonData"]["timeInterval"] == scrape

    (provider,) = load_yaml(DEPLOY / "grafana" / "provisioning" / "dashboards" /
                            "specgate.yaml")["providers"]
    grafana = load_yaml(DEPLOY / "compose.yaml")["services"]["grafana"]
    assert f"./grafana/dashboards:{provider['options']['path']}:ro" in grafana["volumes"]
    assert "./grafana/provisioning:/etc/grafana/provisioning:ro" in grafana["volumes"]
