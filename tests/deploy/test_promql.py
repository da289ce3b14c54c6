"""The PromQL name extractor the dashboard and rule checks rely on."""

from __future__ import annotations

import pytest

from tests.deploy.promql import metric_names, variable_query_metric_names


@pytest.mark.parametrize(
    ("expr", "names"),
    [
        ("up", {"up"}),
        ('sum by (leaf, health) (graywire_leaf_ports{health=~"warning|critical"})', {"graywire_leaf_ports"}),
        (
            "sum by (stage) (rate(graywire_pipeline_stage_seconds_total[$__rate_interval]))",
            {"graywire_pipeline_stage_seconds_total"},
        ),
        (
            'graywire_port_speed_bytes_per_second{node="$node", port=~"$port"} * 8',
            {"graywire_port_speed_bytes_per_second"},
        ),
        ("topk(20, leaf:graywire_leaf_ports_unhealthy:ratio)", {"leaf:graywire_leaf_ports_unhealthy:ratio"}),
        ("time() - graywire_last_poll_timestamp_seconds > 300", {"graywire_last_poll_timestamp_seconds"}),
        ('sum(a{x="b c"}) / on (node) group_left (rail) b offset 5m > 1e-9', {"a", "b"}),
        ('{__name__="graywire_ports"}', {"graywire_ports"}),
        (
            "max_over_time(graywire_pipeline_lag_seconds[10m:1m]) and bool 1",
            {"graywire_pipeline_lag_seconds"},
        ),
        ("count(graywire_scrape_success == 0) or vector(0)", {"graywire_scrape_success"}),
        ('label_replace(m, "dst", "$1", "src", "(.*)")', {"m"}),
        ("quantile(0.9, m) without (instance)", {"m"}),
    ],
)
def test_metric_names(expr: str, names: set[str]) -> None:
    assert metric_names(expr) == names


def test_variable_queries() -> None:
    assert variable_query_metric_names("label_values(graywire_port_speed_bytes_per_second, node)") == {
        "graywire_port_speed_bytes_per_second"
    }
    assert variable_query_metric_names('label_values(m{node="$node"}, port)') == {"m"}
    assert variable_query_metric_names("label_values(node)") == set()
    assert variable_query_metric_names("query_result(topk(5, m))") == {"m"}
