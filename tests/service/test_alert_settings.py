"""The ``alerts:`` configuration section: defaults, secrets from the environment, clear errors."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest
import yaml

from graywire.service.alert_settings import PAGERDUTY_EVENTS_URL
from graywire.service.alerts.dispatcher import destinations
from graywire.service.config import load_settings

EXAMPLE = {
    "alerts": {
        "external_url": "https://graywire.example.com/",
        "alertmanager": {"urls": ["http://am-0:9093", "http://am-1:9093"]},
        "receivers": [
            {"name": "oncall", "type": "pagerduty", "routing_key_env": "GW_TEST_PD_KEY"},
            {"name": "noc", "type": "webhook", "url": "https://noc.example.com/hook",
             "secret_env": "GW_TEST_HMAC"},
            {"name": "chat", "type": "slack", "url": "https://hooks.slack.com/services/T0/B0/x",
             "min_severity": "critical"},
        ],
    }
}  # fmt: skip


def write(tmp_path: Path, doc: dict) -> Path:
    path = tmp_path / "graywire.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def test_alerts_are_off_by_default() -> None:
    assert not load_settings(None).alerts.enabled


def test_example_config_with_secrets_from_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GW_TEST_PD_KEY", "R0UT1NGKEY0000000000000000000000")
    monkeypatch.setenv("GW_TEST_HMAC", "hmac-secret")
    alerts = load_settings(write(tmp_path, EXAMPLE)).alerts
    assert alerts.enabled and alerts.external_url == "https://graywire.example.com"
    pd, noc, _ = alerts.receivers
    assert pd.routing_key_value() == "R0UT1NGKEY0000000000000000000000"
    assert pd.endpoint == PAGERDUTY_EVENTS_URL
    assert noc.secret_value() == "hmac-secret"
    assert "hmac-secret" not in repr(alerts)  # secrets never reach logs
    names = {
        d.name: (d.type, d.sync.min_severity, d.sync.refresh_s, d.sync.inhibit, d.sync.group_wait_s)
        for d in destinations(alerts)
    }
    # Alertmanager does its own inhibition and grouping; direct receivers get graywire's.
    assert names == {
        "alertmanager http://am-0:9093": ("alertmanager", "warning", 60.0, False, 0.0),
        "alertmanager http://am-1:9093": ("alertmanager", "warning", 60.0, False, 0.0),
        "oncall": ("pagerduty", "warning", None, True, 30.0),
        "noc": ("webhook", "warning", None, True, 30.0),
        "chat": ("slack", "critical", None, True, 30.0),
    }


def test_environment_overrides_the_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GW_TEST_PD_KEY", "k")
    monkeypatch.setenv("GW_TEST_HMAC", "s")
    monkeypatch.setenv("GRAYWIRE_ALERTS__MIN_SEVERITY", "critical")
    assert load_settings(write(tmp_path, EXAMPLE)).alerts.min_severity == "critical"


@pytest.mark.parametrize(
    ("receiver", "message"),
    [
        ({"name": "pd", "type": "pagerduty"}, "pagerduty needs routing_key"),
        ({"name": "pd", "type": "pagerduty", "routing_key_env": "GW_TEST_UNSET"}, "GW_TEST_UNSET is not set"),
        ({"name": "w", "type": "webhook"}, "url is required"),
        ({"name": "w", "type": "webhook", "url": "ftp://x"}, "not an http(s) URL"),
        ({"name": "s", "type": "slack", "url": "https://x", "secret": "k"}, "type webhook only"),
        ({"name": "w", "type": "email", "url": "https://x"}, "receivers.0.type"),
        ({"name": "bad name", "type": "webhook", "url": "https://x"}, "receivers.0.name"),
    ],
)
def test_bad_receivers_are_named_in_the_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, receiver: dict, message: str
) -> None:
    monkeypatch.delenv("GW_TEST_UNSET", raising=False)
    with pytest.raises(ValueError, match="invalid configuration") as err:
        load_settings(write(tmp_path, {"alerts": {"receivers": [receiver]}}))
    assert message in str(err.value)


def test_duplicate_names_and_bad_durations_are_rejected(tmp_path: Path) -> None:
    hook = {"name": "w", "type": "webhook", "url": "https://x"}
    with pytest.raises(ValueError, match="receiver names must be unique: w"):
        load_settings(write(tmp_path, {"alerts": {"receivers": [hook, hook]}}))
    with pytest.raises(ValueError, match=r"alerts\.alertmanager\.refresh_interval"):
        load_settings(write(tmp_path, {"alerts": {"alertmanager": {"refresh_interval": "0s"}}}))
    with pytest.raises(ValueError, match=r"alerts\.group_wait"):
        load_settings(write(tmp_path, {"alerts": {"group_wait": "soon"}}))
    assert load_settings(write(tmp_path, {"alerts": {"group_wait": "0s"}})).alerts.group_wait == timedelta(0)
    pd = {"name": "pd", "type": "pagerduty", "routing_key": "k", "dedup_prefix": "has space"}
    with pytest.raises(ValueError, match=r"alerts\.receivers\.0\.dedup_prefix"):
        load_settings(write(tmp_path, {"alerts": {"receivers": [pd]}}))


def test_the_readme_alerts_example_is_a_valid_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    start = readme.index("```yaml", readme.index("## Alerts")) + len("```yaml")
    monkeypatch.setenv("GRAYWIRE_PD_ROUTING_KEY", "R0UT1NGKEY0000000000000000000000")
    monkeypatch.setenv("GRAYWIRE_NOC_HMAC", "s")
    alerts = load_settings(write(tmp_path, yaml.safe_load(readme[start : readme.index("```", start)]))).alerts
    assert [r.type for r in alerts.receivers] == ["pagerduty", "webhook", "slack"]
    assert len(alerts.alertmanager.urls) == 2


def test_the_outbox_limit_defaults_to_ten_thousand_per_receiver(tmp_path: Path) -> None:
    hook = {"name": "w", "type": "webhook", "url": "https://x"}
    alerts = load_settings(write(tmp_path, {"alerts": {"receivers": [hook]}})).alerts
    assert alerts.max_outbox == 10_000
    assert {d.sync.max_pending for d in destinations(alerts)} == {10_000}
    with pytest.raises(ValueError, match=r"alerts\.max_outbox"):
        load_settings(write(tmp_path, {"alerts": {"max_outbox": 5}}))


def test_the_example_configs_commented_alerts_section_is_valid(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    example = (Path(__file__).resolve().parents[2] / "deploy" / "graywire.example.yaml").read_text()
    lines = example[example.index("# alerts:") :].splitlines()
    end = next((i for i, line in enumerate(lines[1:], 1) if not line.startswith("#   ")), len(lines))
    block = [line[2:] for line in lines[:end]]
    monkeypatch.setenv("GRAYWIRE_PD_ROUTING_KEY", "R0UT1NGKEY0000000000000000000000")
    monkeypatch.setenv("GRAYWIRE_NOC_HMAC", "s")
    alerts = load_settings(write(tmp_path, yaml.safe_load("\n".join(block)))).alerts
    assert alerts.labels == {"cluster": "eu-1"} and alerts.instance == "graywire-eu-1:8000"
    assert alerts.runbook_base_url.endswith("/docs/runbooks")
    assert [r.type for r in alerts.receivers] == ["pagerduty", "webhook"]
