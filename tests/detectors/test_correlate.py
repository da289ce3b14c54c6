"""Node verdicts: a bad link is the host's link, many bad links on one leaf are the leaf's."""

from __future__ import annotations

from typing import Any

from graywire.detectors.correlate import node_verdicts, root_causes
from graywire.fabricsim.topology import TopologySpec, build_fabric

FABRIC = build_fabric(TopologySpec(hosts=8))


def inc(i: int, kind: str, port: str, severity: str = "critical", status: str = "open") -> dict[str, Any]:
    return {"id": i, "kind": kind, "node": port.split("/")[0], "port": port, "severity": severity,
            "status": status, "summary": f"{kind} on {port}"}  # fmt: skip


def by_node(incidents: list[dict[str, Any]], **kw: Any) -> dict[str, dict[str, Any]]:
    return {v.node: v.as_dict() for v in node_verdicts(incidents, FABRIC, **kw)}


def test_one_bad_link_is_a_link_verdict_on_the_host() -> None:
    v = by_node([inc(1, "speed_downgrade", "gpu-0003/mlx5_2")])
    assert list(v) == ["gpu-0003"]
    assert (v["gpu-0003"]["side"], v["gpu-0003"]["blamed_switch"], v["gpu-0003"]["incident_ids"]) == (
        "link",
        None,
        [1],
    )


def test_three_hosts_on_one_leaf_blame_the_leaf_not_the_hosts() -> None:
    incidents = [inc(i, "speed_downgrade", f"gpu-000{i}/mlx5_2") for i in (1, 2, 3)]
    v = by_node(incidents)
    assert (v["leaf-r2-000"]["side"], v["leaf-r2-000"]["whole_switch"]) == ("network", True)
    assert v["leaf-r2-000"]["incident_ids"] == [1, 2, 3]
    assert "3 hosts" in v["leaf-r2-000"]["reasons"][0]
    for h in ("gpu-0001", "gpu-0002", "gpu-0003"):
        assert (v[h]["side"], v[h]["blamed_switch"]) == ("network", "leaf-r2-000")
    assert next(iter(v)) == "leaf-r2-000"  # switches first


def test_two_hosts_are_not_enough_to_blame_a_switch() -> None:
    v = by_node([inc(i, "link_flap", f"gpu-000{i}/mlx5_2", "warning") for i in (1, 2)])
    assert "leaf-r2-000" not in v
    assert {v[h]["side"] for h in ("gpu-0001", "gpu-0002")} == {"link"}


def test_bad_links_on_different_leaves_do_not_add_up() -> None:
    v = by_node([inc(i, "speed_downgrade", f"gpu-000{i}/mlx5_{i}") for i in (1, 2, 3)])
    assert all(x["side"] == "link" for x in v.values())
    assert set(v) == {"gpu-0001", "gpu-0002", "gpu-0003"}


def test_slow_nccl_alone_is_the_host_and_a_bad_link_explains_it() -> None:
    alone = by_node([inc(5, "nccl_channel_slow", "gpu-0004/mlx5_1", "warning")])
    assert alone["gpu-0004"]["side"] == "host"
    both = by_node(
        [
            inc(5, "nccl_channel_slow", "gpu-0004/mlx5_1", "warning"),
            inc(6, "speed_downgrade", "gpu-0004/mlx5_1"),
        ]
    )
    assert (both["gpu-0004"]["side"], both["gpu-0004"]["severity"]) == ("link", "critical")
    assert both["gpu-0004"]["incident_ids"] == [5, 6]
    assert len(both["gpu-0004"]["reasons"]) == 2


def test_resolved_incidents_are_not_evidence() -> None:
    assert by_node([inc(1, "speed_downgrade", "gpu-0003/mlx5_2", status="resolved")]) == {}


def test_the_switch_threshold_is_configurable() -> None:
    v = by_node([inc(i, "speed_downgrade", f"gpu-000{i}/mlx5_2") for i in (1, 2)], min_hosts_for_switch=2)
    assert v["leaf-r2-000"]["side"] == "network"


def test_a_slow_nccl_path_is_the_leaf_and_its_hosts_point_at_it() -> None:
    path = {"id": 9, "kind": "nccl_path_slow", "node": "leaf-r2-000", "port": None, "severity": "warning",
            "status": "open", "summary": "channel 1 of job-a slow via leaf-r2-000",
            "evidence": {"hosts": ["gpu-0001", "gpu-0002", "gpu-0005"], "side": "network"}}  # fmt: skip
    v = by_node([path, inc(10, "nccl_channel_slow", "gpu-0002/mlx5_2", "warning"),
                 inc(11, "nccl_channel_slow", "gpu-0006/mlx5_4", "warning")])  # fmt: skip
    assert (v["leaf-r2-000"]["side"], v["leaf-r2-000"]["incident_ids"]) == ("network", [9])
    assert "the path, not the hosts" in v["leaf-r2-000"]["reasons"][0]
    assert v["leaf-r2-000"]["whole_switch"] is False  # one slow path is no failing switch
    # A host behind the slow path is not blamed for it; one elsewhere still is.
    assert (v["gpu-0002"]["side"], v["gpu-0002"]["blamed_switch"]) == ("network", "leaf-r2-000")
    assert (v["gpu-0006"]["side"], v["gpu-0006"]["blamed_switch"]) == ("host", None)
    assert "gpu-0001" not in v  # no incident of its own


def test_transport_regressions_are_host_verdicts_and_job_slowdowns_none() -> None:
    fb = inc(12, "nccl_transport_fallback", "gpu-0003/mlx5_0", "warning")
    job = {"id": 13, "kind": "nccl_job_slowdown", "node": None, "port": None, "severity": "warning",
           "status": "open", "summary": "job job-a 20% slower"}  # fmt: skip
    v = by_node([fb, job])
    assert list(v) == ["gpu-0003"] and v["gpu-0003"]["side"] == "host"


def test_a_compute_straggler_is_its_hosts_even_behind_a_slow_path() -> None:
    """A late rank is compute-side: a host verdict, never moved onto the network by a slow
    path or by links to the same leaf."""
    straggler = {"id": 7, "kind": "nccl_straggler", "node": "gpu-0002", "port": None, "severity": "warning",
                 "status": "open", "summary": "rank 18 arrives last"}  # fmt: skip
    path = {"id": 8, "kind": "nccl_path_slow", "node": "leaf-r2-000", "port": None, "severity": "warning",
            "status": "open", "summary": "slow path"}  # fmt: skip
    v = by_node([straggler, path])
    host = v["gpu-0002"]
    assert (host["side"], host["blamed_switch"], host["ports"]) == ("host", None, [])
    assert v["leaf-r2-000"]["side"] == "network"


def test_a_slow_hop_is_a_network_verdict_on_both_ends() -> None:
    hop = {"id": 20, "kind": "nccl_hop_slow", "node": None, "port": "gpu-0002/mlx5_3", "severity": "warning",
           "status": "open", "summary": "NCCL hop gpu-0002/mlx5_3 -> gpu-0003/mlx5_3 slow",
           "evidence": {"src_host": "gpu-0002", "dst_host": "gpu-0003",
                        "src_port": "gpu-0002/mlx5_3", "dst_port": "gpu-0003/mlx5_3"}}  # fmt: skip
    v = by_node([hop])
    assert sorted(v) == ["gpu-0002", "gpu-0003"]
    assert {x["side"] for x in v.values()} == {"network"}
    assert v["gpu-0003"]["ports"] == ["gpu-0003/mlx5_3"] and v["gpu-0002"]["incident_ids"] == [20]


def test_a_hop_does_not_lift_a_hosts_own_link_verdict_onto_the_network() -> None:
    hop = {"id": 21, "kind": "nccl_hop_slow", "node": None, "port": "gpu-0002/mlx5_3", "severity": "warning",
           "status": "open", "summary": "hop slow",
           "evidence": {"src_host": "gpu-0002", "dst_host": "gpu-0003",
                        "src_port": "gpu-0002/mlx5_3", "dst_port": "gpu-0003/mlx5_3"}}  # fmt: skip
    v = by_node([inc(1, "speed_downgrade", "gpu-0002/mlx5_3"), hop])
    assert (v["gpu-0002"]["side"], v["gpu-0002"]["severity"]) == ("link", "critical")
    assert v["gpu-0002"]["incident_ids"] == [1, 21] and v["gpu-0003"]["side"] == "network"


def test_saturated_counters_watch_at_most_and_never_blame_a_switch() -> None:
    sat = [inc(i, "counter_saturated", f"gpu-000{i}/mlx5_2", "warning") for i in (1, 2, 3)]
    v = by_node([*sat, inc(9, "counter_saturated", "gpu-0005/mlx5_2", "info")])
    assert "leaf-r2-000" not in v and "gpu-0005" not in v  # info (xmit wait): no verdict
    assert {(x["side"], x["severity"]) for x in v.values()} == {("link", "info")}


def test_a_pushed_slow_path_moves_no_collected_evidence_onto_the_network() -> None:
    path = {"id": 30, "kind": "nccl_path_slow", "node": "leaf-r2-000", "port": None, "severity": "warning",
            "status": "open", "summary": "slow path",
            "evidence": {"hosts": ["gpu-0001"], "provenance": "push"}}  # fmt: skip
    v = by_node([path, inc(31, "nccl_channel_slow", "gpu-0001/mlx5_2", "warning")])
    assert "leaf-r2-000" not in v and v["gpu-0001"]["side"] == "host"


# -- congestion victims -------------------------------------------------------------------------
def test_an_ecn_hotspot_is_a_victim_watched_never_drained() -> None:
    v = by_node([inc(1, "ecn_hotspot", "gpu-0003/mlx5_2", "warning")])
    assert (v["gpu-0003"]["side"], v["gpu-0003"]["severity"]) == ("host", "info")
    assert "congestion victim" in v["gpu-0003"]["reasons"][0]
    assert "incast" in v["gpu-0003"]["reasons"][0]  # no storm behind the leaf to name


def test_a_storming_nic_is_the_culprit_and_the_hosts_its_leaf_pauses_are_victims() -> None:
    # gpu-0003's NIC storms pauses; its leaf, its buffers full, pauses gpu-0001, -0005, -0006.
    storm = inc(1, "pfc_storm", "gpu-0003/mlx5_2")
    paused = [inc(i, "pfc_storm", f"leaf-r2-000/p{h + 1}") for i, h in ((2, 1), (3, 5), (4, 6))]
    marked = inc(5, "ecn_hotspot", "gpu-0007/mlx5_2", "warning")
    v = by_node([storm, *paused, marked])
    assert (v["gpu-0003"]["side"], v["gpu-0003"]["severity"]) == ("link", "critical")  # may drain
    for h in ("gpu-0001", "gpu-0005", "gpu-0006", "gpu-0007"):
        assert v[h]["severity"] == "info", h
        assert "the PFC storm from gpu-0003/mlx5_2" in v[h]["reasons"][0]
    assert "leaf-r2-000" not in v  # three paused hosts do not blame the leaf
    causes = root_causes([storm, *paused, marked], FABRIC)
    assert {e: c.incident_id for e, c in causes.items()} == {2: 1, 3: 1, 4: 1, 5: 1}


def test_slow_ranks_of_a_congested_host_are_watched_unless_its_own_link_is_bad() -> None:
    marked = inc(1, "ecn_hotspot", "gpu-0003/mlx5_2", "warning")
    slow = inc(2, "nccl_channel_slow", "gpu-0003/mlx5_2", "warning")
    assert by_node([marked, slow])["gpu-0003"]["severity"] == "info"
    downgraded = inc(3, "speed_downgrade", "gpu-0003/mlx5_1")
    assert by_node([marked, slow, downgraded])["gpu-0003"]["severity"] == "critical"


# -- root causes --------------------------------------------------------------------------------
def nccl(i: int, kind: str, port: str | None, host: str, **evidence: Any) -> dict[str, Any]:
    return {"id": i, "kind": kind, "node": host, "port": port, "severity": "warning", "status": "open",
            "summary": f"{kind} on {host}", "evidence": evidence}  # fmt: skip


def test_a_bad_link_is_the_root_cause_of_the_slow_ranks_on_its_nic_only() -> None:
    link = inc(1, "speed_downgrade", "gpu-0003/mlx5_2")
    on_nic = nccl(2, "nccl_channel_slow", "gpu-0003/mlx5_2", "gpu-0003", job="j1")
    other_nic = nccl(3, "nccl_channel_slow", "gpu-0003/mlx5_5", "gpu-0003", job="j1")
    no_nic = nccl(4, "nccl_channel_slow", None, "gpu-0003", job="j2")
    elsewhere = nccl(5, "nccl_channel_slow", "gpu-0004/mlx5_2", "gpu-0004")
    causes = root_causes([link, on_nic, other_nic, no_nic, elsewhere], FABRIC)
    assert {e: c.incident_id for e, c in causes.items()} == {2: 1, 4: 1}
    assert "bad link" in causes[2].reason and "speed_downgrade on gpu-0003/mlx5_2" in causes[2].reason


def test_a_job_slowdown_folds_under_the_link_only_when_all_its_slow_ranks_trace_to_links() -> None:
    link = inc(1, "speed_downgrade", "gpu-0003/mlx5_2")
    rank = nccl(2, "nccl_channel_slow", "gpu-0003/mlx5_2", "gpu-0003", job="j1")
    job = {**nccl(3, "nccl_job_slowdown", None, "", job="j1"), "node": None}
    assert {e: c.incident_id for e, c in root_causes([link, rank, job], FABRIC).items()} == {2: 1, 3: 1}
    unexplained = nccl(4, "nccl_channel_slow", "gpu-0006/mlx5_0", "gpu-0006", job="j1")
    assert 3 not in root_causes([link, rank, job, unexplained], FABRIC)


def test_a_slow_hop_folds_under_the_bad_link_at_either_end() -> None:
    link = inc(1, "link_flap", "gpu-0004/mlx5_1", "warning")
    hop = nccl(2, "nccl_hop_slow", None, "", src_host="gpu-0002", src_port="gpu-0002/mlx5_1",
               dst_host="gpu-0004", dst_port="gpu-0004/mlx5_1")  # fmt: skip
    assert root_causes([link, hop], FABRIC)[2].incident_id == 1


def test_a_failing_switch_is_the_root_of_its_links_and_of_the_ranks_behind_them() -> None:
    links = [inc(i, "speed_downgrade", f"gpu-000{i}/mlx5_2") for i in (1, 2, 3)]
    switch = {"id": 9, "kind": "switch_failure", "entity": "leaf-r2-000", "node": "leaf-r2-000",
              "port": None, "severity": "critical", "status": "open", "summary": "leaf fails",
              "evidence": {"incident_ids": [1, 2, 3]}}  # fmt: skip
    rank = nccl(4, "nccl_channel_slow", "gpu-0002/mlx5_2", "gpu-0002")
    elsewhere = inc(5, "speed_downgrade", "gpu-0002/mlx5_3")
    causes = root_causes([*links, switch, rank, elsewhere], FABRIC, frozenset({"switch_failure"}))
    assert {e: c.incident_id for e, c in causes.items()} == {1: 9, 2: 9, 3: 9, 4: 9}
    assert "bad link" in causes[4].reason  # why it is an effect, followed to the root


def test_an_effect_worse_than_its_cause_is_paged_on_its_own_and_resolved_causes_explain_nothing() -> None:
    flap = inc(1, "link_flap", "gpu-0003/mlx5_2", "info")
    rank = nccl(2, "nccl_channel_slow", "gpu-0003/mlx5_2", "gpu-0003")
    assert root_causes([flap, rank], FABRIC) == {}
    gone = inc(3, "speed_downgrade", "gpu-0003/mlx5_2", status="resolved")
    assert root_causes([gone, rank], FABRIC) == {}


def test_pushed_timings_fold_under_a_collected_cause_and_cause_nothing() -> None:
    link = inc(1, "speed_downgrade", "gpu-0003/mlx5_2")
    pushed = nccl(2, "nccl_channel_slow", "gpu-0003/mlx5_2", "gpu-0003", provenance="push")
    assert {e: c.incident_id for e, c in root_causes([link, pushed], FABRIC).items()} == {2: 1}
    path = {**nccl(3, "nccl_path_slow", None, "leaf-r2-000", provenance="push"), "hosts": ["gpu-0003"]}
    assert 3 not in root_causes([link, pushed, path], FABRIC)


def at(d: dict[str, Any], when: str) -> dict[str, Any]:
    return d | {"opened_at": f"2026-01-05T00:{when}+00:00"}


def test_a_dead_rank_folds_under_its_nics_link_failure_in_the_minutes_before_only() -> None:
    link = at(inc(1, "link_missing", "gpu-0003/mlx5_2"), "10:00")
    dead = at(
        nccl(2, "nccl_rank_dead", "gpu-0003/mlx5_2", "gpu-0003", job="j1") | {"severity": "critical"}, "10:40"
    )
    other_nic = at(nccl(3, "nccl_rank_dead", "gpu-0003/mlx5_5", "gpu-0003", job="j1"), "10:40")
    long_after = at(nccl(4, "nccl_rank_unresponsive", "gpu-0003/mlx5_2", "gpu-0003", job="j2"), "30:00")
    causes = root_causes([link, dead, other_nic, long_after], FABRIC)
    assert {e: c.incident_id for e, c in causes.items()} == {2: 1}
    assert causes[2].reason.startswith("its mlx5_2 link failed 40 s before (link_missing on gpu-0003/mlx5_2)")
    verdict = by_node([link, dead])["gpu-0003"]
    # link_missing is a host verdict of its own (its runbook); critical, so the host is drained
    assert verdict["side"] in ("host", "link") and verdict["severity"] == "critical"
    assert verdict["incident_ids"] == [1, 2]


def test_times_in_other_zones_are_compared_as_the_instants_they_are() -> None:
    """An offset is converted, not dropped: 12:00:40+02:00 is 40 s after a naive 10:00 (UTC)."""
    link = inc(1, "link_missing", "gpu-0003/mlx5_2") | {"opened_at": "2026-01-05T10:00:00"}
    dead = nccl(2, "nccl_rank_dead", "gpu-0003/mlx5_2", "gpu-0003", job="j1") | {
        "severity": "critical",
        "opened_at": "2026-01-05T12:00:40+02:00",
    }
    causes = root_causes([link, dead], FABRIC)
    assert causes[2].incident_id == 1 and "40 s before" in causes[2].reason
