"""Where the deployment files are, how to read them, and the tools the tests need."""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
ALERTS = DEPLOY / "prometheus" / "alerts.yml"
DASHBOARD = DEPLOY / "grafana" / "dashboards" / "specgate.json"
METRICS_DOC = ROOT / "docs" / "metrics.md"

# What a Grafana variable stands for when a panel's query goes to Prometheus
# directly. Prometheus in the tests has run for seconds: one minute covers it all.
GRAFANA_VARIABLES = {"__rate_interval": "1m", "__range": "1m", "__interval": "1s",
                     "instance": ".*", "mode": ".*"}
_VARIABLE = re.compile(r"\$\{(\w+)(?::\w+)?\}|\$(\w+)")
_METRIC = re.compile(r"\bspecgate_[a-z0-9_]+")


def require_tool(name: str) -> str:
    """The path of a system tool; a clear failure (not a skip) when it is missing."""
    path = shutil.which(name)
    if path is None:
        pytest.fail(f"{name!r} is not installed: run `make install` (scripts/install.sh "
                    f"installs the Debian package 'prometheus', which has prometheus and "
                    f"promtool)", pytrace=False)
    return path


def load_yaml(path: Path) -> Any:
    with path.open() as f:
        return yaml.safe_load(f)


def load_yaml_all(path: Path) -> list[Any]:
    with path.open() as f:
        return [doc for doc in yaml.safe_load_all(f) if doc is not None]


def load_dashboard() -> dict[str, Any]:
    with DASHBOARD.open() as f:
        data: dict[str, Any] = json.load(f)
    return data


def data_panels(dashboard: dict[str, Any]) -> list[dict[str, Any]]:
    """Every panel that shows data: rows left out, collapsed rows' panels included."""
    panels: list[dict[str, Any]] = []
    for panel in dashboard["panels"]:
        if panel["type"] == "row":
            panels.extend(panel.get("panels", []))
        else:
            panels.append(panel)
    return panels


def panel_queries(dashboard: dict[str, Any]) -> Iterator[tuple[str, str]]:
    """(``panel title / refId``, PromQL as written in the dashboard) for every target."""
    for panel in data_panels(dashboard):
        for target in panel["targets"]:
            yield f"{panel['title']} / {target['refId']}", target["expr"]


def concrete(expr: str) -> str:
    """The query with Grafana's variables replaced by values Prometheus accepts."""
    def value(m: re.Match[str]) -> str:
        name = m.group(1) or m.group(2)
        if name not in GRAFANA_VARIABLES:
            raise KeyError(f"unknown Grafana variable ${name} in {expr!r}")
        return GRAFANA_VARIABLES[name]

    return _VARIABLE.sub(value, expr)


def alert_rules() -> list[dict[str, Any]]:
    return [rule for group in load_yaml(ALERTS)["groups"] for rule in group["rules"]]


def metric_names(expr: str) -> set[str]:
    return set(_METRIC.findall(expr))


def documented_metrics() -> dict[str, str]:
    """Metric name → type, from the table in docs/metrics.md."""
    metrics = {}
    for line in METRICS_DOC.read_text().splitlines():
        m = re.match(r"\|\s*`(specgate_\w+)`\s*\|\s*(\w+)\s*\|", line)
        if m:
            metrics[m.group(1)] = m.group(2)
    return metrics


def exported_series_names() -> set[str]:
    """The names Prometheus stores for the documented metrics (histograms: three each)."""
    names: set[str] = set()
    for name, kind in documented_metrics().items():
        if kind == "histogram":
            names.update(f"{name}_{suffix}" for suffix in ("bucket", "count", "sum"))
        else:
            names.add(name)
    return names
