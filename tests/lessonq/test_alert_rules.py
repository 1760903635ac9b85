"""The shipped Prometheus alert rules and Grafana dashboard: every series they query is one lessonboard
exports, and (where Debian's prometheus package provides promtool) the rules load and their unit tests pass."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from lessonq import metrics

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
RULES = DEPLOY / "prometheus" / "lessonboard-alerts.yml"
RULE_TESTS = DEPLOY / "prometheus" / "lessonboard-alerts.test.yml"
DASHBOARD = DEPLOY / "grafana" / "lessonboard-lessonq.json"
SERIES = re.compile(r"\b(?:chatcli|lessonboard)_lessonq_[a-z_]+")


def exported_series() -> set[str]:
    names = {
        "chatcli_lessonq_queue_depth",
        "chatcli_lessonq_dlq_size",
        "chatcli_lessonq_wal_segments",
        "lessonboard_lessonq_node_up",  # lessonq.gauges.NodeCollector, with lessonboard_scheduler_up
    }
    for metric in (
        metrics.ENQUEUE,
        metrics.ATTEMPTS,
        metrics.RETRIES,
        metrics.WAL_CORRUPTION,
        metrics.STALE_DISCARDED,
        metrics.PERSIST_FAILURES,
        metrics.POISON_RECORDS,
        metrics.ADOPTED_JOBS,
    ):
        names.add(metric._name + "_total")  # prometheus_client keeps a counter's name without "_total"
    names.add(metrics.PROCESSING_DURATION._name + "_bucket")
    return names


def queried_series() -> set[str]:
    rules = yaml.safe_load(RULES.read_text())
    exprs = [rule["expr"] for group in rules["groups"] for rule in group["rules"]]
    dashboard = json.loads(DASHBOARD.read_text())
    exprs += [target["expr"] for panel in dashboard["panels"] for target in panel["targets"]]
    return {name for expr in exprs for name in SERIES.findall(expr)}


def test_every_series_the_rules_and_dashboard_query_is_exported() -> None:
    queried = queried_series()
    assert len(queried) >= 10
    assert queried - exported_series() == set()


def test_every_alert_says_what_to_do() -> None:
    rules = yaml.safe_load(RULES.read_text())
    for rule in (r for group in rules["groups"] for r in group["rules"]):
        assert rule["labels"]["severity"] in ("warning", "critical"), rule["alert"]
        assert rule["annotations"]["summary"] and rule["annotations"]["description"], rule["alert"]


def test_every_alert_rule_has_a_unit_test_that_fires_it() -> None:
    rules = yaml.safe_load(RULES.read_text())
    alerts = {rule["alert"] for group in rules["groups"] for rule in group["rules"]}
    tests = yaml.safe_load(RULE_TESTS.read_text())["tests"]
    fired = {case["alertname"] for test in tests for case in test["alert_rule_test"] if case["exp_alerts"]}
    assert {"LessonqNodeLost", "LessonboardNoScheduler"} <= alerts
    assert alerts - fired == set()
    assert "lessonboard_scheduler_up" in RULES.read_text()


@pytest.mark.skipif(shutil.which("promtool") is None, reason="no promtool (Debian's prometheus package)")
def test_promtool_loads_the_rules_and_their_unit_tests_pass() -> None:
    checked = subprocess.run(["promtool", "check", "rules", str(RULES)], capture_output=True, text=True, timeout=60)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    tested = subprocess.run(
        ["promtool", "test", "rules", RULE_TESTS.name],
        cwd=RULE_TESTS.parent,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert tested.returncode == 0, tested.stdout + tested.stderr
