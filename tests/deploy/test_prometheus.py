"""deploy/prometheus: promtool checks the rules and the config and runs the rules' unit tests."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.deploy.conftest import PROMETHEUS_SERIES, rule_groups
from tests.deploy.promql import metric_names
from tests.scrape import in_ci, run_promtool


def test_promtool_check_rules(deploy_dir: Path) -> None:
    files = sorted(str(p) for p in (deploy_dir / "prometheus" / "rules").glob("*.yml"))
    assert len(files) == 2
    r = run_promtool("check", "rules", *files)
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.count("SUCCESS") == 2


def test_promtool_test_rules(deploy_dir: Path) -> None:
    tests = sorted(str(p) for p in (deploy_dir / "prometheus" / "tests").glob("*.yml"))
    assert tests
    r = run_promtool("test", "rules", *tests)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "SUCCESS" in r.stdout


def test_every_alert_is_unit_tested(deploy_dir: Path) -> None:
    text = "".join(p.read_text() for p in (deploy_dir / "prometheus" / "tests").glob("*.yml"))
    alerts = {r["alert"] for g in rule_groups() for r in g["rules"] if "alert" in r}
    untested = {a for a in alerts if f"alertname: {a}\n" not in text}
    assert not untested


def test_promtool_check_config_finds_the_rules(deploy_dir: Path) -> None:
    r = run_promtool("check", "config", "prometheus.yml", cwd=deploy_dir / "prometheus")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "2 rule files found" in r.stdout


def test_rules_name_only_series_graywire_exports(exported: frozenset[str], recorded: frozenset[str]) -> None:
    known = exported | recorded | PROMETHEUS_SERIES
    for group in rule_groups():
        for rule in group["rules"]:
            unknown = metric_names(rule["expr"]) - known
            assert not unknown, (rule.get("alert") or rule.get("record"), unknown)


def test_alerts_carry_severity_and_text() -> None:
    for group in rule_groups():
        for rule in group["rules"]:
            if "alert" in rule:
                assert rule["labels"]["severity"] in {"warning", "critical"}
                assert rule["annotations"]["summary"] and rule["annotations"]["description"]


def test_recording_rules_follow_level_metric_operation_naming(recorded: frozenset[str]) -> None:
    for name in recorded:
        level, metric, op = name.split(":")
        assert level and op and metric.startswith("graywire_"), name


def test_alertmanager_config_is_valid(deploy_dir: Path) -> None:
    amtool = shutil.which("amtool") or ("/usr/bin/amtool" if os.access("/usr/bin/amtool", os.X_OK) else None)
    if amtool is None:
        reason = "amtool not found (apt-get install prometheus-alertmanager)"
        if in_ci():
            pytest.fail(f"CI is set but {reason}", pytrace=False)
        pytest.skip(reason)
    r = subprocess.run(
        [amtool, "check-config", str(deploy_dir / "alertmanager" / "alertmanager.yml")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 0, r.stdout + r.stderr
