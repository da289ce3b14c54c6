"""The drain policy's rules, one at a time, on hand-made verdicts (no database, no clock)."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

from graywire.detectors.correlate import NodeVerdict
from graywire.service.drain_policy import Breaker, Current, DrainPolicy, decide

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
POLICY = DrainPolicy(max_fraction=0.1, window=timedelta(minutes=10), clean_window=timedelta(minutes=10),
                     cooldown=timedelta(minutes=30))  # fmt: skip
OPEN = Breaker(tripped=False, since=None, recent_drains=0)


def link(node: str, iid: int, severity: str = "critical") -> NodeVerdict:
    return NodeVerdict(
        node, "host", "link", severity, [f"{node}/mlx5_3 negotiated 400G, expected 800G"], [iid]
    )


def incidents(*ids: int) -> dict[int, dict]:
    return {
        i: {"id": i, "opened_at": (T0 - timedelta(minutes=i)).isoformat(), "node": f"gpu-{i:04d}"}
        for i in ids
    }


def by_node(result) -> dict:
    return {d.node: d for d in result.decisions}


def test_a_bad_link_drains_with_a_readable_reason_and_its_incident() -> None:
    r = decide([link("gpu-0001", 1)], incidents(1), {}, {}, OPEN, hosts=64, policy=POLICY, now=T0)
    d = by_node(r)["gpu-0001"]
    assert (d.action, d.event, d.incident_ids) == ("drain", "drain", [1])
    assert "negotiated 400G, expected 800G" in d.reason
    assert d.since == T0 - timedelta(minutes=1)  # when the incident opened, not when we decided
    assert d.evidence["verdict"]["side"] == "link"


def test_below_min_severity_is_watched_and_switches_and_network_hosts_are_not_drained() -> None:
    verdicts = [
        NodeVerdict(
            "leaf-r2-000", "leaf", "network", "critical", ["links to 3 hosts"], [2, 3, 4], whole_switch=True
        ),
        NodeVerdict("gpu-0002", "host", "network", "critical", ["x (one of many)"], [2], "leaf-r2-000"),
        link("gpu-0005", 5, severity="info"),
    ]
    r = decide(verdicts, incidents(2, 3, 4, 5), {}, {}, OPEN, hosts=64, policy=POLICY, now=T0)
    d = by_node(r)
    assert "leaf-r2-000" not in d and "gpu-0002" not in d
    assert d["gpu-0005"].action == "watch"
    assert r.network == {"leaf-r2-000": (["gpu-0002", "gpu-0003", "gpu-0004"], [2, 3, 4])}


def test_excluded_node_is_watched_never_drained_and_an_existing_drain_is_lifted() -> None:
    excluded = {"gpu-0001": "by ops until removed: burn-in"}
    r = decide([link("gpu-0001", 1)], incidents(1), {}, excluded, OPEN, hosts=64, policy=POLICY, now=T0)
    d = by_node(r)["gpu-0001"]
    assert d.action == "watch" and "excluded" in d.reason and "burn-in" in d.reason
    cur = {"gpu-0001": Current("gpu-0001", "drain", T0, "r", (1,))}
    r = decide([link("gpu-0001", 1)], incidents(1), cur, excluded, OPEN, hosts=64, policy=POLICY, now=T0)
    assert (by_node(r)["gpu-0001"].action, by_node(r)["gpu-0001"].event) == ("watch", "lift_excluded")


def test_drained_node_returns_only_after_a_clean_window() -> None:
    cur = {"gpu-0001": Current("gpu-0001", "drain", T0, "bad link", (1,))}
    r = decide([], {}, cur, {}, OPEN, hosts=64, policy=POLICY, now=T0)
    d = by_node(r)["gpu-0001"]
    assert (d.action, d.clean_since, d.event) == ("drain", T0, None)
    assert "clean window" in d.reason
    # Still inside the window: drained. A verdict coming back restarts the wait.
    cur = {"gpu-0001": Current("gpu-0001", "drain", T0, "bad link", (1,), clean_since=T0)}
    r = decide([], {}, cur, {}, OPEN, hosts=64, policy=POLICY, now=T0 + timedelta(minutes=9))
    assert by_node(r)["gpu-0001"].action == "drain"
    r = decide([link("gpu-0001", 1)], incidents(1), cur, {}, OPEN, 64, POLICY, T0 + timedelta(minutes=9))
    assert (by_node(r)["gpu-0001"].action, by_node(r)["gpu-0001"].clean_since) == ("drain", None)
    later = T0 + timedelta(minutes=10)
    r = decide([], {}, cur, {}, OPEN, hosts=64, policy=POLICY, now=later)
    d = by_node(r)["gpu-0001"]
    assert (d.action, d.event, d.released_at) == ("none", "return_to_service", later)


def test_cooldown_after_return_to_service_watches_instead_of_draining() -> None:
    cur = {"gpu-0001": Current("gpu-0001", "none", T0, "back", (), released_at=T0)}
    r = decide([link("gpu-0001", 1)], incidents(1), cur, {}, OPEN, 64, POLICY, T0 + timedelta(minutes=5))
    d = by_node(r)["gpu-0001"]
    assert d.action == "watch" and "cooldown" in d.reason
    r = decide([link("gpu-0001", 1)], incidents(1), cur, {}, OPEN, 64, POLICY, T0 + timedelta(minutes=31))
    assert by_node(r)["gpu-0001"].action == "drain"


def test_circuit_breaker_caps_new_drains_and_trips_once() -> None:
    verdicts = [link(f"gpu-{i:04d}", i) for i in range(1, 11)]  # 10 bad hosts of 64: cap is 6
    r = decide(verdicts, incidents(*range(1, 11)), {}, {}, OPEN, hosts=64, policy=POLICY, now=T0)
    drains = [d for d in r.decisions if d.action == "drain"]
    held = [d for d in r.decisions if d.action == "watch"]
    assert (len(drains), len(held), r.cap, r.recent_drains) == (6, 4, 6, 6)
    assert r.tripped_now and "cap of 6" in r.breaker_message
    # Oldest incidents first: ids 10..5 opened earliest.
    assert sorted(d.node for d in drains) == [f"gpu-{i:04d}" for i in range(5, 11)]
    assert all(d.event == "hold" and "circuit breaker" in d.reason for d in held)
    # Tripped: nothing new is drained even when the window has room again.
    tripped = Breaker(tripped=True, since=T0, recent_drains=0)
    r = decide([link("gpu-0030", 30)], incidents(30), {}, {}, tripped, hosts=64, policy=POLICY, now=T0)
    assert [d.action for d in r.decisions] == ["watch"] and not r.tripped_now


def test_cap_counts_drains_already_made_in_the_window() -> None:
    br = Breaker(tripped=False, since=None, recent_drains=6)
    r = decide([link("gpu-0001", 1)], incidents(1), {}, {}, br, hosts=64, policy=POLICY, now=T0)
    assert by_node(r)["gpu-0001"].action == "watch" and r.tripped_now
    # max(min_nodes, fraction x hosts), at most max_nodes: one drain on a small cluster is no storm.
    assert DrainPolicy(max_fraction=0.1).cap(5) == 2
    assert DrainPolicy(max_fraction=0.1, min_nodes=1).cap(5) == 1
    assert DrainPolicy(max_fraction=0.1).cap(640) == 64
    assert DrainPolicy(max_fraction=0.1, max_nodes=20).cap(640) == 20


def test_watch_clears_when_the_incident_goes() -> None:
    cur = {"gpu-0001": Current("gpu-0001", "watch", T0, "meh", (1,))}
    r = decide([], {}, cur, {}, OPEN, hosts=64, policy=POLICY, now=T0)
    assert (by_node(r)["gpu-0001"].action, by_node(r)["gpu-0001"].event) == ("none", "clear")


def test_lifting_a_drain_for_an_exclusion_says_why_even_with_no_verdict_left() -> None:
    excluded = {"gpu-0001": "by ops until removed: burn-in"}
    cur = {"gpu-0001": Current("gpu-0001", "drain", T0, "bad link", (1,))}
    r = decide([], {}, cur, excluded, OPEN, hosts=64, policy=POLICY, now=T0)
    d = by_node(r)["gpu-0001"]
    assert (d.action, d.event) == ("watch", "lift_excluded")
    assert "excluded" in d.reason and "burn-in" in d.reason


def test_pushed_timings_never_raise_a_verdict_to_a_drain_nor_keep_a_drain() -> None:
    """A collected info incident plus a pushed warning is a watch; a drained node whose only
    evidence left is pushed returns to service after its clean window."""
    incs = incidents(1, 2)
    incs[1]["severity"] = "info"  # e.g. a saturated xmit-wait counter, collected
    incs[2] |= {"severity": "warning", "evidence": {"provenance": "push"}}
    v = NodeVerdict("gpu-0001", "host", "link", "warning", ["saturated", "pushed straggler"], [1, 2])
    d = by_node(decide([v], incs, {}, {}, OPEN, hosts=64, policy=POLICY, now=T0))["gpu-0001"]
    assert d.action == "watch" and d.reason.startswith("pushed timings only")
    trusted = replace(POLICY, trust_pushed=True)
    assert (
        by_node(decide([v], incs, {}, {}, OPEN, hosts=64, policy=trusted, now=T0))["gpu-0001"].action
        == "drain"
    )
    pushed = NodeVerdict("gpu-0001", "host", "host", "warning", ["pushed straggler"], [2])
    cur = {"gpu-0001": Current("gpu-0001", "drain", T0, "r", (2,), clean_since=T0)}
    later = T0 + timedelta(minutes=11)
    d = by_node(decide([pushed], incs, cur, {}, OPEN, hosts=64, policy=POLICY, now=later))["gpu-0001"]
    assert (d.action, d.event) == ("none", "return_to_service")


def test_two_drains_on_16_hosts_do_not_trip_the_breaker_a_third_does() -> None:
    """10% of 16 hosts is one node; the cap never goes under drain.min_nodes (2)."""
    two = decide([link("gpu-0001", 1), link("gpu-0002", 2)], incidents(1, 2), {}, {}, OPEN, hosts=16,
                 policy=DrainPolicy(), now=T0)  # fmt: skip
    assert [d.action for d in two.decisions] == ["drain", "drain"] and not two.tripped_now
    three = decide([link(f"gpu-000{i}", i) for i in (1, 2, 3)], incidents(1, 2, 3), {}, {}, OPEN, hosts=16,
                   policy=DrainPolicy(), now=T0)  # fmt: skip
    assert sorted(d.action for d in three.decisions) == ["drain", "drain", "watch"] and three.tripped_now


def test_a_switch_behind_one_slow_nccl_path_is_no_switch_failure() -> None:
    """The path's verdict sits on its leaf (network side); the leaf is not failing as a whole,
    so no ``switch_failure`` names it, and no host is drained for it."""
    path = NodeVerdict("leafr2", "leaf", "network", "warning", ["channel 1 slow via leafr2"], [7])
    behind = NodeVerdict(
        "node-01", "host", "network", "warning", ["rank 2 slow (behind leafr2)"], [8], "leafr2"
    )
    r = decide([path, behind], incidents(7, 8), {}, {}, OPEN, hosts=8, policy=POLICY, now=T0)
    assert r.network == {}
    assert "node-01" not in by_node(r) or by_node(r)["node-01"].action == "none"


def test_a_clean_window_restated_every_run_keeps_one_reason() -> None:
    """Each run inside the clean window states the window anew around the first reason, never
    around the last run's sentence (which grew by a sentence a poll)."""
    cur = Current("gpu-0001", "drain", T0, "bad link (rank 2 slow)", (1,))
    reasons = []
    for minute in range(4):
        r = decide(
            [], {}, {"gpu-0001": cur}, {}, OPEN, hosts=64, policy=POLICY, now=T0 + timedelta(minutes=minute)
        )
        d = by_node(r)["gpu-0001"]
        reasons.append(d.reason)
        cur = Current(
            "gpu-0001", d.action, d.since, d.reason, tuple(d.incident_ids), clean_since=d.clean_since
        )
    assert len(set(reasons)) == 1 and reasons[0].count("(was: ") == 1
    assert reasons[0].endswith("(was: bad link (rank 2 slow))")
