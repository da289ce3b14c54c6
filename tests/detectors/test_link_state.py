"""Silent speed and width downgrades, driven by fabricsim and by hand-built batches."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from itertools import pairwise

import numpy as np
import pyarrow as pa
import pytest

from graywire.collectors.model import Fabric
from graywire.collectors.schemas import PHYS_LINK_UP, PHYS_POLLING, PORT_SAMPLE, TS, make_batch
from graywire.detectors.findings import Finding
from graywire.detectors.link_state import LinkDowngradeConfig, LinkDowngradeDetector, group_consensus
from graywire.detectors.pipeline import Pipeline
from graywire.fabricsim.sim import EPOCH, FabricSim, SimConfig
from graywire.fabricsim.topology import TopologySpec, build_fabric

G = 10**9
HOST = "gpu-0003/mlx5_2"
LEAF = "leaf-r2-000/p4"  # host 3's rail-2 NIC lands on the rail-2 leaf's 4th down port
LINK = f"{HOST}<->{LEAF}"
POLL = 10.0


# -- fabricsim ----------------------------------------------------------------------------------------
@dataclass
class Run:
    sim: FabricSim
    findings: list[Finding]
    batches: list[pa.RecordBatch]


def simulate(faults: str, duration_s: float = 240.0, seed: int = 0, hosts: int = 8) -> Run:
    sim = FabricSim(
        SimConfig(topology=TopologySpec(hosts=hosts), duration_s=duration_s, seed=seed, faults=faults)
    )
    pipe = Pipeline(sim.fabric, detectors=[LinkDowngradeDetector(sim.fabric)])
    findings: list[Finding] = []
    batches = []
    for st in sim.run():
        findings += pipe.process(st.port_sample)
        batches.append(st.port_sample)
    return Run(sim, findings, batches)


def rel(f: Finding) -> float:
    return (f.time - EPOCH).total_seconds()


def port_column(batches: list[pa.RecordBatch], key: str, column: str) -> list:
    """One port's value of ``column`` per poll (None where the port is missing)."""
    out = []
    for b in batches:
        ports = b.column("port").to_pylist()
        out.append(b.column(column)[ports.index(key)].as_py() if key in ports else None)
    return out


def test_speed_downgrade_from_fabricsim() -> None:
    run = simulate(f"speed_downgrade@30s+120s:{HOST}")
    fault = run.sim.faults[0]
    assert (fault.port, fault.peer, fault.node) == (HOST, LEAF, "gpu-0003")
    firing = [f for f in run.findings if f.status == "firing"]
    cleared = [f for f in run.findings if f.status == "cleared"]
    assert len(firing) == 1 and len(cleared) == 1
    f = firing[0]
    assert f.kind == "speed_downgrade"
    assert fault.start_s <= rel(f) <= fault.start_s + 2 * POLL
    assert (f.entity, f.node, f.port, f.link) == (LINK, "gpu-0003", HOST, LINK)
    assert f.detector == "link_downgrade/1"
    assert f.severity == "critical"
    assert f.evidence["expected"] == {"speed_bps": 800 * G, "width": 4}
    assert f.evidence["actual"] == {
        HOST: {"speed_bps": 400 * G, "width": 4},
        LEAF: {"speed_bps": 400 * G, "width": 4},
    }
    assert f.evidence["peer_port"] == LEAF
    assert f.evidence["since"] == (EPOCH + timedelta(seconds=30)).isoformat()
    assert "400G" in f.summary and "800G" in f.summary and "agrees" in f.summary

    c = cleared[0]
    assert (c.kind, c.entity, c.node, c.port, c.link) == ("speed_downgrade", LINK, "gpu-0003", HOST, LINK)
    assert fault.end_s < rel(c) <= fault.end_s + 2 * POLL
    assert c.evidence["actual"][HOST] == {"speed_bps": 800 * G, "width": 4}
    assert c.evidence["actual"][LEAF] == {"speed_bps": 800 * G, "width": 4}


def test_width_downgrade_from_fabricsim() -> None:
    run = simulate(f"width_downgrade@30s+120s:{HOST}")
    fault = run.sim.faults[0]
    # The width downgrade also halves the speed: it must be reported as width, not as speed.
    assert port_column(run.batches, HOST, "speed_bps")[4] == 400 * G
    assert [(f.kind, f.status) for f in run.findings] == [
        ("width_downgrade", "firing"),
        ("width_downgrade", "cleared"),
    ]
    f, c = run.findings
    assert fault.start_s <= rel(f) <= fault.start_s + 2 * POLL
    assert fault.end_s < rel(c) <= fault.end_s + 2 * POLL
    assert (f.entity, f.node, f.port, f.link) == (LINK, "gpu-0003", HOST, LINK)
    assert f.evidence["expected"] == {"speed_bps": 800 * G, "width": 4}
    assert f.evidence["actual"] == {
        HOST: {"speed_bps": 400 * G, "width": 2},
        LEAF: {"speed_bps": 400 * G, "width": 2},
    }
    assert "2x" in f.summary and "4x" in f.summary


def test_leaf_side_target_still_names_the_host_end() -> None:
    run = simulate(f"speed_downgrade@30s+120s:{LEAF}")
    firing = [f for f in run.findings if f.status == "firing"]
    assert len(firing) == 1
    assert (firing[0].node, firing[0].port, firing[0].link) == ("gpu-0003", HOST, LINK)


def test_healthy_run_gives_no_finding() -> None:
    for seed in (0, 1):
        run = simulate("none", duration_s=300, seed=seed)
        assert run.findings == []


@pytest.mark.parametrize(
    ("faults", "probe"),
    [
        (f"short_retrain@30s:{HOST}", "down"),
        ("counter_reset@30s+60s:gpu-0003", "reset"),
        (f"counter_wrap@30s+200s:{HOST}", "wrap"),
        ("collector_outage@30s+60s:leaf-r2-000", "outage"),
        ("checkpoint_burst@30s+60s", "burst"),
    ],
)
def test_benign_events_give_no_finding(faults: str, probe: str) -> None:
    run = simulate(faults)
    assert run.findings == []
    # ... and the event really happened in the data the detector saw.
    if probe == "down":
        phys = port_column(run.batches, HOST, "phys_state")
        assert phys.count(PHYS_POLLING) == 2  # down at 30 s and 40 s, back by 50 s
        assert port_column(run.batches, HOST, "speed_bps")[3:5] == [None, None]
    elif probe == "reset":
        rx = port_column(run.batches, HOST, "rx_bytes")
        assert rx[3] < rx[2]
    elif probe == "wrap":
        pk = port_column(run.batches, HOST, "rx_packets")
        assert any(b < a for a, b in pairwise(pk))
    elif probe == "outage":
        rows = [b.num_rows for b in run.batches]
        assert min(rows) < max(rows) == run.sim.fabric.n_ports
        assert port_column(run.batches, LEAF, "speed_bps")[4] is None
    else:
        tx = port_column(run.batches, HOST, "tx_bytes")
        assert tx[5] - tx[4] > tx[2] - tx[1]


# -- hand-built batches -----------------------------------------------------------------------------
T0 = datetime(2026, 2, 1, tzinfo=UTC)


@pytest.fixture(scope="module")
def fabric() -> Fabric:
    return build_fabric(TopologySpec(hosts=8))


class Collector:
    """Port samples for every fabric port (plus ``extra`` keys), one dictionary reused every poll."""

    def __init__(self, fabric: Fabric, extra: tuple[str, ...] = ()) -> None:
        self.keys = [*fabric.keys, *extra]
        self.dictionary = pa.array(self.keys)
        self.poll = 0

    def batch(self, state: Mapping[str, tuple[int, int | None, int | None]]) -> pa.RecordBatch:
        """``state`` overrides (phys, speed_bps, width) per key; everything else is up at 800G 4x."""
        n = len(self.keys)
        phys = np.full(n, PHYS_LINK_UP, dtype=np.uint8)
        speed: list[int | None] = [800 * G] * n
        width: list[int | None] = [4] * n
        for key, (p, s, w) in state.items():
            i = self.keys.index(key)
            phys[i], speed[i], width[i] = p, s, w
        t = T0 + timedelta(seconds=POLL * self.poll)
        self.poll += 1
        cols = {
            "time": pa.array([t] * n, type=TS),
            "port": pa.DictionaryArray.from_arrays(pa.array(np.arange(n, dtype=np.int32)), self.dictionary),
            "source": pa.DictionaryArray.from_arrays(pa.array(np.zeros(n, np.int8)), pa.array(["ufm"])),
            "phys_state": pa.array(phys),
            "speed_bps": pa.array(speed, type=pa.int64()),
            "width": pa.array(width, type=pa.uint8()),
        }
        return make_batch(PORT_SAMPLE, n, cols)


def feed(det: LinkDowngradeDetector, col: Collector, state: Mapping, polls: int) -> list[Finding]:
    out: list[Finding] = []
    for _ in range(polls):
        out += det.observe(col.batch(state))
    return out


def test_unknown_port_is_ignored(fabric: Fabric) -> None:
    det = LinkDowngradeDetector(fabric)
    col = Collector(fabric, extra=("stray-switch/p9",))
    assert feed(det, col, {"stray-switch/p9": (PHYS_LINK_UP, 100 * G, 1)}, 4) == []
    # The detector still judges the known ports of the same batches.
    found = feed(
        det, col, {"stray-switch/p9": (PHYS_LINK_UP, 100 * G, 1), HOST: (PHYS_LINK_UP, 400 * G, 4)}, 2
    )
    assert [(f.kind, f.status, f.link) for f in found] == [("speed_downgrade", "firing", LINK)]


def test_down_port_with_null_speed_is_not_judged(fabric: Fabric) -> None:
    det = LinkDowngradeDetector(fabric)
    col = Collector(fabric)
    down = {HOST: (PHYS_POLLING, None, None), LEAF: (PHYS_POLLING, None, None)}
    assert feed(det, col, down, 4) == []
    # Up but unread (speed null) is not judged either.
    assert feed(det, col, {HOST: (PHYS_LINK_UP, None, None), LEAF: (PHYS_LINK_UP, None, None)}, 3) == []
    # An open downgrade is neither confirmed nor cleared while the link is down.
    slow = {HOST: (PHYS_LINK_UP, 400 * G, 4), LEAF: (PHYS_LINK_UP, 400 * G, 4)}
    assert [(f.kind, f.status) for f in feed(det, col, slow, 2)] == [("speed_downgrade", "firing")]
    assert feed(det, col, down, 5) == []
    assert feed(det, col, {}, 1) == []
    assert [(f.kind, f.status) for f in feed(det, col, {}, 1)] == [("speed_downgrade", "cleared")]


def test_down_ports_count_as_neither_bad_nor_good(fabric: Fabric) -> None:
    det = LinkDowngradeDetector(fabric)
    col = Collector(fabric)
    slow = {HOST: (PHYS_LINK_UP, 400 * G, 4), LEAF: (PHYS_LINK_UP, 400 * G, 4)}
    down = {HOST: (PHYS_POLLING, None, None), LEAF: (PHYS_POLLING, None, None)}
    # bad, down, bad: the down poll keeps the run, so the second bad poll confirms.
    assert feed(det, col, slow, 1) == []
    assert feed(det, col, down, 1) == []
    assert [f.status for f in feed(det, col, slow, 1)] == ["firing"]


@pytest.mark.parametrize("slow_end", [HOST, LEAF])
def test_downgrade_on_one_end_gives_one_finding_for_the_link(fabric: Fabric, slow_end: str) -> None:
    det = LinkDowngradeDetector(fabric)
    col = Collector(fabric)
    found = feed(det, col, {slow_end: (PHYS_LINK_UP, 400 * G, 4)}, 3)
    assert len(found) == 1
    f = found[0]
    assert (f.kind, f.status, f.entity, f.node, f.port, f.link) == (
        "speed_downgrade", "firing", LINK, "gpu-0003", HOST, LINK,
    )  # fmt: skip
    other = LEAF if slow_end == HOST else HOST
    assert f.evidence["actual"] == {
        slow_end: {"speed_bps": 400 * G, "width": 4},
        other: {"speed_bps": 800 * G, "width": 4},
    }
    assert f.evidence["since"] == T0.isoformat()


def test_both_ends_bad_is_still_one_finding_and_widths_win_over_speed(fabric: Fabric) -> None:
    det = LinkDowngradeDetector(fabric)
    col = Collector(fabric)
    state = {HOST: (PHYS_LINK_UP, 400 * G, 2), LEAF: (PHYS_LINK_UP, 400 * G, 2)}
    found = feed(det, col, state, 4)
    assert [(f.kind, f.status, f.entity) for f in found] == [("width_downgrade", "firing", LINK)]


def test_speed_within_tolerance_is_not_a_downgrade(fabric: Fabric) -> None:
    det = LinkDowngradeDetector(fabric)
    col = Collector(fabric)
    assert feed(det, col, {HOST: (PHYS_LINK_UP, 799 * G, 4)}, 4) == []  # 99.9% of 800G
    strict = LinkDowngradeDetector(fabric, LinkDowngradeConfig(speed_tolerance=1.0))
    assert [f.kind for f in feed(strict, Collector(fabric), {HOST: (PHYS_LINK_UP, 799 * G, 4)}, 2)] == [
        "speed_downgrade"
    ]


def test_uplink_downgrade_names_the_leaf_and_spine(fabric: Fabric) -> None:
    det = LinkDowngradeDetector(fabric)
    col = Collector(fabric)
    up = "leaf-r2-000/p9"  # the leaf's first uplink
    spine = fabric.keys[int(fabric.peer[fabric.keys.index(up)])]
    found = feed(det, col, {up: (PHYS_LINK_UP, 400 * G, 4), spine: (PHYS_LINK_UP, 400 * G, 4)}, 2)
    assert len(found) == 1
    f = found[0]
    assert f.port == up and f.node == "leaf-r2-000"
    assert f.link == "<->".join(sorted((up, spine)))
    assert f.evidence["peer_port"] == spine


def test_empty_batch(fabric: Fabric) -> None:
    det = LinkDowngradeDetector(fabric)
    empty = {
        "time": pa.array([], TS),
        "port": pa.DictionaryArray.from_arrays(pa.array([], pa.int32()), pa.array([], pa.string())),
        "source": pa.DictionaryArray.from_arrays(pa.array([], pa.int8()), pa.array([], pa.string())),
    }
    assert det.observe(make_batch(PORT_SAMPLE, 0, empty)) == []


def test_since_survives_a_single_good_poll_while_open(fabric: Fabric) -> None:
    det = LinkDowngradeDetector(fabric)
    col = Collector(fabric)
    slow = {HOST: (PHYS_LINK_UP, 400 * G, 4)}
    assert [f.status for f in feed(det, col, slow, 3)] == ["firing"]
    assert feed(det, col, {}, 1) == []  # one good poll: still open (close_after=2)
    assert feed(det, col, slow, 3) == []
    cleared = feed(det, col, {}, 2)
    assert [f.status for f in cleared] == ["cleared"]
    assert cleared[0].evidence["since"] == T0.isoformat()


# -- expectations without an inventory: capabilities, then peer consensus ---------------------------
def blind(fabric: Fabric) -> Fabric:
    """The same fabric with no expected speed or width anywhere (an inventory without levels)."""
    return replace(
        fabric,
        expected_speed_bps=np.zeros_like(fabric.expected_speed_bps),
        expected_width=np.zeros_like(fabric.expected_width),
    )


def capabilities(entries: Mapping[str, tuple[int | None, int | None]]) -> pa.Table:
    """UFM's capabilities table: ``port -> (max_speed_bps, enabled_width)``."""
    keys = list(entries)
    return pa.table(
        {
            "port": pa.array(keys, pa.string()),
            "enabled_speed_bps": pa.array([entries[k][0] for k in keys], pa.int64()),
            "enabled_width": pa.array([entries[k][1] for k in keys], pa.uint8()),
            "supported_speed_bps": pa.array([None] * len(keys), pa.int64()),
            "supported_width": pa.array([None] * len(keys), pa.uint8()),
            "max_speed_bps": pa.array([entries[k][0] for k in keys], pa.int64()),
        }
    )


@pytest.mark.parametrize("kind", ["speed_downgrade", "width_downgrade"])
def test_peer_consensus_finds_a_downgrade_without_inventory(kind: str) -> None:
    sim = FabricSim(SimConfig(topology=TopologySpec(hosts=8), duration_s=240.0, seed=0,
                              faults=f"{kind}@30s+120s:{HOST}"))  # fmt: skip
    det = LinkDowngradeDetector(blind(sim.fabric))
    found = [f for st in sim.run() for f in det.observe(st.port_sample)]
    assert [(f.kind, f.status, f.link) for f in found] == [(kind, "firing", LINK), (kind, "cleared", LINK)]
    f = found[0]
    assert f.evidence["expected_from"] == "peers"
    assert f.evidence["expected"] == {"speed_bps": 800 * G, "width": 4}
    assert "peer consensus" in f.summary
    assert 30.0 <= rel(f) <= 30.0 + 2 * POLL


def test_peer_consensus_stays_quiet_on_a_healthy_blind_fabric() -> None:
    sim = FabricSim(SimConfig(topology=TopologySpec(hosts=8), duration_s=300.0, seed=1, faults="none"))
    det = LinkDowngradeDetector(blind(sim.fabric))
    assert [f for st in sim.run() for f in det.observe(st.port_sample)] == []


def test_mixed_generations_without_a_clear_majority_set_no_expectation(fabric: Fabric) -> None:
    det = LinkDowngradeDetector(blind(fabric))
    col = Collector(fabric)
    # Half the hosts' mlx5_2 links (both ends) run at 400G: no 75% majority, so nobody is judged.
    hosts = sorted({k for k in fabric.keys if k.endswith("/mlx5_2")})
    half = {}
    for k in hosts[: len(hosts) // 2]:
        p = int(fabric.peer[fabric.keys.index(k)])
        half[k] = half[fabric.keys[p]] = (PHYS_LINK_UP, 400 * G, 4)
    assert feed(det, col, half, 4) == []


def test_capabilities_set_the_expectation_where_the_inventory_has_none(fabric: Fabric) -> None:
    det = LinkDowngradeDetector(blind(fabric))
    # Every port enables 400G only: a 400G link is healthy, whatever its peers run at.
    det.set_capabilities(capabilities({k: (400 * G, 4) for k in fabric.keys}))
    col = Collector(fabric)
    at_400 = {k: (PHYS_LINK_UP, 400 * G, 4) for k in fabric.keys}
    assert feed(det, col, at_400, 3) == []
    # A port enabled for 800G whose link trains at 400G is a downgrade, judged on capabilities.
    det.set_capabilities(capabilities({HOST: (800 * G, 4), LEAF: (800 * G, 4)}))
    found = feed(det, col, at_400, 2)
    assert [(f.kind, f.status, f.link) for f in found] == [("speed_downgrade", "firing", LINK)]
    assert found[0].evidence["expected_from"] == "capabilities"
    assert found[0].evidence["expected"]["speed_bps"] == 800 * G


def test_inventory_wins_over_capabilities(fabric: Fabric) -> None:
    det = LinkDowngradeDetector(fabric)  # the inventory expects 800G 4x
    det.set_capabilities(capabilities({HOST: (400 * G, 4), LEAF: (400 * G, 4)}))
    found = feed(det, Collector(fabric), {HOST: (PHYS_LINK_UP, 400 * G, 4)}, 2)
    assert [(f.kind, f.evidence["expected_from"]) for f in found] == [("speed_downgrade", "inventory")]


def test_group_consensus_needs_quorum_and_share() -> None:
    groups = np.array([0, 0, 0, 0, 1, 1, 1, 2, 2, 2, 2])
    values = np.array([8, 8, 8, 4, 8, 8, 8, 8, 8, 4, 4])
    mode, mode_n, total = group_consensus(groups, values, 4, min_peers=4, min_share=0.75)
    assert mode.tolist() == [8, 0, 0, 0]  # group 1 too small, group 2 split, group 3 empty
    assert mode_n.tolist() == [3, 3, 2, 0]
    assert total.tolist() == [4, 3, 4, 0]
