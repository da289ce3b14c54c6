"""Grafana dashboards for graywire, as code: ``python deploy/grafana/generate.py`` rewrites
``deploy/grafana/dashboards/*.json``.

The JSON files are committed (Grafana provisioning reads them); the tests check they equal
this script's output and that every query names a metric graywire exports. UIDs are fixed so
links and bookmarks survive regeneration. Standard library only: no network, no SDK.

Every dashboard has ``cluster`` and ``job`` variables: the Prometheus target labels of the
graywire deployment (``job`` is the scrape job, never a training job: graywire exports no job
ids; ``cluster`` is a target label set in the scrape config, or an external label where a
global view such as Thanos or Mimir answers). ``leaf`` and ``rail`` narrow the fabric: the
leaf and rail aggregates carry them, and per-port and per-rank series are joined to
``graywire_port_info`` on their node. Annotations mark open incidents and firing graywire alerts.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

OUT = Path(__file__).resolve().parent / "dashboards"
DS = {"type": "prometheus", "uid": "${datasource}"}
SCHEMA_VERSION = 39

Panel = dict[str, Any]


def target(expr: str, legend: str = "", *, instant: bool = False, table: bool = False) -> dict[str, Any]:
    """A Prometheus query; ``refId`` is set by :func:`panel`. ``table``: instant, one row per series."""
    t: dict[str, Any] = {"datasource": DS, "expr": expr, "refId": "A", "legendFormat": legend or "__auto"}
    if instant or table:
        t.update(instant=True, range=False)
    if table:
        t["format"] = "table"
    return t


def panel(
    kind: str,
    title: str,
    targets: list[dict[str, Any]],
    grid: tuple[int, int, int, int],
    *,
    unit: str | None = None,
    description: str = "",
    options: dict[str, Any] | None = None,
    custom: dict[str, Any] | None = None,
    mappings: list[dict[str, Any]] | None = None,
    thresholds: list[tuple[float | None, str]] | None = None,
    transformations: list[dict[str, Any]] | None = None,
    overrides: list[dict[str, Any]] | None = None,
) -> Panel:
    for i, t in enumerate(targets):
        t["refId"] = chr(ord("A") + i)
    x, y, w, h = grid
    defaults: dict[str, Any] = {}
    if unit:
        defaults["unit"] = unit
    if custom:
        defaults["custom"] = custom
    if mappings:
        defaults["mappings"] = mappings
    if thresholds:
        defaults["thresholds"] = {
            "mode": "absolute",
            "steps": [{"color": c, "value": v} for v, c in thresholds],
        }
    p: Panel = {
        "type": kind,
        "title": title,
        "description": description,
        "datasource": DS,
        "gridPos": {"x": x, "y": y, "w": w, "h": h},
        "targets": targets,
        "fieldConfig": {"defaults": defaults, "overrides": overrides or []},
        "options": options or {},
    }
    if transformations:
        p["transformations"] = transformations
    return p


def row(title: str, y: int) -> Panel:
    return {
        "type": "row",
        "title": title,
        "collapsed": False,
        "gridPos": {"x": 0, "y": y, "w": 24, "h": 1},
        "panels": [],
    }


def datasource_var() -> dict[str, Any]:
    return {
        "name": "datasource",
        "label": "Prometheus",
        "type": "datasource",
        "query": "prometheus",
        "current": {"text": "Prometheus", "value": "graywire-prometheus"},
        "hide": 0,
    }


def query_var(name: str, query: str, *, multi: bool = False, label: str = "") -> dict[str, Any]:
    v: dict[str, Any] = {
        "name": name,
        "label": label or name,
        "type": "query",
        "datasource": DS,
        "query": {"query": query, "refId": f"{name}-var"},
        "definition": query,
        "refresh": 2,
        "sort": 1,
        "multi": multi,
        "includeAll": multi,
        "hide": 0,
    }
    if multi:
        v["allValue"] = ".*"
    return v


def dashboard(
    uid: str,
    title: str,
    description: str,
    panels: list[Panel],
    variables: list[dict[str, Any]],
    annotations: list[dict[str, Any]],
) -> dict:
    for i, p in enumerate(panels, start=1):
        p["id"] = i
    return {
        "uid": uid,
        "title": title,
        "description": description,
        "tags": ["graywire"],
        "timezone": "browser",
        "editable": True,
        "graphTooltip": 1,
        "refresh": "30s",
        "schemaVersion": SCHEMA_VERSION,
        "version": 1,
        "time": {"from": "now-6h", "to": "now"},
        "templating": {"list": [datasource_var(), *variables]},
        "annotations": {"list": annotations},
        "links": [
            {
                "type": "dashboards",
                "tags": ["graywire"],
                "title": "graywire",
                "asDropdown": True,
                "includeVars": False,
            }
        ],
        "panels": panels,
    }


HEALTH_MAPPING = [
    {
        "type": "value",
        "options": {
            "0": {"text": "ok", "color": "green", "index": 0},
            "1": {"text": "warning", "color": "orange", "index": 1},
            "2": {"text": "critical", "color": "red", "index": 2},
        },
    }
]
STACKED = {"stacking": {"mode": "normal", "group": "A"}, "fillOpacity": 60, "lineWidth": 1}
LOG_Y = {"scaleDistribution": {"type": "log", "log": 10}}

#: The graywire deployment(s) a dashboard shows: every selector carries it.
SCOPE = 'cluster=~"$cluster", job=~"$job"'
#: Ports of the chosen leaves and rails (the fabric model's ports, per_port series on).
IN_FABRIC = f'graywire_port_info{{{SCOPE}, leaf=~"$leaf", rail=~"$rail"}}'


def sel(*matchers: str) -> str:
    """A label selector: the scope, then ``matchers``."""
    return "{" + ", ".join((SCOPE, *matchers)) + "}"


def scope_vars(*, fabric: bool = True) -> list[dict[str, Any]]:
    """cluster and job, then (``fabric``) leaf and rail, each filtered by the ones before it."""
    out = [
        query_var("cluster", "label_values(graywire_build_info, cluster)", multi=True, label="Cluster"),
        query_var(
            "job", 'label_values(graywire_build_info{cluster=~"$cluster"}, job)', multi=True, label="Job"
        ),
    ]
    if fabric:
        out += [
            query_var("leaf", f"label_values(graywire_leaf_ports{sel()}, leaf)", multi=True, label="Leaf"),
            query_var("rail", f"label_values(graywire_rail_ports{sel()}, rail)", multi=True, label="Rail"),
        ]
    return out


def annotation(name: str, expr: str, title: str, text: str, tags: str, color: str) -> dict[str, Any]:
    """A Prometheus annotation: a region while ``expr`` has a value (step 30 s)."""
    return {
        "name": name,
        "datasource": DS,
        "enable": True,
        "hide": False,
        "iconColor": color,
        "expr": expr,
        "step": "30s",
        "titleFormat": title,
        "textFormat": text,
        "tagKeys": tags,
        "useValueForTime": False,
        "target": {"expr": expr, "refId": "Anno", "interval": "30s"},
    }


def incident_annotations(kinds: str = ".*") -> list[dict[str, Any]]:
    """Open incidents (graywire's own, by kind and severity) and firing graywire alert rules."""
    return [
        annotation(
            "Incidents",
            "sum by (kind, severity) (graywire_incidents_open" + sel(f'kind=~"{kinds}"') + ") > 0",
            "{{kind}} ({{severity}})",
            "open incidents: {{value}}",
            "kind,severity",
            "red",
        ),
        annotation(
            "Alerts",
            'ALERTS{alertname=~"Graywire.*", alertstate="firing", cluster=~"$cluster"}',
            "{{alertname}}",
            "{{leaf}}{{rail}}{{receiver}}{{target}}",
            "alertname,severity",
            "orange",
        ),
    ]


def fabric_overview() -> dict:
    S, LEAF, RAIL = sel(), sel('leaf=~"$leaf"'), sel('rail=~"$rail"')
    health_colors = [
        {
            "matcher": {"id": "byName", "options": h},
            "properties": [{"id": "color", "value": {"mode": "fixed", "fixedColor": c}}],
        }
        for h, c in (("ok", "green"), ("stale", "blue"), ("warning", "orange"), ("critical", "red"))
    ]
    panels = [
        row("Fabric", 0),
        panel(
            "stat",
            "Ports by health",
            [target(f"sum by (health) (graywire_leaf_ports{LEAF})", "{{health}}")],
            (0, 1, 8, 4),
            description="Ports any source reports, by worst open incident (stale: the source is failing).",
            overrides=health_colors,
            options={
                "reduceOptions": {"calcs": ["lastNotNull"]},
                "colorMode": "background",
                "textMode": "value_and_name",
            },
        ),
        panel(
            "stat",
            "Open incidents",
            [
                target(
                    "sum(graywire_incidents_open" + sel('severity="critical"') + ") or vector(0)", "critical"
                ),
                target(
                    "sum(graywire_incidents_open" + sel('severity="warning"') + ") or vector(0)", "warning"
                ),
            ],
            (8, 1, 6, 4),
            options={
                "reduceOptions": {"calcs": ["lastNotNull"]},
                "colorMode": "background",
                "textMode": "value_and_name",
            },
            thresholds=[(None, "green"), (1, "red")],
        ),
        panel(
            "stat",
            "Blind spots",
            [
                target(f"sum(graywire_stale_ports{S}) or vector(0)", "stale ports"),
                target(f"count(graywire_scrape_success{S} == 0) or vector(0)", "failing targets"),
            ],
            (14, 1, 5, 4),
            description="Ports whose source is failing are not judged at all.",
            options={
                "reduceOptions": {"calcs": ["lastNotNull"]},
                "colorMode": "background",
                "textMode": "value_and_name",
            },
            thresholds=[(None, "green"), (1, "orange")],
        ),
        panel(
            "stat",
            "Links below expected speed",
            [target(f"sum(graywire_leaf_ports_below_expected_speed{LEAF}) or vector(0)", "ports")],
            (19, 1, 5, 4),
            description="Ports negotiated slower than the inventory expects (both ends of a cable count).",
            options={"reduceOptions": {"calcs": ["lastNotNull"]}, "colorMode": "background"},
            thresholds=[(None, "green"), (1, "red")],
        ),
        panel(
            "bargauge",
            "Unhealthy share by leaf (worst 20)",
            [target(f"topk(20, leaf:graywire_leaf_ports_unhealthy:ratio{LEAF})", "{{leaf}}", instant=True)],
            (0, 5, 12, 9),
            unit="percentunit",
            description="Share of a leaf's ports (its own and the ports cabled to it) with open incidents.",
            options={
                "orientation": "horizontal",
                "displayMode": "gradient",
                "reduceOptions": {"calcs": ["lastNotNull"]},
            },
            thresholds=[(None, "green"), (0.05, "orange"), (0.25, "red")],
        ),
        panel(
            "timeseries",
            "Port health by rail",
            [
                target(
                    "sum by (rail) (graywire_rail_ports"
                    + sel('rail=~"$rail"', 'health=~"warning|critical|stale"')
                    + ")",
                    "rail {{rail}}",
                )
            ],
            (12, 5, 12, 9),
            description="Warning, critical and stale ports per rail: a gray rail slows every job on it.",
            custom=STACKED,
        ),
        panel(
            "timeseries",
            "Fabric ports by health",
            [target(f"sum by (health) (graywire_leaf_ports{LEAF})", "{{health}}")],
            (0, 14, 12, 8),
            custom=STACKED,
            overrides=health_colors,
        ),
        panel(
            "timeseries",
            "Open incidents by kind and severity",
            [target(f"sum by (kind, severity) (graywire_incidents_open{S})", "{{kind}} {{severity}}")],
            (12, 14, 12, 8),
            custom=STACKED,
        ),
        panel(
            "timeseries",
            "Worst pre-FEC BER by rail",
            [target(f"max by (rail) (graywire_rail_pre_fec_bit_error_ratio_max{RAIL})", "rail {{rail}}")],
            (0, 22, 8, 8),
            unit="sci",
            custom=LOG_Y,
        ),
        panel(
            "timeseries",
            "Worst PFC pause share by rail",
            [target(f"max by (rail) (graywire_rail_pfc_pause_ratio_max{RAIL})", "rail {{rail}}")],
            (8, 22, 8, 8),
            unit="percentunit",
        ),
        panel(
            "timeseries",
            "Ports below expected speed by leaf",
            [target(f"sum by (leaf) (graywire_leaf_ports_below_expected_speed{LEAF}) > 0", "{{leaf}}")],
            (16, 22, 8, 8),
        ),
        panel(
            "timeseries",
            "Host traffic by rail",
            [
                target(
                    "sum by (rail) (max by (cluster, job, instance, port) "
                    f"(rate(graywire_port_receive_bytes_total{S}[$__rate_interval])) "
                    "* on (cluster, job, instance, port) group_left (rail) "
                    + IN_FABRIC.replace("}", ', role="host"}')
                    + ") * 8",
                    "rail {{rail}} rx",
                ),
                target(
                    "sum by (rail) (max by (cluster, job, instance, port) "
                    f"(rate(graywire_port_transmit_bytes_total{S}[$__rate_interval])) "
                    "* on (cluster, job, instance, port) group_left (rail) "
                    + IN_FABRIC.replace("}", ', role="host"}')
                    + ") * 8",
                    "rail {{rail}} tx",
                ),
            ],
            (0, 30, 24, 8),
            unit="bps",
            description="Data the host NICs of each rail receive and send, from the sources' cumulative "
            "counters (metrics.raw_counters): rate() over any scrape interval, resets handled by Prometheus.",
        ),
        row("Drains", 38),
        panel(
            "stat",
            "Drain recommendations",
            [target(f"max by (action) (graywire_drain_nodes{S})", "{{action}}")],
            (0, 39, 5, 8),
            description="Nodes the drain policy recommends draining or watching (fleet-wide: replicas "
            "share the database, so the maximum, not the sum).",
            options={
                "reduceOptions": {"calcs": ["lastNotNull"]},
                "colorMode": "background",
                "textMode": "value_and_name",
            },
            thresholds=[(None, "green"), (1, "orange")],
        ),
        panel(
            "stat",
            "Circuit breaker",
            [target(f"max(graywire_drain_circuit_breaker_tripped{S})", "breaker")],
            (5, 39, 3, 8),
            description="Tripped: more nodes wanted draining within the window than the cap allows; "
            "no new drains until an operator resets it.",
            options={"reduceOptions": {"calcs": ["lastNotNull"]}, "colorMode": "background"},
            mappings=[
                {
                    "type": "value",
                    "options": {
                        "0": {"text": "closed", "color": "green", "index": 0},
                        "1": {"text": "TRIPPED", "color": "red", "index": 1},
                    },
                }
            ],
        ),
        panel(
            "timeseries",
            "Drain recommendations over time",
            [target(f"max by (action) (graywire_drain_nodes{S})", "{{action}}")],
            (8, 39, 8, 8),
        ),
        panel(
            "table",
            "Drain list",
            [
                target(
                    f"max by (node, action, shadow) (graywire_drain_node_since_timestamp_seconds{S}) * 1000",
                    table=True,
                )
            ],
            (16, 39, 8, 8),
            description="The nodes on the drain list (GET /api/v1/drain has each one's reason and evidence), "
            "newest first. shadow: recommended only, no scheduler acts on it. The node links to its ports.",
            options={"showHeader": True, "sortBy": [{"displayName": "since", "desc": True}]},
            transformations=[
                {
                    "id": "organize",
                    "options": {
                        "excludeByName": {"Time": True},
                        "indexByName": {"node": 0, "action": 1, "shadow": 2, "Value": 3},
                        "renameByName": {"Value": "since"},
                    },
                }
            ],
            overrides=[
                {
                    "matcher": {"id": "byName", "options": "since"},
                    "properties": [{"id": "unit", "value": "dateTimeFromNow"}],
                },
                {
                    "matcher": {"id": "byName", "options": "node"},
                    "properties": [
                        {
                            "id": "links",
                            "value": [
                                {
                                    "title": "Port detail",
                                    "url": "/d/graywire-port-detail/?var-node=${__value.raw}"
                                    "&${datasource:queryparam}",
                                }
                            ],
                        }
                    ],
                },
            ],
        ),
        row("graywire", 46),
        panel(
            "table",
            "Scrape targets",
            [
                target(f"graywire_scrape_success{S}", table=True),
                target(f"graywire_scrape_staleness_seconds{S}", table=True),
                target(f"graywire_stale_ports{S}", table=True),
            ],
            (0, 47, 12, 8),
            transformations=[
                {"id": "merge", "options": {}},
                {
                    "id": "organize",
                    "options": {
                        "excludeByName": {"Time": True, "__name__": True, "job": True},
                        "renameByName": {
                            "Value #A": "up",
                            "Value #B": "since last good scrape (s)",
                            "Value #C": "stale ports",
                        },
                    },
                },
            ],
        ),
        panel(
            "timeseries",
            "Pipeline lag and poll duration",
            [
                target(f"graywire_pipeline_lag_seconds{S}", "lag {{instance}}"),
                target(f"graywire_poll_duration_seconds{S}", "poll {{instance}}"),
            ],
            (12, 47, 12, 8),
            unit="s",
        ),
        panel(
            "timeseries",
            "Rows per poll",
            [target(f"sum by (record) (graywire_poll_batch_rows{S})", "{{record}}")],
            (0, 55, 8, 7),
        ),
        panel(
            "timeseries",
            "Detector CPU share",
            [
                target(
                    f"sum by (stage) (rate(graywire_pipeline_stage_seconds_total{S}[$__rate_interval]))",
                    "{{stage}}",
                )
            ],
            (8, 55, 8, 7),
            unit="percentunit",
            custom=STACKED,
        ),
        panel(
            "timeseries",
            "Findings",
            [
                target(
                    f"sum by (kind, status) (increase(graywire_findings_total{S}[$__rate_interval]))",
                    "{{kind}} {{status}}",
                )
            ],
            (16, 55, 8, 7),
        ),
        panel(
            "timeseries",
            "Notification outbox",
            [
                target(
                    f"max by (receiver) (graywire_alert_outbox_oldest_pending_seconds{S})",
                    "oldest {{receiver}}",
                ),
                target(f"sum by (receiver) (graywire_alert_outbox_pending{S})", "pending {{receiver}}"),
            ],
            (0, 62, 12, 7),
            description="Incident notifications waiting per receiver (Alertmanager, webhooks, PagerDuty, "
            "Slack): a growing age means pages are not getting through. Present when alerts are configured.",
            overrides=[
                {
                    "matcher": {"id": "byRegexp", "options": "oldest .*"},
                    "properties": [{"id": "unit", "value": "s"}],
                }
            ],
        ),
        panel(
            "timeseries",
            "Notifications by result",
            [
                target(
                    "sum by (receiver, result) "
                    f"(increase(graywire_alert_messages_total{S}[$__rate_interval]))",
                    "{{receiver}} {{result}}",
                )
            ],
            (12, 62, 12, 7),
        ),
    ]
    return dashboard(
        "graywire-fabric-overview",
        "graywire / Fabric overview",
        "Health of the fabric by leaf and rail, open incidents, and graywire's own collectors and pipeline.",
        panels,
        scope_vars(),
        incident_annotations(),
    )


def port_detail() -> dict:
    sel_ = sel('node="$node"', 'port=~"$port"')
    panels = [
        panel(
            "timeseries",
            "Speed vs expected",
            [
                target(f"graywire_port_speed_bytes_per_second{sel_} * 8", "{{port}} negotiated"),
                target(f"graywire_port_expected_speed_bytes_per_second{sel_} * 8", "{{port}} expected"),
            ],
            (0, 0, 12, 8),
            unit="bps",
            description="A silent 800G→400G or 4x→2x renegotiation shows as the two lines parting.",
        ),
        panel(
            "state-timeline",
            "Health",
            [
                target(f"graywire_port_health{sel_}", "{{port}}"),
                target(f"graywire_port_link_up{sel_}", "{{port}} link up"),
                target(f"graywire_port_stale{sel_}", "{{port}} stale"),
            ],
            (12, 0, 12, 8),
            description="Worst open incident (0 ok, 1 warning, 2 critical), link state, staleness.",
            mappings=HEALTH_MAPPING,
            thresholds=[(None, "green"), (1, "orange"), (2, "red")],
        ),
        panel(
            "timeseries",
            "Pre-FEC BER",
            [target(f"graywire_port_pre_fec_bit_error_ratio{sel_}", "{{port}}")],
            (0, 8, 12, 8),
            unit="sci",
            custom=LOG_Y,
            description="Corrected per received bit: high is normal on PAM4 links, a rising trend is not.",
        ),
        panel(
            "timeseries",
            "Errors",
            [
                target(
                    f"graywire_port_fec_uncorrectable_blocks_per_second{sel_}", "{{port}} FEC uncorrectable"
                ),
                target(f"graywire_port_symbol_errors_per_second{sel_}", "{{port}} symbol"),
                target(f"graywire_port_receive_errors_per_second{sel_}", "{{port}} receive"),
            ],
            (12, 8, 12, 8),
            unit="ops",
        ),
        panel(
            "timeseries",
            "PFC pause share",
            [target(f"graywire_port_pfc_pause_ratio{sel_}", "{{port}} {{direction}}")],
            (0, 16, 12, 8),
            unit="percentunit",
            description="rx: the peer pauses this port; tx: this port pauses its peer (a storm source).",
        ),
        panel(
            "timeseries",
            "PFC pause frames",
            [target(f"graywire_port_pfc_pause_frames_per_second{sel_}", "{{port}} {{direction}}")],
            (12, 16, 12, 8),
            unit="pps",
        ),
        panel(
            "timeseries",
            "ECN and CNP",
            [
                target(f"graywire_port_ecn_marked_packets_per_second{sel_}", "{{port}} ECN marked"),
                target(f"graywire_port_cnp_sent_per_second{sel_}", "{{port}} CNP sent"),
            ],
            (0, 24, 12, 8),
            unit="pps",
        ),
        panel(
            "timeseries",
            "Traffic",
            [
                target(
                    f"rate(graywire_port_receive_bytes_total{sel_}[$__rate_interval]) * 8 "
                    f"or on (instance, port) graywire_port_receive_bytes_per_second{sel_} * 8",
                    "{{port}} rx {{source}}",
                ),
                target(
                    f"rate(graywire_port_transmit_bytes_total{sel_}[$__rate_interval]) * 8 "
                    f"or on (instance, port) graywire_port_transmit_bytes_per_second{sel_} * 8",
                    "{{port}} tx {{source}}",
                ),
            ],
            (12, 24, 12, 8),
            unit="bps",
            description="rate() of the sources' cumulative counters; graywire's per-poll rate where "
            "metrics.raw_counters is off.",
        ),
    ]
    variables = [
        *scope_vars(),
        query_var("node", f"label_values({IN_FABRIC}, node)", label="Node"),
        query_var(
            "port",
            "label_values(" + IN_FABRIC.replace("}", ', node="$node"}') + ", port)",
            multi=True,
            label="Port",
        ),
    ]
    return dashboard(
        "graywire-port-detail",
        "graywire / Port detail",
        "One node's ports over time: negotiated vs expected speed, health, BER, errors, PFC, ECN, traffic. "
        "Needs metrics.per_port: true.",
        panels,
        variables,
        [
            annotation(
                "Port incidents",
                f"graywire_port_health{sel_} > 0",
                "{{port}}",
                "open incident on the port or its cable (1 warning, 2 critical): {{value}}",
                "node,port",
                "red",
            ),
            incident_annotations()[1],
        ],
    )


def nccl_job() -> dict:
    ranks = sel('node=~"$node"')
    # Ranks on hosts of the chosen leaves and rails (every rank when both are All).
    placed = f"and on (cluster, node) {IN_FABRIC}"
    panels = [
        panel(
            "heatmap",
            "Channel latency by rank and channel",
            [
                target(
                    f"max by (rank, channel) (graywire_nccl_channel_duration_seconds{ranks} {placed})",
                    "r{{rank}} c{{channel}}",
                )
            ],
            (0, 0, 24, 10),
            description="Mean duration of each rank's channel operations per poll. A slow link or NIC "
            "lights up its channels on every rank of the ring; a compute straggler shows as a whole rank.",
            options={
                "calculate": False,
                "yAxis": {"axisPlacement": "left"},
                "color": {"mode": "scheme", "scheme": "Oranges", "exponent": 0.5, "steps": 64},
                "cellGap": 1,
                "tooltip": {"mode": "single", "yHistogram": False},
                "legend": {"show": True},
            },
            unit="s",
        ),
        panel(
            "table",
            "Stragglers (slowest rank channels now)",
            [target(f"topk(15, graywire_nccl_channel_slowdown_ratio{ranks} {placed})", table=True)],
            (0, 10, 10, 10),
            description="A rank's channel latency over its peers' median on that channel (1 = typical).",
            transformations=[
                {
                    "id": "organize",
                    "options": {
                        "excludeByName": {"Time": True, "__name__": True, "job": True, "instance": True}
                    },
                }
            ],
            thresholds=[(None, "green"), (1.05, "orange"), (1.2, "red")],
        ),
        panel(
            "timeseries",
            "Slowdown by node",
            [target(f"max by (node) (graywire_nccl_channel_slowdown_ratio{ranks} {placed})", "{{node}}")],
            (10, 10, 14, 10),
            thresholds=[(None, "green"), (1.05, "orange"), (1.2, "red")],
        ),
        panel(
            "timeseries",
            "Worst slowdown by channel",
            [
                target(
                    f"max by (channel) (graywire_nccl_channel_slowdown_ratio_max{sel()})",
                    "channel {{channel}}",
                )
            ],
            (0, 20, 12, 8),
            description="Kept when per-rank series are off (metrics.per_port: false).",
        ),
        panel(
            "stat",
            "NCCL",
            [
                target(f"sum(graywire_nccl_ranks{sel()})", "ranks reporting"),
                target(
                    "sum(graywire_incidents_open" + sel('kind=~"nccl_.*"') + ") or vector(0)",
                    "NCCL incidents",
                ),
            ],
            (12, 20, 12, 8),
            options={"reduceOptions": {"calcs": ["lastNotNull"]}, "textMode": "value_and_name"},
        ),
    ]
    variables = [
        *scope_vars(),
        query_var(
            "node",
            f"label_values(graywire_nccl_channel_duration_seconds{sel()}, node)",
            multi=True,
            label="Node",
        ),
    ]
    return dashboard(
        "graywire-nccl-job",
        "graywire / NCCL job",
        "Per-rank, per-channel collective latency of the jobs reporting now, and the stragglers among them.",
        panels,
        variables,
        incident_annotations("nccl_.*"),
    )


DASHBOARDS = {
    "fabric-overview.json": fabric_overview,
    "port-detail.json": port_detail,
    "nccl-job.json": nccl_job,
}


def render() -> dict[str, str]:
    """File name -> JSON text of every dashboard."""
    return {
        name: json.dumps(build(), indent=2, ensure_ascii=False) + "\n" for name, build in DASHBOARDS.items()
    }


def main() -> int:
    OUT.mkdir(parents=True, exist_ok=True)
    for name, text in render().items():
        (OUT / name).write_text(text)
        print(f"wrote {OUT / name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
