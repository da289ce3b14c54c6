"""PFC storms and ECN hotspots: fabricsim faults and benign bursts, and hand-built counters."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from functools import cache

import numpy as np
import pyarrow as pa
import pytest

from graywire.collectors.model import Fabric
from graywire.collectors.schemas import PFC_PRIORITIES, PORT_SAMPLE, TS, make_batch
from graywire.detectors.congestion import (
    EcnHotspotConfig,
    EcnHotspotDetector,
    PfcStormConfig,
    PfcStormDetector,
)
from graywire.detectors.findings import Finding
from graywire.detectors.rates import CounterRates
from graywire.fabricsim.faults import Fault
from graywire.fabricsim.sim import EPOCH, FabricSim, SimConfig
from graywire.fabricsim.topology import TopologySpec, build_fabric

POLL = 10.0
START = 60.0
HOST = "gpu-0003/mlx5_2"
LEAF = "leaf-r2-000/p4"  # host 3's rail-2 NIC lands on the rail-2 leaf's 4th down port
LINK = f"{HOST}<->{LEAF}"
# What the two detectors read from fabricsim (RoCE priority 3), plus rx_bytes for the probes.
RATE_COLUMNS = (
    "rx_bytes", "rx_packets", "ecn_marked_packets", "pfc3_tx_pause_seconds", "pfc3_rx_pause_seconds"
)  # fmt: skip


# -- fabricsim ----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Run:
    faults: tuple[Fault, ...]
    pfc: tuple[Finding, ...]
    ecn: tuple[Finding, ...]
    max_pause_share: tuple[float, ...]  # per poll, over every port
    median_marked: tuple[float, ...]  # per poll, over host ports


@cache
def simulate(faults: str, seed: int = 0, duration_s: float = 300.0) -> Run:
    sim = FabricSim(
        SimConfig(topology=TopologySpec(hosts=8), duration_s=duration_s, seed=seed, faults=faults)
    )
    rates = CounterRates(RATE_COLUMNS)
    pfc_det, ecn_det = PfcStormDetector(sim.fabric), EcnHotspotDetector(sim.fabric)
    pfc: list[Finding] = []
    ecn: list[Finding] = []
    shares: list[float] = []
    marked: list[float] = []
    for st in sim.run():
        r = rates.observe(st.port_sample)
        pfc += pfc_det.observe(r)
        ecn += ecn_det.observe(r)
        share = r.column("pfc3_tx_pause_seconds_per_second").to_numpy(zero_copy_only=False)
        marks = r.column("ecn_marked_packets_per_second").to_numpy(zero_copy_only=False)
        pkts = r.column("rx_packets_per_second").to_numpy(zero_copy_only=False)
        shares.append(float(np.nanmax(share)) if np.isfinite(share).any() else np.nan)
        with np.errstate(invalid="ignore", divide="ignore"):
            frac = marks / pkts
        marked.append(float(np.nanmedian(frac)) if np.isfinite(frac).any() else np.nan)
    return Run(tuple(sim.faults), tuple(pfc), tuple(ecn), tuple(shares), tuple(marked))


def rel(f: Finding) -> float:
    return (f.time - EPOCH).total_seconds()


def check_place(f: Finding) -> None:
    assert (f.entity, f.node, f.port, f.link) == (HOST, "gpu-0003", HOST, LINK)


@pytest.mark.parametrize("seed", [0, 1])
def test_pfc_storm_found_within_two_polls_and_cleared(seed: int) -> None:
    run = simulate(f"pfc_storm@60s+120s:{HOST}", seed)
    fault = run.faults[0]
    assert (fault.port, fault.node, fault.start_s, fault.end_s) == (HOST, "gpu-0003", START, 180.0)
    culprit = [f for f in run.pfc if f.entity == HOST]
    assert [f.status for f in culprit] == ["firing", "cleared"]
    # The storm spreads: the leaf, its buffers full, pauses every other port feeding it. Those
    # are reported where they are (the leaf's ports), and clear with the storm.
    leaf = LEAF.split("/")[0]
    assert fault.extra == {"spreads_to": leaf}
    spread = [f for f in run.pfc if f.entity != HOST]
    assert spread and all(f.node == leaf and f.port.startswith(f"{leaf}/") for f in spread)
    by_port: dict[str, list[str]] = {}
    for x in spread:
        by_port.setdefault(x.entity, []).append(x.status)
    assert all(statuses == ["firing", "cleared"] for statuses in by_port.values()), by_port
    f, c = culprit
    assert f.kind == "pfc_storm" and f.detector == "pfc_storm/1"
    check_place(f)
    assert f.severity == "critical"
    # The poll at 60 s already covers a stormed interval; the next one confirms (open_after=2).
    assert rel(f) == START + POLL
    assert f.evidence == {
        "tx_pause_share": pytest.approx(0.995, abs=1e-6),
        "priority": 3,
        "threshold": 0.95,
        "paused_peer": LEAF,
        "polls_required": 2,
    }
    assert f.score == f.evidence["tx_pause_share"]
    share = f.evidence["tx_pause_share"]
    assert f.summary == f"{HOST} holds {LEAF} paused {share:.0%} of the time on priority 3 (PFC storm)"
    check_place(c)
    assert fault.end_s < rel(c) <= fault.end_s + 2 * POLL
    assert c.summary == f"{HOST} PFC pauses back to normal"
    assert run.ecn == ()  # a paused link carries almost nothing: no ECN marks either


@pytest.mark.parametrize("seed", [0, 1])
def test_ecn_hotspot_found_localized_and_cleared(seed: int) -> None:
    run = simulate(f"ecn_hotspot@60s+120s:{HOST}", seed)
    fault = run.faults[0]
    assert [f.status for f in run.ecn] == ["firing", "cleared"]
    f, c = run.ecn
    assert f.kind == "ecn_hotspot" and f.detector == "ecn_hotspot/1"
    check_place(f)
    assert f.severity == "warning"
    assert rel(f) == START + 2 * POLL  # three hot polls in a row (open_after=3): 60, 70, 80 s
    ev = f.evidence
    assert ev["marked_fraction"] == pytest.approx(2e-7 * fault.magnitude, rel=0.1)  # fabricsim's model
    assert ev["ratio_to_peers"] >= 20
    assert ev["marked_fraction"] == pytest.approx(ev["ratio_to_peers"] * ev["peer_median_fraction"])
    assert ev["robust_z"] >= 4 and f.score == ev["robust_z"]
    assert ev["marks_per_second"] >= 10
    assert "ECN-marked packets" in f.summary and "peers' median" in f.summary
    check_place(c)
    assert fault.end_s < rel(c) <= fault.end_s + 3 * POLL
    assert run.pfc == ()


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_healthy_runs_give_no_finding(seed: int) -> None:
    run = simulate("none", seed)
    assert run.pfc == ()
    assert run.ecn == ()


@pytest.mark.parametrize("seed", [0, 1])
def test_checkpoint_burst_gives_no_finding(seed: int) -> None:
    run = simulate("checkpoint_burst@60s+120s", seed)
    assert run.pfc == ()
    assert run.ecn == ()
    # Everyone marks far more during the burst (fabricsim: marking ~ load^8), and pauses more ...
    quiet, burst = run.median_marked[1:6], run.median_marked[7:18]
    assert min(burst) > 50 * max(quiet)
    assert max(run.max_pause_share[7:18]) > 10 * max(run.max_pause_share[1:6])
    # ... but pauses last milliseconds a second, nowhere near a storm.
    assert max(run.max_pause_share[1:]) < 0.05  # (the first poll has no rates)


BENIGN = (
    f"short_retrain@40s:{HOST},counter_reset@100s+60s:gpu-0003,counter_wrap@160s+400s:{HOST},"
    "collector_outage@240s+60s:gpu-0003,collector_outage@320s+60s:leaf-r2-000"
)


def test_other_benign_events_give_no_finding() -> None:
    run = simulate(BENIGN, 0, duration_s=450.0)
    assert len(run.faults) == 5
    assert run.pfc == ()
    assert run.ecn == ()


# -- hand-built batches -----------------------------------------------------------------------------------
T0 = datetime(2026, 2, 1, tzinfo=UTC)
PACKETS = 1e8  # received per 10 s poll on every port


@pytest.fixture(scope="module")
def fabric() -> Fabric:
    return build_fabric(TopologySpec(hosts=8))


class Ports:
    """Hand-built port samples for every fabric port with cumulative PFC and ECN counters.

    PFC pause time is reported on host ports only unless ``pfc_everywhere``; ECN marks exist on
    host ports only (RoCE NP counters live on NICs), so switch ports carry nulls as they would.
    """

    def __init__(self, fabric: Fabric, pfc_everywhere: bool = False) -> None:
        self.keys = list(fabric.keys)
        self.dictionary = pa.array(self.keys)
        self.host = fabric.host_port.copy()
        self.pfc_ports = np.ones(len(self.keys), bool) if pfc_everywhere else self.host.copy()
        n = len(self.keys)
        self.pause = np.full((len(PFC_PRIORITIES), n), 100.0)
        self.marks = np.full(n, 5000, dtype=np.uint64)
        self.packets = np.full(n, 10**9, dtype=np.uint64)
        self.poll = 0

    def batch(
        self,
        pause: Sequence[tuple[str, int, float]] = (),
        marks: Mapping[str, float] | None = None,
        base_marks: float | np.ndarray = 0.0,
        packets: Mapping[str, float] | None = None,
        no_pfc: tuple[str, ...] = (),
        ecn_only: tuple[str, ...] | None = None,
    ) -> pa.RecordBatch:
        """One poll. ``pause``: (port, priority, share of the poll paused) triples; ``marks``: port -> marks
        this poll (others get ``base_marks``); ``no_pfc``: ports whose PFC columns are null this poll;
        ``ecn_only``: the only ports reporting ECN this poll."""
        n = len(self.keys)
        for key, prio, share in pause:
            self.pause[prio, self.keys.index(key)] += share * POLL
        inc_marks = np.broadcast_to(np.asarray(base_marks, dtype=np.float64), (n,)).copy()
        for key, v in (marks or {}).items():
            inc_marks[self.keys.index(key)] = v
        inc_pkts = np.full(n, PACKETS)
        for key, v in (packets or {}).items():
            inc_pkts[self.keys.index(key)] = v
        self.marks += np.rint(inc_marks).astype(np.uint64)
        self.packets += np.rint(inc_pkts).astype(np.uint64)
        pfc_valid = self.pfc_ports.copy()
        for key in no_pfc:
            pfc_valid[self.keys.index(key)] = False
        ecn_valid = self.host.copy()
        if ecn_only is not None:
            ecn_valid[:] = False
            ecn_valid[[self.keys.index(k) for k in ecn_only]] = True
        t = T0 + timedelta(seconds=POLL * self.poll)
        self.poll += 1
        cols = {
            "time": pa.array([t] * n, type=TS),
            "port": pa.DictionaryArray.from_arrays(pa.array(np.arange(n, dtype=np.int32)), self.dictionary),
            "source": pa.DictionaryArray.from_arrays(pa.array(np.zeros(n, np.int8)), pa.array(["ufm"])),
            "rx_packets": pa.array(self.packets),
            "ecn_marked_packets": pa.array(self.marks, mask=~ecn_valid),
        }
        for p in PFC_PRIORITIES:
            cols[f"pfc{p}_tx_pause_seconds"] = pa.array(self.pause[p], mask=~pfc_valid)
        return make_batch(PORT_SAMPLE, n, cols)


class Feed:
    """Ports -> CounterRates -> one detector; remembers the poll of each finding."""

    def __init__(self, det: PfcStormDetector | EcnHotspotDetector, ports: Ports) -> None:
        self.det = det
        self.ports = ports
        self.rates = CounterRates()
        self.found: list[tuple[int, Finding]] = []

    def polls(self, count: int, **kw: object) -> list[Finding]:
        out = []
        for _ in range(count):
            k = self.ports.poll
            new = self.det.observe(self.rates.observe(self.ports.batch(**kw)))  # type: ignore[arg-type]
            self.found += [(k, f) for f in new]
            out += new
        return out


# PFC ---------------------------------------------------------------------------------------------------
def test_pfc_storm_opens_on_the_second_poll_with_exact_evidence(fabric: Fabric) -> None:
    feed = Feed(PfcStormDetector(fabric), Ports(fabric))
    storm = [(HOST, 5, 0.97)]
    assert feed.polls(2, pause=storm) == []  # the first poll only sets the baseline; one bad poll
    (f,) = feed.polls(1, pause=storm)
    assert (f.kind, f.status, f.severity) == ("pfc_storm", "firing", "critical")
    check_place(f)
    assert f.evidence == {
        "tx_pause_share": pytest.approx(0.97),
        "priority": 5,
        "threshold": 0.95,
        "paused_peer": LEAF,
        "polls_required": 2,
    }
    assert f.summary == f"{HOST} holds {LEAF} paused 97% of the time on priority 5 (PFC storm)"
    assert feed.polls(5, pause=storm) == []  # open: not repeated
    assert feed.polls(1) == []  # one quiet poll does not close it (close_after=2)
    (c,) = feed.polls(1)
    assert (c.status, c.severity, c.entity) == ("cleared", "critical", HOST)
    assert c.evidence["tx_pause_share"] == 0.0
    assert [k for k, _ in feed.found] == [2, 9]


@pytest.mark.parametrize("share", [0.5, 0.9, 0.94])
def test_heavy_pausing_under_the_storm_share_never_opens(fabric: Fabric, share: float) -> None:
    feed = Feed(PfcStormDetector(fabric), Ports(fabric))
    assert feed.polls(20, pause=[(HOST, 3, share), ("gpu-0004/mlx5_2", 3, share)]) == []
    assert feed.det.hyst.bad_run.max() == 0


def test_storm_share_is_configurable(fabric: Fabric) -> None:
    feed = Feed(PfcStormDetector(fabric, PfcStormConfig(storm_share=0.5)), Ports(fabric))
    found = feed.polls(3, pause=[(HOST, 3, 0.5)])
    assert [(f.status, f.entity, f.evidence["threshold"]) for f in found] == [("firing", HOST, 0.5)]


def test_ports_without_pfc_counters_are_ignored(fabric: Fabric) -> None:
    # An InfiniBand fabric: no PFC anywhere, every pause column null.
    ib = Ports(fabric)
    ib.pfc_ports[:] = False
    feed = Feed(PfcStormDetector(fabric), ib)
    assert feed.polls(6) == []
    assert feed.det.hyst.bad_run.sum() == 0 and feed.det.hyst.good_run.sum() == 0  # nothing judged
    # Hosts with PFC and switches without: only the port with counters is judged and blamed.
    feed = Feed(PfcStormDetector(fabric), Ports(fabric))
    found = feed.polls(3, pause=[(HOST, 3, 1.0)])
    assert [(f.status, f.entity) for f in found] == [("firing", HOST)]
    assert feed.det.hyst.good_run[fabric.keys.index(LEAF)] == 0  # the switch side was never judged


def test_a_poll_without_pfc_counters_neither_confirms_nor_resets(fabric: Fabric) -> None:
    feed = Feed(PfcStormDetector(fabric), Ports(fabric))
    storm = [(HOST, 3, 1.0)]
    assert feed.polls(2, pause=storm) == []  # baseline, first bad poll
    assert feed.polls(1, pause=storm, no_pfc=(HOST,)) == []  # unknown: the run is kept
    assert feed.polls(1, pause=storm) == []  # no rate across the null sample: still unknown
    (f,) = feed.polls(1, pause=storm)  # the second bad poll opens it
    assert (f.status, f.entity) == ("firing", HOST)
    assert feed.found[0][0] == 4


def test_worst_priority_is_reported(fabric: Fabric) -> None:
    feed = Feed(PfcStormDetector(fabric), Ports(fabric, pfc_everywhere=True))
    found = feed.polls(3, pause=[(LEAF, 0, 0.2), (LEAF, 6, 0.99), (LEAF, 7, 0.5)])
    assert len(found) == 1
    f = found[0]
    # A switch port pausing the host: the finding names the switch port, its node, and the host it pauses.
    assert (f.entity, f.node, f.port, f.link) == (LEAF, "leaf-r2-000", LEAF, LINK)
    assert (f.evidence["priority"], f.evidence["paused_peer"]) == (6, HOST)
    assert f.evidence["tx_pause_share"] == pytest.approx(0.99)


# ECN ---------------------------------------------------------------------------------------------------
def spread(fabric: Fabric, low: float = 8.0, high: float = 15.0) -> np.ndarray:
    """Per-port healthy marks a poll: a fixed spread over the host ports, so the peers' MAD is real."""
    rng = np.random.default_rng(7)
    return np.where(fabric.host_port, rng.uniform(low, high, fabric.n_ports), 0.0)


def test_ecn_hotspot_exact_evidence(fabric: Fabric) -> None:
    base = spread(fabric)
    feed = Feed(EcnHotspotDetector(fabric), Ports(fabric))
    hot = {HOST: 2e4}  # 2e-4 of its packets, 2,000 marks a second
    assert feed.polls(3, marks=hot, base_marks=base) == []  # baseline, then two hot polls
    (f,) = feed.polls(1, marks=hot, base_marks=base)
    assert (f.kind, f.status, f.severity) == ("ecn_hotspot", "firing", "warning")
    check_place(f)
    ev = f.evidence
    assert ev["marked_fraction"] == pytest.approx(2e-4)
    assert ev["marks_per_second"] == pytest.approx(2000.0)
    fracs = np.rint(base[fabric.host_port]) / PACKETS
    fracs[fabric.keys.index(HOST)] = 2e-4
    assert ev["peer_median_fraction"] == pytest.approx(float(np.median(fracs)))
    assert ev["ratio_to_peers"] == pytest.approx(2e-4 / np.median(fracs))
    assert ev["robust_z"] >= 4
    assert feed.found[0][0] == 3
    assert feed.polls(2, base_marks=base) == []
    (c,) = feed.polls(1, base_marks=base)
    assert (c.status, c.entity) == ("cleared", HOST)


def test_marking_that_rises_everywhere_blames_no_one(fabric: Fabric) -> None:
    feed = Feed(EcnHotspotDetector(fabric), Ports(fabric))
    assert feed.polls(5, base_marks=spread(fabric)) == []
    assert feed.polls(10, base_marks=300 * spread(fabric)) == []  # a checkpoint: everyone x300


def test_a_fabric_that_marks_nothing_has_no_findings(fabric: Fabric) -> None:
    feed = Feed(EcnHotspotDetector(fabric), Ports(fabric))
    assert feed.polls(10, base_marks=0.0) == []
    assert feed.det.hyst.bad_run.sum() == 0


def test_fewer_than_min_peers_never_opens(fabric: Fabric) -> None:
    seven = tuple(k for k in fabric.keys if k.endswith("/mlx5_2"))[:7]
    assert HOST in seven
    hot = {HOST: 2e4}
    feed = Feed(EcnHotspotDetector(fabric), Ports(fabric))
    assert feed.polls(10, marks=hot, base_marks=spread(fabric), ecn_only=seven) == []
    # The same seven ports are enough once min_peers allows it.
    lowered = Feed(EcnHotspotDetector(fabric, EcnHotspotConfig(min_peers=7)), Ports(fabric))
    found = lowered.polls(4, marks=hot, base_marks=spread(fabric), ecn_only=seven)
    assert [(f.status, f.entity) for f in found] == [("firing", HOST)]


def test_a_handful_of_marks_is_never_a_hotspot(fabric: Fabric) -> None:
    # 5% of a trickle of packets is marked: a huge ratio, but 5 marks a second (min 10).
    feed = Feed(EcnHotspotDetector(fabric), Ports(fabric))
    trickle = {"marks": {HOST: 50.0}, "packets": {HOST: 1000.0}, "base_marks": spread(fabric)}
    assert feed.polls(10, **trickle) == []
    # Ten times the marks (50 a second) on the same share is one.
    found = feed.polls(3, marks={HOST: 500.0}, packets={HOST: 1e4}, base_marks=spread(fabric))
    assert [(f.status, f.entity, f.evidence["marks_per_second"]) for f in found] == [("firing", HOST, 50.0)]
