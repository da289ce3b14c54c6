"""The streaming pipeline: routing by record, stage statistics, and scoring against fabricsim."""

from __future__ import annotations

import time
from pathlib import Path
from typing import ClassVar

import pyarrow as pa
import pytest

from graywire.collectors.schemas import PORT_CAPABILITY, PORT_SAMPLE, TS, make_batch
from graywire.detectors.base import PortIndexer
from graywire.detectors.ber import BerDetector
from graywire.detectors.ber_thresholds import ThresholdTable
from graywire.detectors.checkpoint import CheckpointTrafficDetector
from graywire.detectors.congestion import EcnHotspotDetector, PfcStormDetector, XmitWaitDetector
from graywire.detectors.findings import Finding
from graywire.detectors.link_flap import LinkFlapDetector
from graywire.detectors.link_state import LinkDowngradeDetector
from graywire.detectors.nccl_bootstrap import NcclBootstrapDetector
from graywire.detectors.nccl_channel import NcclChannelOutlier
from graywire.detectors.nccl_fault import NcclFaultDetector
from graywire.detectors.nccl_peer import NcclHopDetector
from graywire.detectors.nccl_step import NcclStepTime
from graywire.detectors.nccl_straggler import NcclStraggler
from graywire.detectors.nccl_topology import NcclTopologyDetector
from graywire.detectors.nccl_transport import NcclTransportDetector
from graywire.detectors.nic_affinity import NicAffinityDetector
from graywire.detectors.pipeline import Pipeline, default_detectors
from graywire.detectors.rates import CounterRates, rates_schema
from graywire.detectors.saturation import CounterSaturationDetector
from graywire.detectors.topology import TopologyDetector
from graywire.detectors.uplink_balance import JobPulses, UplinkBalanceDetector
from graywire.evaluation.scoring import score
from graywire.fabricsim.faults import (
    BENIGN_KINDS,
    CABLING_KINDS,
    DATAPATH_BENIGN_KINDS,
    DATAPATH_KINDS,
    FAULT_KINDS,
    FAULT_PATH_KINDS,
    PHASE_KINDS,
    STARTUP_KINDS,
)
from graywire.fabricsim.sim import FabricSim, SimConfig, truth_document
from graywire.fabricsim.topology import TopologySpec

PHASE_FINDINGS = {k for kind in PHASE_KINDS for k in FAULT_KINDS[kind]}


class Recorder:
    """A detector that keeps what it was given and reports one finding per batch."""

    name: ClassVar[str] = "recorder"
    version: ClassVar[str] = "0"
    consumes: ClassVar[str] = ""

    def __init__(self) -> None:
        self.seen: list[pa.RecordBatch] = []

    def observe(self, batch: pa.RecordBatch) -> list[Finding]:
        self.seen.append(batch)
        t = batch.column("time")[0].as_py()
        return [Finding("probe", self.consumes, "firing", t, "info", "seen", self.name)]


class PortRecorder(Recorder):
    name = "port-recorder"
    consumes = "port_rates"


class NcclRecorder(Recorder):
    name = "nccl-recorder"
    consumes = "nccl_timing"


def small_sim(faults: str = "none", duration_s: float = 30.0) -> FabricSim:
    return FabricSim(SimConfig(topology=TopologySpec(hosts=8), duration_s=duration_s, faults=faults))


def test_routes_records_to_the_detectors_that_consume_them() -> None:
    sim = small_sim()
    ports, nccl = PortRecorder(), NcclRecorder()
    pipe = Pipeline(sim.fabric, detectors=[ports, nccl])
    steps = list(sim.run())  # 4 polls; the first has no NCCL batch
    assert [s.nccl_timing is None for s in steps] == [True, False, False, False]

    out = pipe.process(steps[0].port_sample)
    assert [(f.kind, f.entity) for f in out] == [("probe", "port_rates")]
    assert len(ports.seen) == 1 and nccl.seen == []
    # Port detectors get rates, not the raw samples.
    assert ports.seen[0].schema == rates_schema()
    assert ports.seen[0].num_rows == sim.fabric.n_ports
    assert ports.seen[0].column("rx_bytes_per_second").null_count == sim.fabric.n_ports  # first poll

    for s in steps[1:]:
        pipe.process(s.port_sample)
        out = pipe.process(s.nccl_timing)
        assert [(f.kind, f.entity) for f in out] == [("probe", "nccl_timing")]
    assert len(ports.seen) == 4 and len(nccl.seen) == 3
    assert nccl.seen[0] is steps[1].nccl_timing  # NCCL timings go through untouched
    assert ports.seen[1].column("rx_bytes_per_second").null_count == 0


class CapabilityRecorder(PortRecorder):
    """A port detector that also reads capability views, and notes when each arrived."""

    name = "capability-recorder"

    def __init__(self) -> None:
        super().__init__()
        self.events: list[str] = []

    def set_capabilities(self, caps: pa.RecordBatch) -> None:
        self.events.append(f"caps:{caps.num_rows}")

    def observe(self, batch: pa.RecordBatch) -> list[Finding]:
        self.events.append("rates")
        return super().observe(batch)


def test_capability_views_reach_their_consumers_before_the_samples_of_the_same_poll() -> None:
    sim = small_sim()
    step = next(iter(sim.run()))
    when = step.port_sample.column("time")[0].as_py()
    keys = sim.fabric.keys[:3]
    view = make_batch(
        PORT_CAPABILITY,
        3,
        {"time": pa.array([when] * 3, TS), "port": pa.array(keys), "max_speed_bps": pa.array([1, 2, 3])},
    )
    caps, plain = CapabilityRecorder(), PortRecorder()
    pipe = Pipeline(sim.fabric, detectors=[plain, caps])
    result = pipe.process_poll([step.port_sample, view, view.slice(0, 1)])
    assert caps.events == ["caps:3", "caps:1", "rates"]  # each view on its own, in order
    assert len(plain.seen) == 1 and result.dropped == []


def test_rejects_other_records() -> None:
    pipe = Pipeline(small_sim().fabric)
    other = pa.RecordBatch.from_pydict({"node": ["leaf-1"]}).replace_schema_metadata(
        {"graywire.record": "switch_inventory"}
    )
    with pytest.raises(
        ValueError,
        match="nccl_transport, nccl_proxy, nccl_init, link, nccl_rank_state, gpu_nic_path or nccl_layout",
    ):
        pipe.process(other)
    bare = pa.RecordBatch.from_pydict({"time": [1]})
    with pytest.raises(ValueError, match="metadata"):
        pipe.process(bare)
    assert pipe.stats == {}


def test_default_detectors() -> None:
    sim = small_sim()
    pipe = Pipeline(sim.fabric)
    kinds = [type(d) for d in pipe.detectors]
    assert kinds == [
        LinkDowngradeDetector,
        LinkFlapDetector,
        BerDetector,
        PfcStormDetector,
        EcnHotspotDetector,
        XmitWaitDetector,
        CounterSaturationDetector,
        NcclChannelOutlier,
        NcclStraggler,
        NcclStepTime,
        NcclTransportDetector,
        NcclHopDetector,
        TopologyDetector,
        NcclFaultDetector,
        NicAffinityDetector,
        NcclBootstrapDetector,
        NcclTopologyDetector,
        CheckpointTrafficDetector,
        JobPulses,
        UplinkBalanceDetector,
    ]
    assert pipe.kinds == sorted(
        [
            "link_missing",
            "cabling_changed",
            "link_unexpected",
            "rail_miscabled",
            "speed_downgrade",
            "width_downgrade",
            "link_flap",
            "ber_degradation",
            "pfc_storm",
            "ecn_hotspot",
            "xmit_wait_hotspot",
            "counter_saturated",
            "nccl_channel_slow",
            "nccl_path_slow",
            "nccl_straggler",
            "nccl_job_slowdown",
            "nccl_transport_fallback",
            "nccl_gdrdma_missing",
            "nccl_channels_reduced",
            "nccl_hop_slow",
            "nccl_rank_dead",
            "nccl_rank_unresponsive",
            "nccl_collective_stuck",
            "gpu_nic_affinity",
            "checkpoint_on_compute",
            "uplink_imbalance",
            "nccl_bootstrap_stall",
            "nccl_init_slow",
            "nccl_topology_mismatch",
        ]
    )
    assert [type(d) for d in default_detectors(sim.fabric)] == kinds
    assert isinstance(pipe.rates, CounterRates)
    # Each pipeline has its own rates state.
    assert Pipeline(sim.fabric).rates is not pipe.rates


def test_stage_statistics() -> None:
    sim = small_sim("speed_downgrade@10s+100s:gpu-0003/mlx5_2", duration_s=60.0)
    pipe = Pipeline(sim.fabric)
    found: list[Finding] = []
    nccl_rows = 0
    for s in sim.run():
        found += pipe.process(s.port_sample)
        if s.nccl_timing is not None:
            found += pipe.process(s.nccl_timing)
            nccl_rows += s.nccl_timing.num_rows
    n = sim.fabric.n_ports
    st = pipe.stats
    assert set(st) == {  # named by detector.name
        "rates", "link_downgrade", "link_flap", "ber", "pfc_storm", "ecn_hotspot", "xmit_wait_hotspot",
        "counter_saturation", "nccl_channel_outlier", "nccl_straggler", "nccl_step_time",
        "checkpoint", "uplink_balance", "job_pulses",
    }  # fmt: skip
    congestion = ("pfc_storm", "ecn_hotspot", "xmit_wait_hotspot")
    assert sum(st[k].findings for k in ("link_flap", "ber", *congestion)) == 0
    assert (st["rates"].batches, st["rates"].rows, st["rates"].findings) == (7, 7 * n, 0)
    assert (st["link_downgrade"].batches, st["link_downgrade"].rows) == (7, 7 * n)
    assert (st["nccl_channel_outlier"].batches, st["nccl_channel_outlier"].rows) == (6, nccl_rows)
    assert (st["nccl_step_time"].batches, st["nccl_step_time"].findings) == (6, 0)
    assert nccl_rows == 6 * 64 * 4
    link_found = [f for f in found if f.detector.startswith("link_downgrade")]
    assert [(f.kind, f.status) for f in link_found] == [("speed_downgrade", "firing")]
    assert st["link_downgrade"].findings == 1
    assert st["nccl_channel_outlier"].findings == len(found) - 1
    assert all(s.seconds > 0 for s in st.values())


def test_empty_port_poll() -> None:
    sim = small_sim()
    pipe = Pipeline(sim.fabric)
    first = sim.step().port_sample
    assert pipe.process(first.slice(0, 0)) == []
    assert pipe.stats["rates"].batches == 1 and pipe.stats["rates"].rows == 0
    assert pipe.process(make_batch(PORT_SAMPLE, 0, _empty_required())) == []


def _empty_required() -> dict[str, pa.Array]:
    return {
        "time": pa.array([], PORT_SAMPLE.field("time").type),
        "port": pa.DictionaryArray.from_arrays(pa.array([], pa.int32()), pa.array([], pa.string())),
        "source": pa.DictionaryArray.from_arrays(pa.array([], pa.int8()), pa.array([], pa.string())),
    }


def test_default_scenario_scores_perfectly(real_fixtures: Path) -> None:
    """64 hosts, one hour, one of every fault and benign event: every fault found, nothing else."""
    start = time.perf_counter()
    # The cabling faults are named: `default` leaves them out (they rewire the fabric).
    spec = "default,cable_moved@2000s+600s,cable_missing@2400s+600s,rail_miscabled,nic_cross_numa@2800s"
    sim = FabricSim(SimConfig(topology=TopologySpec(hosts=64), duration_s=3600.0, seed=1, faults=spec))
    table = ThresholdTable.load(real_fixtures / "ufm" / "pdr_Field_BER_Thresholds.csv")
    pipe = Pipeline(sim.fabric, default_detectors(sim.fabric, table))
    findings: list[Finding] = []
    for s in sim.run():
        findings += pipe.process_poll([s.port_sample, s.links]).findings
        if s.nccl_timing is not None:
            findings += pipe.process(s.nccl_timing)
        if s.nccl_transport is not None:
            findings += pipe.process(s.nccl_transport)
        if s.nccl_proxy is not None:
            findings += pipe.process(s.nccl_proxy)
        if s.gpu_paths is not None:
            findings += pipe.process(s.gpu_paths)
    truth = truth_document(sim)
    report = score(findings, truth, pipe.kinds)

    assert len(truth["faults"]) == 22 + len(CABLING_KINDS) + len(DATAPATH_KINDS)
    named_benign = set(DATAPATH_BENIGN_KINDS)  # scored in their own scenarios (evaluation/suite.py)
    assert sorted(f["kind"] for f in truth["faults"] if f.get("benign")) == sorted(
        set(BENIGN_KINDS) - named_benign
    )
    covered = {k for k, s in report.by_fault.items() if s.covered}
    assert covered == set(FAULT_KINDS)
    # The phase faults are not in `default`; the start-up faults are scored by their own eval
    # scenarios (evaluation/suite.py, startup-*).
    for kind in covered - set(PHASE_KINDS) - set(STARTUP_KINDS) - set(FAULT_PATH_KINDS):
        s = report.by_fault[kind]
        assert (s.total, s.detected) == (1, 1), kind
        assert s.localized == s.with_candidates == 1, kind
    assert report.recall == 1.0
    assert report.false_findings == 0
    assert report.benign_alarms == 0
    assert report.precision == 1.0
    assert report.true_findings > 0
    # The link detector is deterministic: it fires within two polls of the fault.
    for kind in ("speed_downgrade", "width_downgrade"):
        assert report.by_fault[kind].delays_s[0] <= 2 * sim.cfg.interval_s
    firing_kinds = {f.kind for f in findings if f.status == "firing"}
    # No fabricsim fault cuts a rank's channels; that one is tested from NCCL_DEBUG lines.
    # The rich simulated counters are 64-bit: saturation only shows in the legacy port views.
    # No fabricsim fault plugs a cable between ports the model leaves free (unit-tested).
    # The fault path's kinds read NCCL RAS views, which the default scenario does not simulate;
    # the phase faults (checkpoints on compute NICs, a polarized leaf) and the start-up ones are
    # not in `default`.
    fault_path = {"nccl_rank_dead", "nccl_rank_unresponsive", "nccl_collective_stuck"}
    unseen = {"nccl_channels_reduced", "counter_saturated", "link_unexpected", *PHASE_FINDINGS, *fault_path,
              *STARTUP_KINDS}  # fmt: skip
    assert firing_kinds == set(pipe.kinds) - unseen
    assert time.perf_counter() - start < 60


def test_two_sources_reporting_one_port_keep_separate_counter_state() -> None:
    """UFM and a host agent both report a NIC; their counters were cleared at different times."""
    import pyarrow.compute as pc

    class Spy:
        name, version, consumes, kinds = "spy", "1", "port_rates", ()

        def __init__(self) -> None:
            self.resets = 0

        def observe(self, batch: pa.RecordBatch) -> list[Finding]:
            self.resets += sum(bool(x) for x in batch.column("counter_reset").to_pylist())
            return []

    sim = small_sim("none", duration_s=60.0)
    spy = Spy()
    pipe = Pipeline(sim.fabric, [spy])
    for s in sim.run():
        b = s.port_sample
        halved = pc.divide(b.column("rx_bytes"), 2).cast(pa.uint64())  # restarted later
        other = b.set_column(b.schema.get_field_index("rx_bytes"), "rx_bytes", halved)
        src = pa.DictionaryArray.from_arrays(pa.array([0] * b.num_rows, pa.int8()), pa.array(["agent"]))
        other = other.set_column(other.schema.get_field_index("source"), "source", src)
        pipe.process(b)
        pipe.process(other)
    assert set(pipe.other_rates) == {"agent"}
    assert spy.resets == 0  # one shared stage would see every port "reset" twice a poll


def test_a_poll_split_across_sources_is_judged_as_one_view() -> None:
    """Host agents report NICs (with lanes), SNMP reports switch ports (no lanes): one verdict."""
    import pyarrow.compute as pc

    sim = small_sim("width_downgrade@15s+300s:gpu-0003/mlx5_2", duration_s=60.0)
    pipe = Pipeline(sim.fabric)
    found: list[Finding] = []
    hosts = pa.array([k.startswith("gpu-") for k in sim.fabric.keys])
    for s in sim.run():
        b = s.port_sample
        on_host = pc.take(hosts, b.column("port").indices)
        host_rows = b.filter(on_host)
        switch_rows = b.filter(pc.invert(on_host))
        width = switch_rows.schema.get_field_index("width")
        switch_rows = switch_rows.set_column(width, "width", pa.nulls(switch_rows.num_rows, pa.uint8()))
        found += pipe.process_poll([host_rows, switch_rows]).findings
    assert [(f.kind, f.status, f.port) for f in found] == [("width_downgrade", "firing", "gpu-0003/mlx5_2")]


def test_transport_views_reach_the_transport_detector() -> None:
    sim = small_sim("nccl_transport_fallback@10s+100s:gpu-0003", duration_s=30.0)
    pipe = Pipeline(sim.fabric)
    found: list[Finding] = []
    for s in sim.run():
        batches = [b for b in (s.port_sample, s.nccl_timing, s.nccl_transport) if b is not None]
        found += pipe.process_poll(batches).findings
    assert [(f.kind, f.node) for f in found if f.kind == "nccl_transport_fallback"] == [
        ("nccl_transport_fallback", "gpu-0003")
    ]
    assert pipe.stats["nccl_transport"].batches == 1


def test_a_joined_view_keeps_one_port_dictionary_across_polls() -> None:
    """Detectors cache port lookups by dictionary: a multi-source poll must not defeat that."""
    import pyarrow.compute as pc

    sim = small_sim("none", duration_s=40.0)
    lookups: list[int] = []
    lookup = sim.fabric.lookup

    def counting_lookup(keys: pa.Array) -> object:
        lookups.append(len(keys))
        return lookup(keys)

    sim.fabric.lookup = counting_lookup  # type: ignore[method-assign]

    class Indexing:
        name, version, consumes, kinds = "indexing", "1", "port_rates", ()

        def __init__(self) -> None:
            self.index = PortIndexer(sim.fabric)
            self.polls = 0

        def observe(self, batch: pa.RecordBatch) -> list[Finding]:
            assert (self.index(batch.column("port")) >= 0).all()
            self.polls += 1
            return []

    spy = Indexing()
    pipe = Pipeline(sim.fabric, [spy])
    hosts = pa.array([k.startswith("gpu-") for k in sim.fabric.keys])
    for s in sim.run():
        b = s.port_sample
        on_host = pc.take(hosts, b.column("port").indices)
        pipe.process_poll([b.filter(on_host), b.filter(pc.invert(on_host))])
    assert spy.polls >= 3
    # Hashed once by the port-state join (a cache of its own) and once by the detectors' shared
    # one, then every poll hits the caches.
    assert lookups == [sim.fabric.n_ports] * 2


def _per_host(batch: pa.RecordBatch) -> list[pa.RecordBatch]:
    """A poll's port samples as host agents send them: one small batch per node."""
    nodes = [k.split("/", 1)[0] for k in batch.column("port").cast(pa.string()).to_pylist()]
    rows: dict[str, list[int]] = {}
    for i, n in enumerate(nodes):
        rows.setdefault(n, []).append(i)
    return [batch.take(r) for r in rows.values()]


def test_a_poll_of_many_small_batches_judges_as_one_batch_does() -> None:
    """Thousands of host agents send a small batch each: a source's batches go through its
    rates stage joined, and every finding, time and evidence is what one batch gives."""
    from graywire.fabricsim.sim import FabricSim, SimConfig
    from graywire.fabricsim.topology import TopologySpec

    sim = FabricSim(
        SimConfig(
            topology=TopologySpec(hosts=8),
            duration_s=300.0,
            seed=5,
            faults="speed_downgrade@60s+1h:gpu-0002/mlx5_1,pfc_storm@90s+1h",
        )
    )
    whole, split = Pipeline(sim.fabric), Pipeline(sim.fabric)
    found_whole, found_split = [], []
    for step in sim.run():
        found_whole += whole.process_poll([step.port_sample]).findings
        parts = _per_host(step.port_sample)
        assert len(parts) > 8
        found_split += split.process_poll(parts[::-1]).findings  # in any order
        assert split.stats["rates"].batches == whole.stats["rates"].batches  # one stage call a poll
    key = lambda f: (f.time, f.kind, f.entity, f.status, f.severity, f.summary)  # noqa: E731
    assert sorted(map(key, found_split)) == sorted(map(key, found_whole))
    assert {f.kind for f in found_whole if f.status == "firing"} >= {"speed_downgrade"}


def test_a_source_whose_batches_cannot_join_is_judged_batch_by_batch() -> None:
    """A port in two of a source's batches of one poll: the joined batch is refused, and each
    batch goes through the stage alone, as before they were joined; nothing else is lost."""
    from graywire.fabricsim.sim import FabricSim, SimConfig
    from graywire.fabricsim.topology import TopologySpec

    sim = FabricSim(SimConfig(topology=TopologySpec(hosts=4), duration_s=30.0, seed=1, faults="none"))
    step = next(iter(sim.run()))
    parts = _per_host(step.port_sample)
    pipe = Pipeline(sim.fabric)
    result = pipe.process_poll([*parts, parts[0].slice(0, 2)])
    assert result.dropped == []
    assert result.port_rates is not None and result.port_rates.num_rows == step.port_sample.num_rows + 2
    assert pipe.stats["rates"].batches == len(parts) + 1
