"""The topology detector: link views with the quirks real sources have, against the model."""

from __future__ import annotations

from datetime import UTC, datetime

import pyarrow as pa
import pytest

from graywire.collectors.model import Fabric, PortSpec
from graywire.collectors.schemas import LINK
from graywire.detectors.findings import Finding
from graywire.detectors.pipeline import Pipeline
from graywire.detectors.topology import TopologyDetector
from graywire.fabricsim.sim import FabricSim, SimConfig
from graywire.fabricsim.topology import TopologySpec, build_fabric

T0 = datetime(2026, 1, 5, tzinfo=UTC)


@pytest.fixture(scope="module")
def fabric() -> Fabric:
    # 40 hosts on 32-host leaves: the second group's leaves have free down ports.
    return build_fabric(TopologySpec(hosts=40, gpus=2))


def view(pairs: list[tuple[str, str]], source: str = "ufm") -> pa.RecordBatch:
    a = [p[0] for p in pairs]
    b = [p[1] for p in pairs]
    return pa.RecordBatch.from_pydict({"a_port": a, "b_port": b, "source": [source] * len(a)}, schema=LINK)


def model_cables(f: Fabric) -> list[tuple[str, str]]:
    return [(f.keys[a], f.keys[b]) for a, b in zip(f.link_a.tolist(), f.link_b.tolist(), strict=True)]


def peer(f: Fabric, key: str) -> str:
    return f.keys[int(f.peer[f.keys.index(key)])]


def firing(found: list[Finding]) -> list[Finding]:
    return [x for x in found if x.status == "firing"]


def detector(f: Fabric) -> TopologyDetector:
    return TopologyDetector(f, clock=lambda: T0)


def test_healthy_views_are_quiet_even_reported_from_both_ends(fabric: Fabric) -> None:
    det = detector(fabric)
    cables = model_cables(fabric)
    both_ends = cables + [(b, a) for a, b in cables]
    for _ in range(5):
        assert det.observe(view(both_ends)) == []
    assert det.observe(view(cables)) == []


def test_missing_cable_opens_after_three_complete_views_and_closes_when_back(fabric: Fabric) -> None:
    det = detector(fabric)
    nic = "gpu-0003/mlx5_0"
    without = [c for c in model_cables(fabric) if nic not in c]
    assert det.observe(view(model_cables(fabric))) == []
    assert det.observe(view(without)) == []
    assert det.observe(view(without)) == []
    (f,) = det.observe(view(without))
    assert (f.kind, f.status, f.severity) == ("link_missing", "firing", "critical")
    assert (f.node, f.port) == ("gpu-0003", nic)
    assert f.entity == f.link == f"{nic}<->{peer(fabric, nic)}"
    assert f.evidence["expected"] == {"a_port": nic, "b_port": peer(fabric, nic)}
    (c,) = det.observe(view(model_cables(fabric)))
    assert (c.kind, c.status) == ("link_missing", "cleared")


def test_a_partial_view_or_a_failed_scrape_neither_opens_nor_closes(fabric: Fabric) -> None:
    det = detector(fabric)
    cables = model_cables(fabric)
    nic = "gpu-0003/mlx5_0"
    without = [c for c in cables if nic not in c]
    det.observe(view(cables))
    det.observe(view(without))
    det.observe(view(without))
    # A UFM still discovering lists a third of the fabric: not a view of what is missing.
    partial = [c for c in without[: len(without) // 3]]
    assert det.observe(view(partial)) == []
    assert det.observe(view([])) == []  # an empty answer says nothing
    # (A failed scrape sends no batch at all: nothing is observed.)
    (f,) = det.observe(view(without))
    assert (f.kind, f.status) == ("link_missing", "firing")
    # A partial view that shows the cable is evidence it is there.
    (c,) = det.observe(view([(nic, peer(fabric, nic)), *partial]))
    assert (c.kind, c.status) == ("link_missing", "cleared")


def test_an_unplugged_single_cable_host_is_unknown_not_missing() -> None:
    nodes = {"h1": "host", "h2": "host", "leaf": "leaf"}
    ports = [PortSpec("h1", "nic0", rail=0), PortSpec("h2", "nic0", rail=0)]
    ports += [PortSpec("leaf", f"p{i}", rail=0) for i in (1, 2)]
    f = Fabric.from_specs(nodes, ports, [("h1/nic0", "leaf/p1"), ("h2/nic0", "leaf/p2")])
    det = detector(f)
    for _ in range(5):  # h1 is in no cable of the view: the source does not see it at all
        assert det.observe(view([("h2/nic0", "leaf/p2")])) == []


def test_a_moved_cable_is_one_cabling_changed_finding_and_no_missing_ones(fabric: Fabric) -> None:
    det = detector(fabric)
    cables = model_cables(fabric)
    x, y = "gpu-0003/mlx5_0", "gpu-0035/mlx5_0"  # y's cable is pulled to make room on another leaf
    old, new = peer(fabric, x), peer(fabric, y)
    det.observe(view(cables))
    moved = [c for c in cables if x not in c and y not in c] + [(new, x)]
    (f,) = det.observe(view(moved))
    assert (f.kind, f.status, f.severity) == ("cabling_changed", "firing", "warning")
    assert (f.node, f.port) == ("gpu-0003", x)
    assert f.entity == f"{x}<->{new}"
    assert f.evidence["ends"] == [x, new]
    assert f.evidence["expected_peer"] == {x: old, new: y}
    assert f.evidence["displaced"] == sorted([f"{x}<->{old}", f"{y}<->{new}"])
    assert f.evidence["sources"] == ["ufm"]
    assert old in f.summary and new in f.summary
    for _ in range(6):  # the displaced cables are its evidence, not findings of their own
        assert det.observe(view(moved)) == []
    assert det.observe(view(cables)) == []
    (c,) = det.observe(view(cables))
    assert (c.kind, c.status) == ("cabling_changed", "cleared")


def test_a_cable_between_uncabled_ports_is_unexpected(fabric: Fabric) -> None:
    det = detector(fabric)
    a, b = "leaf-r0-001/p20", "leaf-r1-001/p20"  # free down ports of the second group
    assert fabric.peer[fabric.keys.index(a)] < 0
    det.observe(view(model_cables(fabric)))
    (f,) = det.observe(view([*model_cables(fabric), (a, b)]))
    assert (f.kind, f.status) == ("link_unexpected", "firing")
    assert f.evidence["expected_peer"] == {a: None, b: None}


def test_guid_spelled_ends_resolve_to_the_model_port(fabric: Fabric) -> None:
    det = detector(fabric)
    cables = model_cables(fabric)
    nic = "gpu-0003/mlx5_0"
    i = fabric.keys.index(nic)
    guid = fabric.guids[i].upper().replace("0X", "0x")  # as an unresolved source spells it
    spelled = [(f"{guid}/1", b) if a == nic else (a, b) for a, b in cables]
    for _ in range(5):
        assert det.observe(view(spelled)) == []


def test_rail_miscabling_is_found_at_start_up_per_cable(fabric: Fabric) -> None:
    det = detector(fabric)
    x, y = "gpu-0004/mlx5_0", "gpu-0004/mlx5_1"  # the two cables swapped at the back of the host
    px, py = peer(fabric, x), peer(fabric, y)
    swapped = [c for c in model_cables(fabric) if x not in c and y not in c] + [(x, py), (y, px)]
    found = det.observe(view(swapped))
    assert sorted((f.kind, f.entity) for f in found) == [
        ("rail_miscabled", f"{x}<->{py}"),
        ("rail_miscabled", f"{y}<->{px}"),
    ]
    fx = next(f for f in found if f.port == x)
    assert fx.severity == "critical" and fx.node == "gpu-0004"
    assert fx.evidence["nic_rail"] == 0 and fx.evidence["actual_leaf_rail"] == 1
    assert fx.evidence["expected_leaf"] == px.split("/")[0]
    assert fx.evidence["actual_leaf"] == py.split("/")[0]
    assert det.observe(view(swapped)) == []


def test_two_nics_of_one_host_on_one_leaf() -> None:
    nodes = {"h1": "host", "h2": "host", "h3": "host", "leaf0": "leaf", "leaf1": "leaf"}
    ports = [PortSpec(h, f"nic{r}", rail=r) for h in ("h1", "h2", "h3") for r in (0, 1)]
    ports += [PortSpec(lf, f"p{i}") for lf in ("leaf0", "leaf1") for i in range(1, 5)]
    links = [(f"h{h}/nic{r}", f"leaf{r}/p{h}") for h in (1, 2, 3) for r in (0, 1)]
    f = Fabric.from_specs(nodes, ports, links)
    det = detector(f)
    seen = [c for c in links if c[0] != "h1/nic1"] + [("h1/nic1", "leaf0/p4")]
    found = firing(det.observe(view(seen)))
    kinds = {(x.kind, x.entity) for x in found}
    assert ("rail_miscabled", "h1/nic1<->leaf0/p4") in kinds
    bad = next(x for x in found if x.entity == "h1/nic1<->leaf0/p4")
    assert bad.evidence["same_leaf_nics"] == ["h1/nic0"]


def test_an_inventory_that_is_itself_miscabled_is_found_at_start_up() -> None:
    nodes = {"h1": "host", "h2": "host", "h3": "host", "leaf0": "leaf", "leaf1": "leaf"}
    ports = [PortSpec(h, f"nic{r}", rail=r) for h in ("h1", "h2", "h3") for r in (0, 1)]
    ports += [PortSpec(lf, f"p{i}") for lf in ("leaf0", "leaf1") for i in range(1, 4)]
    links = [(f"h{h}/nic{r}", f"leaf{r}/p{h}") for h in (2, 3) for r in (0, 1)]
    links += [("h1/nic0", "leaf1/p1"), ("h1/nic1", "leaf0/p1")]  # declared swapped
    f = Fabric.from_specs(nodes, ports, links)
    det = detector(f)
    found = det.observe(view(links[:1]))  # whatever the first view shows
    assert sorted(x.entity for x in found) == ["h1/nic0<->leaf1/p1", "h1/nic1<->leaf0/p1"]
    assert {x.evidence["from"] for x in found} == {"inventory"}


def test_a_reporter_side_source_covers_only_the_switches_it_walked(fabric: Fabric) -> None:
    det = detector(fabric)
    walked = "leaf-r0-000"
    # The walked switch's neighbours, its own port first (hosts below, spines above).
    lldp = [(b, a) if b.startswith(walked) else (a, b) for a, b in model_cables(fabric) if walked in a + b]
    nic = "gpu-0001/mlx5_0"  # on leaf-r0-000
    without = [c for c in lldp if c[1] != nic]
    for _ in range(2):
        assert det.observe(view(without, "lldp")) == []
    (f,) = det.observe(view(without, "lldp"))
    assert (f.kind, f.port) == ("link_missing", nic)
    # Every other leaf's cables are unknown to this source, not missing.


def test_the_pipeline_routes_link_views_dated_by_their_poll(fabric: Fabric) -> None:
    sim = FabricSim(SimConfig(topology=TopologySpec(hosts=40, gpus=2), duration_s=60, faults="none"))
    pipe = Pipeline(sim.fabric)
    step = sim.step()
    assert "link_missing" in pipe.kinds
    cables = [c for c in model_cables(sim.fabric) if "gpu-0003/mlx5_0" not in c]
    found: list[Finding] = []
    for _ in range(3):
        step = sim.step()
        found += pipe.process_poll([step.port_sample, view(cables)]).findings
    (f,) = [x for x in found if x.kind == "link_missing"]
    assert f.time == step.time
    assert pipe.stats["topology"].batches == 3


def test_end_to_end_a_cable_moved_mid_run_is_one_cabling_changed_finding() -> None:
    spec = "cable_moved@60s+600s:gpu-0002/mlx5_3,rail_miscabled:gpu-0010/mlx5_4"
    sim = FabricSim(SimConfig(topology=TopologySpec(hosts=64), duration_s=400, seed=3, faults=spec))
    moved = next(f for f in sim.faults if f.kind == "cable_moved")
    pipe = Pipeline(sim.fabric)
    found: list[Finding] = []
    first: list[Finding] = []
    for step in sim.run():
        got = pipe.process_poll([step.port_sample, step.links]).findings
        if step.index == 0:
            first = got
        found += got
    # The miscabled rail is found on the first poll, one finding per swapped cable.
    assert sorted(f.kind for f in first) == ["rail_miscabled", "rail_miscabled"]
    assert {f.node for f in first} == {"gpu-0010"}
    changed = [f for f in found if f.kind == "cabling_changed"]
    (f,) = changed
    assert f.status == "firing" and f.port == "gpu-0002/mlx5_3"
    assert f.evidence["ends"] == ["gpu-0002/mlx5_3", moved.extra["to"]]
    assert f.evidence["expected_peer"]["gpu-0002/mlx5_3"] == moved.peer
    assert not [x for x in found if x.kind in ("link_missing", "link_unexpected")]
    # The move shows as a link down on the ports it touched, then the new cable comes up.
    batch = step.port_sample
    last = dict(zip(batch.column("port").to_pylist(), batch.column("link_downed").to_pylist(), strict=True))
    assert last["gpu-0002/mlx5_3"] >= 1 and last[moved.extra["displaced"]] >= 1


def test_a_nic_named_as_the_model_does_not_is_unknown_not_moved_or_missing(fabric: Fabric) -> None:
    """LLDP from a host NIC's own agent names its port by netdev (``ens1f0np0``) or MAC, the model
    by RDMA device: such a cable says nothing certain, so it opens nothing, and the modelled
    cable of its known end is neither missing nor changed."""
    det = detector(fabric)

    def netdev(key: str) -> str:
        return f"{key.split('/')[0]}/ens{key[-1]}f0np0" if key.startswith("gpu-") else key

    renamed = [(netdev(a), netdev(b)) for a, b in model_cables(fabric)]
    assert sum(a != x or b != y for (a, b), (x, y) in zip(renamed, model_cables(fabric), strict=True)) == 80
    for _ in range(5):
        assert det.observe(view(renamed, source="lldp")) == []
