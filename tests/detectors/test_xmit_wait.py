"""xmit_wait hotspots: fabricsim's credit starvation, PFC storms and bursts, and hand-built rates."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from functools import cache

import numpy as np
import pyarrow as pa
import pytest

from graywire.collectors.schemas import TS
from graywire.detectors.congestion import PfcStormDetector, XmitWaitConfig, XmitWaitDetector
from graywire.detectors.findings import Finding
from graywire.detectors.rates import CounterRates
from graywire.evaluation.baseline import StaticRules
from graywire.fabricsim.faults import Fault, parse_spec, resolve_faults
from graywire.fabricsim.sim import EPOCH, XMIT_WAIT_TICKS_PER_SECOND, FabricSim, SimConfig
from graywire.fabricsim.topology import TopologySpec, build_fabric

POLL = 10.0
START, END = 60.0, 180.0
HOST = "gpu-0003/mlx5_2"
LEAF = "leaf-r2-000/p4"  # host 3's rail-2 NIC lands on the rail-2 leaf's 4th down port
LINK = f"{HOST}<->{LEAF}"


@dataclass(frozen=True)
class Run:
    faults: tuple[Fault, ...]
    wait: tuple[Finding, ...]
    pfc: tuple[Finding, ...]
    leaf_rate: tuple[float, ...]  # LEAF's xmit_wait ticks/s per poll
    median_rate: tuple[float, ...]  # median over leaf-role ports per poll


@cache
def simulate(faults: str, seed: int = 0, ticks_per_second: float | None = None) -> Run:
    sim = FabricSim(SimConfig(topology=TopologySpec(hosts=8), duration_s=300.0, seed=seed, faults=faults))
    rates = CounterRates()
    wait_det = XmitWaitDetector(sim.fabric, XmitWaitConfig(ticks_per_second=ticks_per_second))
    pfc_det = PfcStormDetector(sim.fabric)
    leaf = int(sim.fabric.lookup(pa.array([LEAF]))[0])
    leaves = np.array(sim.fabric.node_roles)[sim.fabric.node_of_port] == "leaf"
    wait: list[Finding] = []
    pfc: list[Finding] = []
    leaf_rate: list[float] = []
    median_rate: list[float] = []
    for st in sim.run():
        r = rates.observe(st.port_sample)
        wait += wait_det.observe(r)
        pfc += pfc_det.observe(r)
        idx = sim.fabric.lookup(r.column("port").cast(pa.string()))
        w = r.column("xmit_wait_ticks_per_second").to_numpy(zero_copy_only=False)
        leaf_rate.append(float(w[idx == leaf][0]))
        median_rate.append(float(np.nanmedian(w[leaves[idx]])) if np.isfinite(w).any() else np.nan)
    return Run(tuple(sim.faults), tuple(wait), tuple(pfc), tuple(leaf_rate), tuple(median_rate))


def rel(f: Finding) -> float:
    return (f.time - EPOCH).total_seconds()


def check_place(f: Finding) -> None:
    assert (f.entity, f.node, f.port, f.link) == (LINK, "gpu-0003", HOST, LINK)


@pytest.mark.parametrize("seed", [0, 1])
def test_credit_starvation_found_localized_and_cleared(seed: int) -> None:
    run = simulate(f"credit_starvation@{START:g}s+{END - START:g}s=0.02:{HOST}", seed)
    fault = run.faults[0]
    assert (fault.port, fault.peer, fault.node) == (HOST, LEAF, "gpu-0003")
    assert [f.status for f in run.wait] == ["firing", "cleared"]
    f, c = run.wait
    assert f.kind == "xmit_wait_hotspot" and f.detector == "xmit_wait_hotspot/1"
    assert f.severity == "warning"
    check_place(f)
    assert rel(f) == START + 2 * POLL  # three waiting polls in a row (open_after=3): 60, 70, 80 s
    ev = f.evidence
    assert ev["waiting_port"] == LEAF  # the leaf has data for the NIC and no credit
    assert ev["xmit_wait_ticks_per_second"] == pytest.approx(0.02 * XMIT_WAIT_TICKS_PER_SECOND, rel=1e-3)
    assert ev["ratio_to_peers"] >= 50 and ev["robust_z"] >= 4 and f.score == ev["robust_z"]
    assert ev["peer_median_ticks_per_second"] < 1e3
    assert ev["wait_share"] is None and ev["interval_seconds"] == POLL and ev["polls_required"] == 3
    assert f"{LEAF} waits for credits" in f.summary and "peers' median" in f.summary
    check_place(c)
    assert END < rel(c) <= END + 3 * POLL
    assert run.pfc == ()  # credits, not pauses: the PFC detector has nothing to say


def test_wait_share_with_a_configured_tick_rate() -> None:
    run = simulate(f"credit_starvation@{START:g}s+{END - START:g}s=0.1:{HOST}", 0, XMIT_WAIT_TICKS_PER_SECOND)
    f = run.wait[0]
    assert f.evidence["wait_share"] == pytest.approx(0.1, rel=1e-3)
    assert "(10.0% of the time)" in f.summary


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_healthy_runs_give_no_finding(seed: int) -> None:
    run = simulate("none", seed)
    assert run.wait == ()
    assert all(0 < m < 1e3 for m in run.median_rate[1:])  # healthy ports do wait a little


@pytest.mark.parametrize("seed", [0, 1])
def test_checkpoint_burst_gives_no_finding(seed: int) -> None:
    run = simulate("checkpoint_burst@60s+120s", seed)
    assert run.wait == ()
    # Everyone waits far more during the burst (fabricsim: wait ~ load^8), so the median moves.
    quiet, burst = run.median_rate[1:6], run.median_rate[7:18]
    assert min(burst) > 20 * max(quiet)


@pytest.mark.parametrize("seed", [0, 1])
def test_pfc_storm_is_reported_once_as_a_storm(seed: int) -> None:
    run = simulate(f"pfc_storm@{START:g}s+{END - START:g}s:{HOST}", seed)
    assert [f.kind for f in run.pfc if f.port == HOST] == ["pfc_storm", "pfc_storm"]
    # The leaf port facing the stormed NIC waits the whole interval, but it is paused.
    assert min(run.leaf_rate[7:17]) >= 0.9 * XMIT_WAIT_TICKS_PER_SECOND
    assert run.wait == ()


# -- hand-built rates -------------------------------------------------------------------------------
FABRIC = build_fabric(TopologySpec(hosts=8))


def rates_batch(
    k: int, wait: dict[str, float] | None = None, extra: dict[str, dict[str, float]] | None = None,
    ports: list[str] | None = None, with_wait: bool = True,
) -> pa.RecordBatch:  # fmt: skip
    """One poll of per-second rates: every port waits ~10 ticks/s unless ``wait`` says otherwise."""
    keys = ports if ports is not None else list(FABRIC.keys)
    rng = np.random.default_rng(k)
    cols: dict[str, pa.Array] = {
        "time": pa.array(
            [datetime(2026, 1, 5, 0, 0, 10 * k, tzinfo=UTC).replace(tzinfo=None)] * len(keys), TS
        ),
        "port": pa.array(keys),
        "interval_seconds": pa.array([POLL] * len(keys)),
    }
    if with_wait:
        base = rng.uniform(5, 20, len(keys))
        cols["xmit_wait_ticks_per_second"] = pa.array(
            [(wait or {}).get(p, b) for p, b in zip(keys, base, strict=True)]
        )
    else:
        cols["xmit_wait_ticks_per_second"] = pa.nulls(len(keys), pa.float64())
    for name, by_port in (extra or {}).items():
        cols[name] = pa.array([by_port.get(p) for p in keys], pa.float64())
    return pa.RecordBatch.from_pydict(cols)


def feed(det: XmitWaitDetector, polls: int, **kw: object) -> list[Finding]:
    out: list[Finding] = []
    for k in range(polls):
        out += det.observe(rates_batch(k, **kw))  # type: ignore[arg-type]
    return out


def test_hand_built_hotspot_fires_on_the_third_poll() -> None:
    det = XmitWaitDetector(FABRIC)
    assert feed(det, 2, wait={LEAF: 1e6}) == []
    (f,) = det.observe(rates_batch(2, wait={LEAF: 1e6}))
    check_place(f)
    assert f.evidence["waiting_port"] == LEAF


def test_a_pulse_shorter_than_three_polls_is_not_a_hotspot() -> None:
    det = XmitWaitDetector(FABRIC)
    found = feed(det, 2, wait={LEAF: 1e7}) + feed(det, 5)
    assert found == []


def test_a_few_ticks_is_never_a_hotspot() -> None:
    # 1,000 ticks/s is 100x the peers, but under the absolute floor.
    assert feed(XmitWaitDetector(FABRIC), 6, wait={LEAF: 1e3}) == []


@pytest.mark.parametrize(
    "column",
    ["pfc3_rx_pause_seconds_per_second", "pfc3_rx_pause_frames_per_second"],
)
def test_waiting_explained_by_received_pauses_is_left_to_pfc(column: str) -> None:
    value = 0.5 if "seconds" in column else 1e5
    found = feed(XmitWaitDetector(FABRIC), 6, wait={LEAF: 1e8}, extra={column: {LEAF: value}})
    assert found == []


def test_waiting_explained_by_the_peer_sending_pauses_is_left_to_pfc() -> None:
    extra = {"pfc3_tx_pause_seconds_per_second": {HOST: 0.99}}  # the NIC pauses, the switch counts frames
    assert feed(XmitWaitDetector(FABRIC), 6, wait={LEAF: 1e8}, extra=extra) == []
    # A peer pausing for milliseconds a second (a busy but healthy NIC) explains nothing.
    light = {"pfc3_tx_pause_seconds_per_second": {HOST: 0.001}}
    assert [f.status for f in feed(XmitWaitDetector(FABRIC), 6, wait={LEAF: 1e8}, extra=light)] == ["firing"]


def test_fabric_without_xmit_wait_counters_is_not_judged() -> None:
    assert feed(XmitWaitDetector(FABRIC), 6, with_wait=False) == []
    no_column = rates_batch(0).drop_columns(["xmit_wait_ticks_per_second"])
    assert XmitWaitDetector(FABRIC).observe(no_column) == []


def test_too_few_peers_give_no_verdict() -> None:
    leaf_ports = [k for k in FABRIC.keys if k.startswith("leaf-r2-000/")][:7]
    assert LEAF in leaf_ports
    assert feed(XmitWaitDetector(FABRIC), 6, wait={LEAF: 1e8}, ports=leaf_ports) == []
    # With enough peers the same port is a hotspot.
    found = feed(XmitWaitDetector(FABRIC, XmitWaitConfig(min_peers=4)), 6, wait={LEAF: 1e8}, ports=leaf_ports)
    assert [f.status for f in found] == ["firing"]


def test_static_rule_fires_on_any_high_wait_including_storms() -> None:
    rules = StaticRules(FABRIC)
    found = rules.observe(rates_batch(0, wait={LEAF: 1e6}))
    assert [f.port for f in found if f.kind == "xmit_wait_hotspot"] == [LEAF]


@pytest.mark.parametrize("mag", ["0", "1.5"])
def test_credit_starvation_magnitude_is_a_share(mag: str) -> None:
    with pytest.raises(ValueError, match="share of the interval"):
        resolve_faults(
            parse_spec("credit_starvation=" + mag), FABRIC, 600.0, POLL, {}, 8, 4, np.random.default_rng(0)
        )
