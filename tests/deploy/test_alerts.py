"""Alert rules and the Prometheus config, checked by promtool itself."""

from __future__ import annotations

import subprocess
from pathlib import Path

from tests.deploy.files import (
    ALERTS,
    DEPLOY,
    alert_rules,
    documented_metrics,
    exported_series_names,
    metric_names,
    require_tool,
)

REQUIRED_ALERTS = {"SpecGateAcceptanceCollapse", "SpecGateEngineDown", "SpecGatePolicyStoreDown",
                   "SpecGateHighErrorRate", "SpecGateTTFTHighP99", "SpecGateGatewayDown"}


def promtool(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([require_tool("promtool"), *args], capture_output=True, text=True,
                          timeout=60, check=False)


def test_promtool_check_rules() -> None:
    r = promtool("check", "rules", str(ALERTS))
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"SUCCESS: {len(alert_rules())} rules found" in r.stdout


def test_promtool_unit_tests_of_the_alerts() -> None:
    # Each alert fires on the series it is for, with its labels and texts, and stays
    # quiet where it should (4xx, starting engines, a steady drafter).
    r = promtool("test", "rules", str(DEPLOY / "prometheus" / "alerts_test.yml"))
    assert r.returncode == 0, r.stdout + r.stderr


def test_promtool_check_config() -> None:
    r = promtool("check", "config", str(DEPLOY / "prometheus" / "prometheus.yml"))
    assert r.returncode == 0, r.stdout + r.stderr


def test_promtool_rejects_a_broken_rule(tmp_path: Path) -> None:
    # The check above can fail: a rule with bad PromQL does not pass.
    broken = tmp_path / "broken.yml"
    broken.write_text(ALERTS.read_text().replace("specgate_engine_up == 0",
                                                 "specgate_engine_up == ", 1))
    assert promtool("check", "rules", str(broken)).returncode != 0


def test_every_alert_is_documented_and_uses_documented_metrics() -> None:
    rules = alert_rules()
    names = [r["alert"] for r in rules]
    assert len(names) == len(set(names))
    assert REQUIRED_ALERTS <= set(names)
    known = exported_series_names()
    for rule in rules:
        assert rule["labels"]["severity"] in ("critical", "warning"), rule["alert"]
        assert rule["annotations"]["summary"] and rule["annotations"]["description"]
        unknown = metric_names(rule["expr"]) - known
        assert not unknown, (rule["alert"], unknown, sorted(documented_metrics()))
