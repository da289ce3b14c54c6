"""deploy/grafana: dashboards equal their generator, have stable uids, and query only real metrics."""

from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml

from tests.deploy.conftest import PROMETHEUS_RULE_SERIES, PROMETHEUS_SERIES
from tests.deploy.promql import metric_names, variable_query_metric_names

UIDS = {
    "fabric-overview.json": "graywire-fabric-overview",
    "port-detail.json": "graywire-port-detail",
    "nccl-job.json": "graywire-nccl-job",
}
PANEL_TYPES = {"row", "stat", "timeseries", "bargauge", "table", "heatmap", "state-timeline", "gauge", "text"}


def load_generator(deploy_dir: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "graywire_dashboards", deploy_dir / "grafana" / "generate.py"
    )
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def dashboards(deploy_dir: Path) -> dict[str, dict[str, Any]]:
    files = sorted((deploy_dir / "grafana" / "dashboards").glob("*.json"))
    return {p.name: json.loads(p.read_text()) for p in files}


def panels(dash: dict[str, Any]) -> list[dict[str, Any]]:
    out = []
    for p in dash["panels"]:
        out.append(p)
        out.extend(p.get("panels", []))  # collapsed rows hold their panels
    return out


def test_committed_json_is_the_generator_output(deploy_dir: Path) -> None:
    generated = load_generator(deploy_dir).render()
    committed = {p.name: p.read_text() for p in (deploy_dir / "grafana" / "dashboards").glob("*.json")}
    assert committed == generated, "run: python deploy/grafana/generate.py"


def test_uids_are_stable_and_unique(dashboards: dict[str, dict[str, Any]]) -> None:
    assert {name: d["uid"] for name, d in dashboards.items()} == UIDS
    for d in dashboards.values():
        assert re.fullmatch(r"[a-zA-Z0-9-]{1,40}", d["uid"])
        assert d["title"].startswith("graywire / ")


def test_panels_are_well_formed(dashboards: dict[str, dict[str, Any]]) -> None:
    for name, d in dashboards.items():
        ids = [p["id"] for p in panels(d)]
        assert len(ids) == len(set(ids)), name
        for p in panels(d):
            assert p["type"] in PANEL_TYPES, (name, p["type"])
            g = p["gridPos"]
            assert g["x"] >= 0 and g["w"] > 0 and g["x"] + g["w"] <= 24 and g["h"] > 0, (name, p["title"])
            if p["type"] == "row":
                continue
            assert p["targets"], (name, p["title"])
            refs = [t["refId"] for t in p["targets"]]
            assert len(refs) == len(set(refs)), (name, p["title"])
            assert p["datasource"] == {"type": "prometheus", "uid": "${datasource}"}


def test_every_query_names_a_metric_graywire_exports(
    dashboards: dict[str, dict[str, Any]], exported: frozenset[str], recorded: frozenset[str]
) -> None:
    known = exported | recorded | PROMETHEUS_SERIES
    seen: set[str] = set()
    for name, d in dashboards.items():
        for p in panels(d):
            for t in p.get("targets", []):
                names = metric_names(t["expr"])
                assert names, (name, p["title"], t["expr"])  # a query naming nothing is a typo
                assert names <= known, (name, p["title"], names - known)
                seen |= names
        for var in d["templating"]["list"]:
            if var["type"] == "query":
                q = var["query"]["query"] if isinstance(var["query"], dict) else var["query"]
                names = variable_query_metric_names(q)
                assert names and names <= exported, (name, var["name"], names - exported)
        for a in d["annotations"]["list"]:
            names = metric_names(a["expr"])
            assert names and names <= known | PROMETHEUS_RULE_SERIES, (name, a["name"], names)
            assert a["target"]["expr"] == a["expr"]
    # The views the issue asks for draw on these families.
    for family in (
        "graywire_leaf_ports",
        "graywire_rail_ports",
        "graywire_incidents_open",
        "graywire_port_speed_bytes_per_second",
        "graywire_port_expected_speed_bytes_per_second",
        "graywire_port_pre_fec_bit_error_ratio",
        "graywire_port_pfc_pause_ratio",
        "graywire_port_ecn_marked_packets_per_second",
        "graywire_nccl_channel_duration_seconds",
        "graywire_nccl_channel_slowdown_ratio",
        "graywire_port_info",
        "graywire_port_receive_bytes_total",  # through rate(): the raw counters
    ):
        assert family in seen, family


def test_variables_use_the_provisioned_datasource(
    deploy_dir: Path, dashboards: dict[str, dict[str, Any]]
) -> None:
    prov = yaml.safe_load(
        (deploy_dir / "grafana" / "provisioning" / "datasources" / "graywire.yml").read_text()
    )
    (ds,) = prov["datasources"]
    assert ds["type"] == "prometheus"
    for d in dashboards.values():
        (var,) = [v for v in d["templating"]["list"] if v["name"] == "datasource"]
        assert var["current"]["value"] == ds["uid"]
        used = {m for p in panels(d) for m in re.findall(r"\$(\w+)", json.dumps(p.get("targets", [])))}
        declared = {v["name"] for v in d["templating"]["list"]}
        assert used - {"__rate_interval", "__interval", "__range"} <= declared


def test_heatmap_draws_rank_and_channel(dashboards: dict[str, dict[str, Any]]) -> None:
    (heat,) = [p for p in panels(dashboards["nccl-job.json"]) if p["type"] == "heatmap"]
    (t,) = heat["targets"]
    assert t["expr"].startswith("max by (rank, channel) (")
    # `job` is Prometheus's scrape job (which graywire); no training job id is ever a label.
    matched = set(re.findall(r"(\w+)\s*=~?\s*\"", t["expr"]))
    assert matched == {"cluster", "job", "node", "leaf", "rail"}, matched


#: Every dashboard selects the graywire deployment and narrows the fabric the same way.
SCOPE_VARIABLES = ["datasource", "cluster", "job", "leaf", "rail"]


def test_every_dashboard_has_cluster_job_leaf_and_rail_variables(
    dashboards: dict[str, dict[str, Any]],
) -> None:
    for name, d in dashboards.items():
        variables = {v["name"]: v for v in d["templating"]["list"]}
        assert list(variables)[: len(SCOPE_VARIABLES)] == SCOPE_VARIABLES, name
        for v in SCOPE_VARIABLES[1:]:
            assert variables[v]["multi"] and variables[v]["includeAll"] and variables[v]["allValue"] == ".*"
        # A later variable is narrowed by the earlier ones.
        assert '{cluster=~"$cluster"}' in variables["job"]["definition"]
        for v in ("leaf", "rail"):
            assert 'cluster=~"$cluster", job=~"$job"' in variables[v]["definition"]


def test_every_query_is_scoped_to_the_chosen_deployment(dashboards: dict[str, dict[str, Any]]) -> None:
    """Each selector of each panel carries cluster and job: two fabrics in one Prometheus never mix."""
    for name, d in dashboards.items():
        for p in panels(d):
            for t in p.get("targets", []):
                selectors = re.findall(r"[\w:]+\{[^{}]*\}", t["expr"])
                assert selectors, (name, p["title"])
                for s in selectors:
                    assert 'cluster=~"$cluster", job=~"$job"' in s, (name, p["title"], s)


def test_leaf_and_rail_narrow_the_per_port_and_per_rank_views(dashboards: dict[str, dict[str, Any]]) -> None:
    port = {v["name"]: v for v in dashboards["port-detail.json"]["templating"]["list"]}
    assert "graywire_port_info" in port["node"]["definition"]
    assert 'leaf=~"$leaf", rail=~"$rail"' in port["node"]["definition"]
    for p in panels(dashboards["nccl-job.json"]):
        for t in p.get("targets", []):
            if "graywire_nccl_channel_slowdown_ratio{" in t["expr"] or "duration_seconds{" in t["expr"]:
                assert "and on (cluster, node) graywire_port_info{" in t["expr"], p["title"]


def test_dashboards_annotate_incidents(dashboards: dict[str, dict[str, Any]]) -> None:
    for name, d in dashboards.items():
        annotations = {a["name"]: a for a in d["annotations"]["list"]}
        assert "Alerts" in annotations and annotations["Alerts"]["expr"].startswith("ALERTS{")
        incidents = annotations.get("Incidents") or annotations["Port incidents"]
        assert "graywire_incidents_open" in incidents["expr"] or "graywire_port_health" in incidents["expr"]
        for a in annotations.values():
            assert a["enable"] and a["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
            assert a["titleFormat"] and a["tagKeys"], (name, a["name"])
