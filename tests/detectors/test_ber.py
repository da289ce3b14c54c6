"""BER degradation against NVIDIA's field thresholds: fabricsim ramps, benign events, hand-built windows."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from functools import cache
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from graywire.collectors.model import Fabric
from graywire.collectors.schemas import PHYS_LINK_UP, PORT_SAMPLE, TS, make_batch
from graywire.detectors.base import HysteresisConfig
from graywire.detectors.ber import BerConfig, BerDetector
from graywire.detectors.ber_thresholds import GENERIC, ThresholdTable
from graywire.detectors.findings import Finding
from graywire.detectors.rates import CounterRates
from graywire.fabricsim.faults import Fault
from graywire.fabricsim.sim import EPOCH, FabricSim, SimConfig
from graywire.fabricsim.topology import TopologySpec, build_fabric

G = 10**9
POLL = 10.0
HOST = "gpu-0003/mlx5_2"
LEAF = "leaf-r2-000/p4"  # host 3's rail-2 NIC lands on the rail-2 leaf's 4th down port
LINK = f"{HOST}<->{LEAF}"
CSV_NAME = "pdr_Field_BER_Thresholds.csv"
# fabricsim ports are 800G 4x (XDR), FEC 14, ACC: the table has no XDR rows, so NDR's serve them.
ROW = f"{CSV_NAME} row 3: 7nm IB NDR FEC 14 ACC"
NDR_PRE = {"error": 1e-6, "warning": 5e-7, "normal": 1e-7}
NDR_SYMBOL = {"error": 1e-14, "warning": 5e-15, "normal": 1e-15}
GENERIC_PRE = {"error": 2.4e-4, "warning": 1e-4, "normal": 1e-5}
# What the detector reads, plus rx_bytes to see the checkpoint burst (the full set changes nothing).
RATE_COLUMNS = (
    "phy_received_bits",
    "fec_corrected_bits",
    "fec_uncorrectable_blocks",
    "symbol_errors",
    "rx_bytes",
)
# A 10-minute walk to 3x the Error level: slow enough to be seen rising first.
RAMP = f"ber_ramp@60s+600s=3:{HOST}"


@pytest.fixture(scope="module")
def csv_path(real_fixtures: Path) -> Path:
    return real_fixtures / "ufm" / CSV_NAME


@pytest.fixture(scope="module")
def table(csv_path: Path) -> ThresholdTable:
    return ThresholdTable.load(csv_path)


# -- fabricsim ----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Run:
    faults: tuple[Fault, ...]
    with_table: tuple[Finding, ...]
    generic: tuple[Finding, ...]
    resets: int  # rows the rates stage judged a counter reset
    fewest_rows: int  # smallest poll (collector outages drop rows)
    ports_down: int  # (poll, port) rows not physically up
    busiest: float  # highest median utilization of a poll (checkpoint bursts fill the links)


@cache
def simulate(faults: str, csv: Path, seed: int = 0, duration_s: float = 300.0) -> Run:
    """One 8-host run through the rates stage into a detector with the table and one without."""
    sim = FabricSim(
        SimConfig(topology=TopologySpec(hosts=8), duration_s=duration_s, seed=seed, faults=faults)
    )
    rates = CounterRates(RATE_COLUMNS)
    det_table = BerDetector(sim.fabric, ThresholdTable.load(csv))
    det_generic = BerDetector(sim.fabric)
    with_table: list[Finding] = []
    generic: list[Finding] = []
    resets = down = 0
    busiest = 0.0
    fewest = sim.fabric.n_ports
    for st in sim.run():
        r = rates.observe(st.port_sample)
        resets += pc.sum(r.column("counter_reset").cast(pa.int64())).as_py() or 0
        down += pc.sum(pc.not_equal(r.column("phys_state"), PHYS_LINK_UP).cast(pa.int64())).as_py() or 0
        util = r.column("rx_bytes_per_second").to_numpy(zero_copy_only=False) * 8 / (800 * G)
        if np.isfinite(util).any():
            busiest = max(busiest, float(np.nanmedian(util)))
        fewest = min(fewest, r.num_rows)
        with_table += det_table.observe(r)
        generic += det_generic.observe(r)
    return Run(tuple(sim.faults), tuple(with_table), tuple(generic), resets, fewest, down, busiest)


def rel(f: Finding) -> float:
    return (f.time - EPOCH).total_seconds()


def firing(findings: tuple[Finding, ...]) -> list[Finding]:
    return [f for f in findings if f.status == "firing"]


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_ramp_is_seen_rising_then_warning_then_critical(csv_path: Path, seed: int) -> None:
    run = simulate(RAMP, csv_path, seed, duration_s=900.0)
    fault = run.faults[0]
    assert (fault.port, fault.peer, fault.start_s, fault.end_s) == (HOST, LEAF, 60.0, 660.0)
    fired = firing(run.with_table)
    assert [f.severity for f in fired] == ["info", "warning", "critical"]
    assert [f.evidence["level"] for f in fired] == ["rising", "warning", "error"]
    # One incident: every escalation is on the same link entity, localized to the host end.
    for f in fired:
        assert (f.kind, f.entity, f.node, f.port, f.link) == ("ber_degradation", LINK, "gpu-0003", HOST, LINK)
        assert f.detector == "ber/1"
        assert f.evidence["peer_port"] == LEAF
        assert f.evidence["port_measured"] in (HOST, LEAF)
        assert f.evidence["window_seconds"] == 60.0
        assert f.evidence["thresholds"] == {"pre_fec": NDR_PRE, "symbol": NDR_SYMBOL, "source": ROW}
        assert f.score == f.evidence["pre_fec_ber"]
    times = [rel(f) for f in fired]
    assert fault.start_s < times[0] < times[1] < times[2] <= fault.end_s
    pre = [f.evidence["pre_fec_ber"] for f in fired]
    assert pre[0] < pre[1] < pre[2]

    info, warning, critical = (f.evidence for f in fired)
    assert 1e-7 <= info["pre_fec_ber"] < 5e-7  # over Normal, under Warning ...
    assert info["pre_fec_ber"] >= 3 * info["pre_fec_ber_baseline"]  # ... and 3x its 15-min baseline
    assert "rising" in fired[0].summary and "15-min baseline" in fired[0].summary
    assert warning["pre_fec_ber"] >= 5e-7
    assert "over the warning level 5e-07" in fired[1].summary
    assert (
        critical["pre_fec_ber"] >= 1e-6
        or critical["symbol_ber"] >= 1e-14
        or critical["uncorrectable_blocks_in_window"] >= 0.5
    )
    # Without the table the generic levels are far looser (changed: this ramp used to go
    # unreported): the ramp is seen as a rise, ten times its own baseline and (exact corrected
    # bits) three times its peers'.
    (g,) = firing(run.generic)
    assert g.severity == "info"
    assert g.evidence["rule"] == "pre-FEC BER 10x its 125-min baseline and over its peers"
    assert g.evidence["pre_fec_ber"] >= 3 * g.evidence["peer_median_pre_fec_ber"]
    assert g.evidence["counters"] == ["fec_corrected_bits", "phy_received_bits"]
    assert fault.start_s < rel(g) <= fault.end_s


def test_ramp_is_cleared_after_it_ends(csv_path: Path) -> None:
    run = simulate(RAMP, csv_path, 0, duration_s=900.0)
    fault = run.faults[0]
    assert [f.status for f in run.with_table] == ["firing", "firing", "firing", "cleared"]
    c = run.with_table[-1]
    assert (c.kind, c.entity, c.node, c.port, c.link) == ("ber_degradation", LINK, "gpu-0003", HOST, LINK)
    # The one-minute window has to drain below Warning, then three good polls close it.
    assert fault.end_s < rel(c) <= fault.end_s + 300
    assert c.evidence["level"] == "ok"
    assert "pre_fec_ber" not in c.evidence
    assert c.summary == f"{HOST} BER back under its levels"


def test_generic_rule_when_no_table_says_so(csv_path: Path) -> None:
    # A ramp to 1e-4: past ~1e-6 uncorrectable blocks appear, an error under any rule.
    run = simulate(f"ber_ramp@60s+300s=100:{HOST}", csv_path, 0, duration_s=400.0)
    fault = run.faults[0]
    fired = firing(run.generic)
    # First the rise (ten times its baseline and its peers), then the error.
    assert [x.severity for x in fired] == ["info", "critical"]
    f = fired[1]
    assert (f.severity, f.entity, f.port) == ("critical", LINK, HOST)
    assert fault.start_s < rel(f) <= fault.end_s
    assert f.evidence["thresholds"]["source"] == GENERIC.source
    assert f.evidence["thresholds"]["source"] == "generic PAM4 rule (no thresholds table configured)"
    assert f.evidence["thresholds"]["pre_fec"] == GENERIC_PRE
    assert f.evidence["uncorrectable_blocks_in_window"] >= 0.5
    assert "uncorrectable FEC blocks" in f.summary
    # With the table the same link is reported at a stricter level, no later, against the NDR row.
    first = firing(run.with_table)[0]
    assert first.evidence["thresholds"]["source"] == ROW
    assert rel(first) <= rel(f)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_healthy_runs_give_no_finding(csv_path: Path, seed: int) -> None:
    run = simulate("none", csv_path, seed)
    assert run.with_table == ()
    assert run.generic == ()


# Every benign event once, one after the other, on the link and host the faults above use.
BENIGN = (
    f"short_retrain@40s:{HOST},counter_reset@100s+60s:gpu-0003,counter_wrap@160s+400s:{HOST},"
    "collector_outage@240s+60s:gpu-0003,collector_outage@320s+60s:leaf-r2-000,checkpoint_burst@400s+120s"
)


@pytest.mark.parametrize("seed", [0, 1])
def test_benign_events_give_no_finding(csv_path: Path, seed: int) -> None:
    run = simulate(BENIGN, csv_path, seed, duration_s=600.0)
    assert sorted(f.kind for f in run.faults) == [
        "checkpoint_burst", "collector_outage", "collector_outage", "counter_reset", "counter_wrap",
        "short_retrain",
    ]  # fmt: skip
    assert run.with_table == ()
    assert run.generic == ()
    # ... and each event really reached the detector.
    assert run.ports_down == 4  # the retrained link's two ends, down at 40 s and 50 s (back by 60 s)
    assert run.resets == 8  # gpu-0003's eight NICs were cleared
    assert run.fewest_rows == 256 - 16  # the leaf's 16 ports unpolled (gpu-0003 has 8)
    assert run.busiest >= 0.85  # the checkpoint burst


# -- hand-built batches -----------------------------------------------------------------------------------
T0 = datetime(2026, 2, 1, tzinfo=UTC)
BITS = 8e12  # an 800G port's received bits in a 10 s poll
BASE_BER = 1e-9


@pytest.fixture(scope="module")
def fabric() -> Fabric:
    return build_fabric(TopologySpec(hosts=8))


class Ports:
    """Hand-built port samples for every fabric port: 800G 4x, FEC 14, cumulative counters."""

    COUNTERS = ("phy_received_bits", "fec_corrected_bits", "fec_uncorrectable_blocks", "symbol_errors")

    def __init__(self, fabric: Fabric) -> None:
        self.keys = list(fabric.keys)
        self.dictionary = pa.array(self.keys)
        self.cum = {c: np.full(len(self.keys), 10**9, dtype=np.uint64) for c in self.COUNTERS}
        self.poll = 0

    def batch(
        self,
        ber: Mapping[str, float] | None = None,
        bits: Mapping[str, float] | None = None,
        unc: Mapping[str, int] | None = None,
        sym: Mapping[str, int] | None = None,
    ) -> pa.RecordBatch:
        """One poll; ``ber``/``bits``/``unc``/``sym`` override this poll's increments per port."""
        n = len(self.keys)
        inc = {c: np.zeros(n) for c in self.COUNTERS}
        inc["phy_received_bits"][:] = BITS
        for key, v in (bits or {}).items():
            inc["phy_received_bits"][self.keys.index(key)] = v
        rate = np.full(n, BASE_BER)
        for key, v in (ber or {}).items():
            rate[self.keys.index(key)] = v
        inc["fec_corrected_bits"] = inc["phy_received_bits"] * rate
        for col, over in (("fec_uncorrectable_blocks", unc), ("symbol_errors", sym)):
            for key, v in (over or {}).items():
                inc[col][self.keys.index(key)] = v
        for c in self.COUNTERS:
            self.cum[c] += np.rint(inc[c]).astype(np.uint64)
        t = T0 + timedelta(seconds=POLL * self.poll)
        self.poll += 1
        cols = {
            "time": pa.array([t] * n, type=TS),
            "port": pa.DictionaryArray.from_arrays(pa.array(np.arange(n, dtype=np.int32)), self.dictionary),
            "source": pa.DictionaryArray.from_arrays(pa.array(np.zeros(n, np.int8)), pa.array(["ufm"])),
            "phys_state": pa.array(np.full(n, PHYS_LINK_UP, np.uint8)),
            "speed_bps": pa.array(np.full(n, 800 * G, np.int64)),
            "width": pa.array(np.full(n, 4, np.uint8)),
            "fec_mode": pa.array(np.full(n, 14, np.uint8)),
            **{c: pa.array(self.cum[c]) for c in self.COUNTERS},
        }
        return make_batch(PORT_SAMPLE, n, cols)


class Feed:
    """Ports -> CounterRates -> one detector; remembers which poll each finding came from."""

    def __init__(self, det: BerDetector, fabric: Fabric) -> None:
        self.det = det
        self.ports = Ports(fabric)
        self.rates = CounterRates(Ports.COUNTERS)  # the columns the detector reads; the rest stay null
        self.found: list[tuple[int, Finding]] = []

    def polls(self, count: int, **over: Mapping) -> list[Finding]:
        out = []
        for _ in range(count):
            k = self.ports.poll
            new = self.det.observe(self.rates.observe(self.ports.batch(**over)))
            self.found += [(k, f) for f in new]
            out += new
        return out


def test_uncorrectable_block_is_critical_on_the_next_poll(fabric: Fabric, table: ThresholdTable) -> None:
    feed = Feed(BerDetector(fabric, table), fabric)
    assert feed.polls(3) == []
    # One uncorrectable block is an error at once, but hysteresis (open_after=2) wants a second poll:
    # the block is still in the one-minute window then, so it opens without any new error.
    assert feed.polls(1, unc={HOST: 1}) == []
    (f,) = feed.polls(1)
    assert (f.status, f.severity, f.entity, f.port, f.node) == ("firing", "critical", LINK, HOST, "gpu-0003")
    assert f.evidence["level"] == "error"
    assert f.evidence["port_measured"] == HOST
    assert f.evidence["uncorrectable_blocks_in_window"] == pytest.approx(math.exp(-POLL / 60))
    assert f.evidence["pre_fec_ber"] == pytest.approx(BASE_BER, rel=1e-3)
    assert f.evidence["thresholds"]["source"] == ROW
    assert f.summary == f"{HOST} 1 uncorrectable FEC blocks in the last minute"
    # The decayed block stays >= 0.5 for three more polls (0.72, 0.61, 0.51), then three good polls close it.
    assert feed.polls(5) == []
    (c,) = feed.polls(1)
    assert (c.status, c.entity) == ("cleared", LINK)
    assert [k for k, _ in feed.found] == [4, 10]


def test_uncorrectable_block_opens_at_once_with_open_after_1(fabric: Fabric, table: ThresholdTable) -> None:
    cfg = BerConfig(hysteresis=HysteresisConfig(open_after=1, close_after=3))
    feed = Feed(BerDetector(fabric, table, cfg), fabric)
    assert feed.polls(2) == []
    (f,) = feed.polls(1, unc={LEAF: 2})
    assert (f.status, f.severity, f.entity, f.port) == ("firing", "critical", LINK, HOST)
    assert f.evidence["port_measured"] == LEAF  # the end that saw it, while the place stays the host
    assert f.evidence["uncorrectable_blocks_in_window"] == 2.0
    assert f.summary == f"{LEAF} 2 uncorrectable FEC blocks in the last minute"


def test_generic_rule_levels_against_the_table(fabric: Fabric, table: ThresholdTable) -> None:
    """A steady 1.5e-4 pre-FEC BER: over the generic Warning (1e-4), far over the NDR Error (1e-6)."""
    generic = Feed(BerDetector(fabric), fabric)
    with_table = Feed(BerDetector(fabric, table), fabric)
    bad = {HOST: 1.5e-4}
    assert generic.polls(2, ber=bad) == []  # the first poll only sets the rates' baseline
    assert with_table.polls(2, ber=bad) == []
    (g,) = generic.polls(1, ber=bad)
    (t,) = with_table.polls(1, ber=bad)
    assert (g.severity, g.evidence["level"]) == ("warning", "warning")
    assert g.evidence["pre_fec_ber"] == pytest.approx(1.5e-4, rel=1e-6)
    assert g.evidence["thresholds"] == {
        "pre_fec": GENERIC_PRE,
        "symbol": {"error": 1e-12, "warning": 1e-13, "normal": 1e-15},
        "source": "generic PAM4 rule (no thresholds table configured)",
    }
    assert g.summary == f"{HOST} pre-FEC BER 1.5e-04 over the warning level 1e-04"
    assert (t.severity, t.evidence["level"]) == ("critical", "error")
    assert t.evidence["thresholds"]["source"] == ROW
    assert t.summary == f"{HOST} pre-FEC BER 1.5e-04 over the error level 1e-06"
    assert generic.polls(10, ber=bad) == [] and with_table.polls(10, ber=bad) == []  # no repeats


def test_rising_from_a_quiet_baseline_is_info(fabric: Fabric, table: ThresholdTable) -> None:
    feed = Feed(BerDetector(fabric, table), fabric)
    assert feed.polls(90, ber={HOST: 1e-8}) == []  # a quiet 15 minutes: the slow baseline
    found = feed.polls(20, ber={HOST: 3e-7})  # over Normal (1e-7), under Warning (5e-7)
    assert len(found) == 1
    f = found[0]
    assert (f.status, f.severity, f.evidence["level"], f.entity) == ("firing", "info", "rising", LINK)
    ev = f.evidence
    assert 1e-7 <= ev["pre_fec_ber"] < 5e-7
    assert ev["pre_fec_ber"] >= 3 * ev["pre_fec_ber_baseline"]
    assert "rising" in f.summary and "x its 15-min baseline" in f.summary
    # The one-minute window crosses Normal on the third poll at 3e-7; the fourth confirms (open_after=2).
    assert feed.found[0][0] == 90 + 3


def test_steady_ber_between_normal_and_warning_is_not_reported(fabric: Fabric, table: ThresholdTable) -> None:
    feed = Feed(BerDetector(fabric, table), fabric)
    assert feed.polls(120, ber={HOST: 3e-7}) == []  # high but not rising: nothing to do yet


def test_too_few_bits_are_not_judged(fabric: Fabric, table: ThresholdTable) -> None:
    # 1e9 bits a poll: a minute's window holds ~6e9, under min_bits (1e11), whatever the BER.
    feed = Feed(BerDetector(fabric, table), fabric)
    assert feed.polls(30, bits={HOST: 1e9, LEAF: 1e9}, ber={HOST: 1e-4, LEAF: 1e-4}) == []
    lowered = Feed(BerDetector(fabric, table, BerConfig(min_bits=1e9)), fabric)
    found = lowered.polls(30, bits={HOST: 1e9, LEAF: 1e9}, ber={HOST: 1e-4, LEAF: 1e-4})
    assert [(f.status, f.severity, f.entity) for f in found] == [("firing", "critical", LINK)]


def test_symbol_errors_over_their_level(fabric: Fabric, table: ThresholdTable) -> None:
    # One symbol error a poll on 8e12 bits is a symbol BER of 1.25e-13, over NDR's Error (1e-14);
    # it is judged once the window holds 3 errors (the first poll has no rate) and confirmed next poll.
    feed = Feed(BerDetector(fabric, table), fabric)
    assert feed.polls(5, sym={HOST: 1}) == []
    (f,) = feed.polls(1, sym={HOST: 1})
    assert (f.severity, f.evidence["level"]) == ("critical", "error")
    assert f.evidence["symbol_ber"] == pytest.approx(1 / BITS)
    assert f.summary.startswith(f"{HOST} symbol BER 1.2e-13 over the error level 1e-14")


def test_both_ends_bad_is_one_finding_named_by_the_worse_end(fabric: Fabric, table: ThresholdTable) -> None:
    feed = Feed(BerDetector(fabric, table), fabric)
    found = feed.polls(6, ber={HOST: 6e-7, LEAF: 2e-6})
    assert [(f.status, f.severity, f.entity, f.port) for f in found] == [("firing", "critical", LINK, HOST)]
    assert found[0].evidence["port_measured"] == LEAF
    assert found[0].evidence["pre_fec_ber"] == pytest.approx(2e-6, rel=1e-3)


def test_unknown_media_uses_the_strictest_row(fabric: Fabric, table: ThresholdTable) -> None:
    no_media = dataclasses.replace(fabric, media=[None] * fabric.n_ports)
    feed = Feed(BerDetector(no_media, table), no_media)
    found = feed.polls(3, ber={HOST: 2e-6})
    assert len(found) == 1
    assert found[0].evidence["thresholds"]["source"] == f"{CSV_NAME} row 2: 7nm IB NDR FEC 14 DACs"


# -- without corrected-bit counters (UFM's default set, legacy PM) ----------------------------------------
class BlockPorts(Ports):
    """Ports that export RS-FEC corrected blocks and symbol errors but no PHY bit counters."""

    def batch(self, **over: Mapping) -> pa.RecordBatch:
        b = super().batch(**over)
        cols = {name: b.column(name) for name in b.schema.names}
        # One corrected block per ~2.5 corrected bits (burst errors), as the simulator models it.
        cols["fec_corrected_blocks"] = pc.divide(cols.pop("fec_corrected_bits"), pa.scalar(2, pa.uint64()))
        cols.pop("phy_received_bits")
        return make_batch(PORT_SAMPLE, b.num_rows, cols)


class BlockFeed(Feed):
    def __init__(self, det: BerDetector, fabric: Fabric) -> None:
        super().__init__(det, fabric)
        self.ports = BlockPorts(fabric)
        self.rates = CounterRates(("fec_corrected_blocks", "fec_uncorrectable_blocks", "symbol_errors"))


def test_rising_estimate_from_corrected_blocks_is_a_finding_before_any_uncorrectable(
    fabric: Fabric, table: ThresholdTable
) -> None:
    feed = BlockFeed(BerDetector(fabric, table), fabric)
    assert feed.polls(30) == []  # healthy: 1e-9 everywhere, estimates at their baselines and peers'
    # 2e-7 pre-FEC (an estimate of 1e-7 from blocks): under the NDR ACC Warning (5e-7), 200x the
    # port's baseline and its peers'. No uncorrectable block, no symbol error.
    found = feed.polls(3, ber={HOST: 2e-7})
    assert [(f.status, f.severity) for f in found] == [("firing", "info")]
    ev = found[0].evidence
    assert ev["rule"] == "pre-FEC BER 10x its 125-min baseline and over its peers"
    assert ev["pre_fec_from"] == "fec_corrected_blocks / line-rate bits (lower bound)"
    assert ev["counters"] == ["fec_corrected_blocks", "speed_bps"]
    assert ev["uncorrectable_blocks_in_window"] == 0
    assert ev["pre_fec_ber"] > 10 * ev["peer_median_pre_fec_ber"]
    assert ev["pre_fec_ber"] > 10 * ev["pre_fec_ber_baseline"]


def test_estimate_without_a_baseline_rise_is_quiet(fabric: Fabric, table: ThresholdTable) -> None:
    """A port steadily at 3x its peers from the start: not a rise, and not 10x the peers."""
    feed = BlockFeed(BerDetector(fabric, table), fabric)
    assert feed.polls(60, ber={HOST: 3e-9}) == []


def test_nvsentinel_symbol_error_rates(fabric: Fabric, table: ThresholdTable) -> None:
    feed = BlockFeed(BerDetector(fabric), fabric)  # no table: NVSentinel's absolute rates still apply
    assert feed.polls(3) == []
    # 5 symbol errors a poll (0.5/s): the one-minute symbol BER (6e-13) is over the generic
    # Warning; after about 25 polls the last hour holds more than 120: NVSentinel's fatal rate.
    found = feed.polls(40, sym={HOST: 5})
    assert [(f.severity, f.evidence["rule"]) for f in found] == [
        ("warning", "symbol BER over the field level (fast window)"),
        ("critical", "NVSentinel: more than 120 symbol errors an hour"),
    ]
    assert found[1].evidence["symbol_errors_last_hour"] > 120
    assert found[1].evidence["counters"] == ["symbol_errors", "speed_bps"]
    # 15 errors a second on another link: over NVSentinel's 10/s degradation rate at once.
    other = "gpu-0004/mlx5_2"
    (f,) = warmed_block_feed(fabric).polls(5, sym={other: 150})[:1]
    assert f.port == other and f.severity == "critical"


def warmed_block_feed(fabric: Fabric) -> BlockFeed:
    feed = BlockFeed(BerDetector(fabric), fabric)
    feed.polls(3)
    return feed


def test_pdr_symbol_windows(fabric: Fabric, table: ThresholdTable) -> None:
    """One symbol error every 3 polls on an 800G NDR-class port: 4e-14 symbol BER at line rate.
    The one-minute window never holds the 3 errors it needs; PDR's 12-minute window does, and
    4e-14 is over the table's symbol Error level (1e-14)."""
    feed = BlockFeed(BerDetector(fabric, table), fabric)
    found = []
    for _ in range(20):
        found += feed.polls(1, sym={HOST: 1}) + feed.polls(2)
    first = found[0]
    assert (first.severity, first.evidence["rule"]) == (
        "critical",
        "PDR: symbol BER over 12 min over the field Error level",
    )
    assert first.evidence["symbol_ber_12min"] == pytest.approx(1 / (3 * BITS), rel=0.3)


# -- baselines that do not learn the fault ---------------------------------------------------------------
def roce_ramp(k: int) -> float:
    """Pre-FEC BER ``k`` polls into a ramp from 1e-9 to 3e-4 over 90 s (exponential)."""
    return 1e-9 * (3e-4 / 1e-9) ** min(k * POLL / 90.0, 1.0)


@pytest.mark.parametrize("with_table", [False, True])
@pytest.mark.parametrize("warm_polls", [6, 30, 90])
def test_a_90_s_ramp_is_found_rising_within_60_s(
    fabric: Fabric, table: ThresholdTable, with_table: bool, warm_polls: int
) -> None:
    """A RoCE NIC's pre-FEC BER from 1e-9 to past the FEC limit in 90 s, after one, five or
    fifteen minutes of clean traffic: found by a rising rule (not by the uncorrectable blocks
    that come last) within 60 s. A baseline that learned each poll followed the ramp: found
    75-94 s in, by the blocks. With NVIDIA's table, whose NDR levels are 1e-7 to 1e-6, the
    ramp crosses Warning before it is ten times its baseline: found as soon, at that level."""
    feed = Feed(BerDetector(fabric, table if with_table else None), fabric)
    assert feed.polls(warm_polls) == []
    start = feed.ports.poll
    found: list[Finding] = []
    for k in range(1, 10):
        found += feed.polls(1, ber={HOST: roce_ramp(k)})
        if found:
            break
    assert found, "the ramp was not found in 90 s"
    first = found[0]
    delay = (feed.found[0][0] - start + 1) * POLL
    assert delay <= 60.0, delay
    if with_table:
        assert first.evidence["rule"] == "pre-FEC BER over the field level"
    else:
        assert first.evidence["level"] == "rising", first.evidence["rule"]
    assert first.evidence["pre_fec_ber_baseline"] < 1e-8  # the level from before the ramp


def test_a_step_that_stays_flat_is_a_new_normal(fabric: Fabric) -> None:
    """A port whose BER steps from 1e-9 to 2e-8 and stays there: seen rising, then let go once
    it has held its level for settle_s (5 minutes), and not found again."""
    feed = Feed(BerDetector(fabric), fabric)
    assert feed.polls(60) == []
    opened = feed.polls(6, ber={HOST: 2e-8})
    assert [(f.status, f.evidence["level"]) for f in opened] == [("firing", "rising")]
    later = feed.polls(60, ber={HOST: 2e-8})
    assert [f.status for f in later] == ["cleared"]
    cleared_at = next(k for k, f in feed.found if f.status == "cleared")
    assert cleared_at - 60 <= 6 + 30 + 6  # the rise, five minutes on the plateau, the close
    assert feed.polls(120, ber={HOST: 2e-8}) == []


class UnspeedPorts(BlockPorts):
    """UFM Telemetry alone: RS-FEC blocks and symbol errors, no speed, no state."""

    def batch(self, **over: Mapping) -> pa.RecordBatch:
        b = super().batch(**over)
        cols = {name: b.column(name) for name in b.schema.names}
        for gauge in ("speed_bps", "width", "phys_state"):
            cols.pop(gauge)
        return make_batch(PORT_SAMPLE, b.num_rows, cols)


def test_without_any_speed_read_the_inventorys_expected_speed_gives_the_line_bits(
    fabric: Fabric, table: ThresholdTable
) -> None:
    """No source read the port's speed (UFM Telemetry alone): the estimate divides by the line
    rate the inventory expects (800G here), where it counted nothing before."""
    feed = BlockFeed(BerDetector(fabric, table), fabric)
    feed.ports = UnspeedPorts(fabric)
    assert feed.polls(30) == []
    found = feed.polls(3, ber={HOST: 2e-7})
    assert [(f.status, f.evidence["rule"]) for f in found] == [
        ("firing", "pre-FEC BER 10x its 125-min baseline and over its peers")
    ]


def test_a_ramp_among_peers_spread_over_a_decade_is_found_within_60_s(fabric: Fabric) -> None:
    """Healthy peers between 1e-9 and 1e-8 (their median 5e-9, five times this port's own level):
    with exact corrected bits the rise is judged against three times their median, so the ramp
    is found 50 s in, not 63 s as against ten times it."""
    feed = Feed(BerDetector(fabric), fabric)
    spread = {k: 10 ** (-9 + (i % 11) / 10) for i, k in enumerate(fabric.keys) if k != HOST}
    assert feed.polls(60, ber=spread | {HOST: 1e-9}) == []
    start = feed.ports.poll
    for k in range(1, 10):
        if feed.polls(1, ber=spread | {HOST: roce_ramp(k)}):
            break
    assert feed.found, "not found in 90 s"
    assert (feed.found[0][0] - start + 1) * POLL <= 60.0
