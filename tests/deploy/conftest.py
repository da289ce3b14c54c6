"""Deploy tests: the names a real scrape of graywire exports, and the recording rules' names."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from tests.scrape import exported_names, scrape

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
#: Series Prometheus itself makes for every scrape target.
PROMETHEUS_SERIES = frozenset({"up", "scrape_duration_seconds", "scrape_samples_scraped"})
#: Series Prometheus makes from alerting rules.
PROMETHEUS_RULE_SERIES = frozenset({"ALERTS", "ALERTS_FOR_STATE"})


@pytest.fixture(scope="session")
def deploy_dir() -> Path:
    return DEPLOY


@pytest.fixture(scope="session")
def exported(tmp_path_factory: pytest.TempPathFactory) -> frozenset[str]:
    """Every series name a scrape of the service carries (per-port series on)."""
    return frozenset(exported_names(scrape(tmp_path_factory.mktemp("scrape"))))


def rule_groups() -> list[dict]:
    groups = []
    for path in sorted((DEPLOY / "prometheus" / "rules").glob("*.yml")):
        groups.extend(yaml.safe_load(path.read_text())["groups"])
    return groups


@pytest.fixture(scope="session")
def recorded() -> frozenset[str]:
    return frozenset(r["record"] for g in rule_groups() for r in g["rules"] if "record" in r)
