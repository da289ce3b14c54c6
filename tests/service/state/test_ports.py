"""The port view's pure parts: which ports an incident marks, and grid rows for any fabric shape."""

from __future__ import annotations

from graywire.collectors.model import Fabric, PortSpec
from graywire.service.state.fabric import StateBoard
from graywire.service.state.ports import FabricLayout, build_view, incident_ports


def small_fabric() -> Fabric:
    nodes = {"h1": "host", "h2": "host", "h3": "host", "leaf": "leaf"}
    ports = [
        PortSpec("h1", "nic0", 400 * 10**9, 4),
        PortSpec("h2", "nic0", 400 * 10**9, 4),
        PortSpec("h3", "nic0"),  # cabled to nothing the inventory knows
        PortSpec("leaf", "p1"),
        PortSpec("leaf", "p2"),
    ]
    return Fabric.from_specs(nodes, ports, [("h1/nic0", "leaf/p1"), ("leaf/p2", "h2/nic0")])


def test_an_incident_marks_its_port_and_both_ends_of_its_link() -> None:
    layout = FabricLayout(small_fabric())
    idx = layout.key_index
    link = {"port": "h1/nic0", "link": "h1/nic0<->leaf/p1", "entity": "h1/nic0<->leaf/p1"}
    assert incident_ports(link, idx) == {idx["h1/nic0"], idx["leaf/p1"]}
    assert incident_ports({"port": "h2/nic0", "entity": "job:0:rank3"}, idx) == {idx["h2/nic0"]}
    assert incident_ports({"entity": "h3/nic0"}, idx) == {idx["h3/nic0"]}
    assert incident_ports({"node": "h3", "entity": "h3"}, idx) == set()  # a node, not a port


def test_grid_rows_merge_host_ends_and_keep_unswitched_ports() -> None:
    layout = FabricLayout(small_fabric())
    f = layout.fabric
    rows = [(f.node_names[j], [f.keys[i] for i in main], [f.keys[p] if p >= 0 else None for p in peer])
            for j, main, peer in layout.grid_rows]  # fmt: skip
    assert rows == [
        ("leaf", ["leaf/p1", "leaf/p2"], ["h1/nic0", "h2/nic0"]),
        ("h3", ["h3/nic0"], [None]),
    ]
    assert [f.node_names[j] if j >= 0 else None for j in layout.switch_of] == [
        "leaf",
        "leaf",
        None,
        "leaf",
        "leaf",
    ]


def test_severity_becomes_health_and_resolved_incidents_do_not_count() -> None:
    layout = FabricLayout(small_fabric())
    incidents = [
        {"id": 1, "status": "open", "severity": "info", "kind": "ber_degradation", "port": "h2/nic0"},
        {
            "id": 2,
            "status": "acknowledged",
            "severity": "critical",
            "kind": "link_flap",
            "link": "h1/nic0<->leaf/p1",
        },
        {"id": 3, "status": "resolved", "severity": "critical", "kind": "speed_downgrade", "port": "h3/nic0"},
    ]
    v = build_view(layout, StateBoard(layout.fabric).current, incidents)
    health = dict(zip(layout.fabric.keys, v.health.tolist(), strict=True))
    assert health == {"h1/nic0": 2, "h2/nic0": 1, "h3/nic0": 0, "leaf/p1": 2, "leaf/p2": 0}
    assert v.port(layout.key_index["leaf/p2"])["health"] == "no_data"  # nothing read yet: not ok
    assert v.link(1)["health"] == "warning" and v.link(1)["incident_ids"] == [1]
    assert v.port(layout.key_index["h3/nic0"])["state"] == "unknown"


def test_a_port_without_a_cable_in_the_model_is_down_by_design_not_a_problem() -> None:
    """A switch's empty ports read down; only a down port the model cables is flagged and counted.
    Changed: every leaf with unused ports was listed as "with a problem" on the status page."""
    from dataclasses import replace

    import numpy as np

    layout = FabricLayout(small_fabric())
    f = layout.fabric
    down = np.full(f.n_ports, 2, dtype=np.uint8)  # phys Polling on every port
    state = replace(
        StateBoard(f).current, port_phys_state=down, port_logical_state=np.ones(f.n_ports, np.uint8)
    )
    v = build_view(layout, state, [])
    flagged = {f.keys[i] for i in np.flatnonzero(v.flags() & 2)}
    assert flagged == {"h1/nic0", "h2/nic0", "leaf/p1", "leaf/p2"}  # h3/nic0 has no cable
    assert v.port(layout.key_index["h3/nic0"])["state"] == "down"  # still read as it is
