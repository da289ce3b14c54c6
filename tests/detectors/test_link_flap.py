"""Link flaps: counted once per outage per link, warning at 3 in 10 min, critical at 6, quiet closes."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from functools import cache

import numpy as np
import pyarrow as pa
import pytest

from graywire.collectors.model import Fabric
from graywire.collectors.schemas import PHYS_LINK_UP, PHYS_POLLING, PORT_SAMPLE, TS, make_batch
from graywire.detectors.findings import Finding
from graywire.detectors.link_flap import LinkFlapConfig, LinkFlapDetector
from graywire.detectors.rates import CounterRates
from graywire.fabricsim.faults import Fault
from graywire.fabricsim.sim import EPOCH, FabricSim, SimConfig
from graywire.fabricsim.topology import TopologySpec, build_fabric

POLL = 10.0
HOST = "gpu-0003/mlx5_2"
LEAF = "leaf-r2-000/p4"  # host 3's rail-2 NIC lands on the rail-2 leaf's 4th down port
LINK = f"{HOST}<->{LEAF}"
RATE_COLUMNS = ("link_downed", "rx_bytes")  # what the detector reads, plus a data counter


# -- fabricsim ----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Run:
    faults: tuple[Fault, ...]
    findings: tuple[Finding, ...]
    outages: int  # outages the detector recorded over the whole fabric


@cache
def simulate(faults: str, seed: int = 0, duration_s: float = 300.0) -> Run:
    sim = FabricSim(
        SimConfig(topology=TopologySpec(hosts=8), duration_s=duration_s, seed=seed, faults=faults)
    )
    rates = CounterRates(RATE_COLUMNS)
    det = LinkFlapDetector(sim.fabric)
    found: list[Finding] = []
    for st in sim.run():
        found += det.observe(rates.observe(st.port_sample))
    return Run(tuple(sim.faults), tuple(found), int(np.isfinite(det.events).sum()))


def rel(f: Finding) -> float:
    return (f.time - EPOCH).total_seconds()


def iso(seconds: float, start: datetime = EPOCH) -> str:
    return (start + timedelta(seconds=seconds)).isoformat()


def check_place(f: Finding) -> None:
    assert (f.kind, f.entity, f.node, f.port, f.link) == ("link_flap", LINK, "gpu-0003", HOST, LINK)
    assert f.detector == "link_flap/1"
    assert f.evidence["peer_port"] == LEAF


@pytest.mark.parametrize("seed", [0, 1])
def test_flapping_link_warns_at_the_third_outage_and_clears_after_quiet(seed: int) -> None:
    # Four 15 s outages, 100 s apart: at 60, 160, 260 and 360 s.
    run = simulate(f"link_flap@60s+400s:{HOST}", seed, duration_s=1000.0)
    fault = run.faults[0]
    assert (fault.port, fault.peer, fault.magnitude) == (HOST, LEAF, 4.0)
    # Opens at the third outage; the fourth updates it (the incident then says 4), then it clears.
    assert [(f.status, f.severity, f.score) for f in run.findings] == [
        ("firing", "warning", 3.0), ("firing", "warning", 4.0), ("cleared", "warning", 0.0)
    ]  # fmt: skip
    f, update, c = run.findings
    assert rel(update) == 360.0 and update.summary == f"{LINK} went down 4 times in 10 min"
    check_place(f)
    assert rel(f) == 260.0
    assert f.evidence["outages_in_window"] == 3 and f.score == 3.0
    assert f.evidence["window_seconds"] == 600.0
    assert f.evidence["outage_times"] == [iso(60), iso(160), iso(260)]
    assert f.summary == f"{LINK} went down 3 times in 10 min"
    # Cleared on the first poll more than ten minutes after the last outage (360 s).
    check_place(c)
    assert rel(c) == 360.0 + 600.0 + POLL
    assert c.evidence["outages_in_window"] == 0
    assert c.evidence["outage_times"] == [iso(60), iso(160), iso(260), iso(360)]
    assert c.summary == f"{LINK} stable for 10 min"
    assert run.outages == 4  # each outage once, though both ends saw it in two ways


def test_six_flaps_escalate_to_critical_on_the_same_link() -> None:
    # Six outages 50 s apart: 60, 110, 160, 210, 260, 310 s.
    run = simulate(f"link_flap@60s+300s=6:{HOST}", duration_s=400.0)
    assert [(f.status, f.severity, rel(f), f.score) for f in run.findings] == [
        ("firing", "warning", 160.0, 3.0),
        ("firing", "warning", 210.0, 4.0),
        ("firing", "warning", 260.0, 5.0),
        ("firing", "critical", 310.0, 6.0),
    ]
    for f in run.findings:
        check_place(f)
    assert run.findings[-1].evidence["outages_in_window"] == 6
    assert run.findings[-1].summary == f"{LINK} went down 6 times in 10 min"


@pytest.mark.parametrize("seed", [0, 1])
def test_a_single_short_retrain_is_counted_once_and_never_reported(seed: int) -> None:
    run = simulate(f"short_retrain@60s:{HOST}", seed)
    assert run.findings == ()
    assert run.outages == 1


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_healthy_runs_give_no_finding(seed: int) -> None:
    run = simulate("none", seed)
    assert run.findings == ()
    assert run.outages == 0


def test_other_benign_events_count_no_outage() -> None:
    run = simulate(
        f"counter_reset@40s+60s:gpu-0003,counter_wrap@100s+300s:{HOST},"
        "collector_outage@160s+60s:gpu-0003,collector_outage@240s+60s:leaf-r2-000,checkpoint_burst@300s+60s",
        duration_s=400.0,
    )
    assert len(run.faults) == 5
    assert run.findings == ()
    assert run.outages == 0


# -- hand-built batches -----------------------------------------------------------------------------------
T0 = datetime(2026, 2, 1, tzinfo=UTC)


@pytest.fixture(scope="module")
def fabric() -> Fabric:
    return build_fabric(TopologySpec(hosts=8))


class Ports:
    """Hand-built samples of every fabric port: physical state and a cumulative link_downed counter."""

    def __init__(self, fabric: Fabric, with_phys: bool = True) -> None:
        self.keys = list(fabric.keys)
        self.dictionary = pa.array(self.keys)
        self.downed = np.full(len(self.keys), 7, dtype=np.uint64)
        self.with_phys = with_phys
        self.poll = 0

    def batch(self, down: tuple[str, ...] = (), downed: Mapping[str, int] | None = None) -> pa.RecordBatch:
        """One poll: ``down`` ports read physically down; ``downed`` adds to their link_downed counters."""
        n = len(self.keys)
        phys = np.full(n, PHYS_LINK_UP, dtype=np.uint8)
        for key in down:
            phys[self.keys.index(key)] = PHYS_POLLING
        for key, v in (downed or {}).items():
            self.downed[self.keys.index(key)] += np.uint64(v)
        t = T0 + timedelta(seconds=POLL * self.poll)
        self.poll += 1
        cols = {
            "time": pa.array([t] * n, type=TS),
            "port": pa.DictionaryArray.from_arrays(pa.array(np.arange(n, dtype=np.int32)), self.dictionary),
            "source": pa.DictionaryArray.from_arrays(pa.array(np.zeros(n, np.int8)), pa.array(["ufm"])),
            "link_downed": pa.array(self.downed),
        }
        if self.with_phys:
            cols["phys_state"] = pa.array(phys)
        return make_batch(PORT_SAMPLE, n, cols)


class Feed:
    def __init__(self, fabric: Fabric, cfg: LinkFlapConfig | None = None, with_phys: bool = True) -> None:
        self.det = LinkFlapDetector(fabric, cfg)
        self.ports = Ports(fabric, with_phys)
        self.rates = CounterRates(RATE_COLUMNS)
        self.found: list[tuple[int, Finding]] = []

    def polls(self, count: int = 1, **kw: object) -> list[Finding]:
        out = []
        for _ in range(count):
            k = self.ports.poll
            new = self.det.observe(self.rates.observe(self.ports.batch(**kw)))  # type: ignore[arg-type]
            self.found += [(k, f) for f in new]
            out += new
        return out

    def outage(self) -> list[Finding]:
        """A link outage as a collector sees it: both ends down, both link_downed counters +1."""
        return self.polls(1, down=(HOST, LEAF), downed={HOST: 1, LEAF: 1})

    def recorded(self) -> int:
        return int(np.isfinite(self.det.events).sum())


def test_warning_at_three_outages_critical_at_six(fabric: Fabric) -> None:
    feed = Feed(fabric)
    feed.polls(2)
    severities = []
    for _ in range(7):  # an outage every 20 s: down one poll, up the next
        severities.append([(f.status, f.severity) for f in feed.outage()])
        assert feed.polls(1) == []
    w, c = ("firing", "warning"), ("firing", "critical")
    assert severities == [[], [], [w], [w], [w], [c], [c]]  # each further outage updates the count
    found = dict(feed.found)
    warn, crit = found[6], found[12]
    for f in (warn, crit):
        check_place(f)
    assert warn.evidence["outages_in_window"] == 3
    assert crit.evidence["outages_in_window"] == 6
    assert crit.evidence["outage_times"] == [iso(POLL * k, T0) for k in (2, 4, 6, 8, 10, 12)]
    assert feed.recorded() == 7


def test_cleared_after_a_quiet_window(fabric: Fabric) -> None:
    feed = Feed(fabric)
    feed.polls(1)
    for _ in range(6):
        feed.outage()
        feed.polls(1)
    assert [f.severity for _, f in feed.found] == ["warning"] * 3 + ["critical"]
    last = 11  # the poll of the sixth outage, at 110 s
    # Quiet from here: the last outage leaves the 10-minute window after 710 s, so poll 72 clears.
    assert feed.polls(72 - feed.ports.poll) == []
    (c,) = feed.polls(1)
    assert (c.status, c.severity, c.entity) == ("cleared", "critical", LINK)
    assert c.time == T0 + timedelta(seconds=POLL * 72)
    assert c.evidence["outages_in_window"] == 0
    assert c.evidence["outage_times"][-1] == iso(POLL * last, T0)
    assert feed.polls(10) == []


def test_both_ends_of_one_outage_count_once(fabric: Fabric) -> None:
    feed = Feed(fabric)
    feed.polls(1)
    feed.polls(1, down=(HOST, LEAF), downed={HOST: 1, LEAF: 1})  # state and counter, both ends
    assert feed.recorded() == 1
    feed.polls(3, down=(HOST, LEAF))  # still down: the same outage
    assert feed.recorded() == 1
    feed.polls(1)
    feed.polls(1, down=(LEAF,), downed={LEAF: 1})  # only one end read, only one end's counter
    assert feed.recorded() == 2
    feed.polls(1)
    feed.polls(1, downed={HOST: 1, LEAF: 1})  # down and back between two polls: counters only
    assert feed.recorded() == 3
    assert [(f.status, f.evidence["outages_in_window"]) for _, f in feed.found] == [("firing", 3)]


def test_state_then_counters_a_poll_later_count_once(fabric: Fabric) -> None:
    """Changed: the state drop and the counters read on the next poll (after the link came back)
    used to count as two outages."""
    feed = Feed(fabric)
    feed.polls(1)
    feed.polls(1, down=(HOST, LEAF))  # the poll lands in the outage: state only
    feed.polls(1, downed={HOST: 1, LEAF: 1})  # back up; both counters say one outage
    feed.polls(1, downed={LEAF: 0})
    assert feed.recorded() == 1


def with_source(batch: pa.RecordBatch, name: str) -> pa.RecordBatch:
    n = batch.num_rows
    src = pa.DictionaryArray.from_arrays(pa.array(np.zeros(n, np.int8)), pa.array([name]))
    return batch.set_column(batch.schema.get_field_index("source"), "source", src)


def test_one_outage_seen_by_two_sources_counts_once(fabric: Fabric) -> None:
    """UFM REST reports the state, the host agent the counters (each through its own rates
    stage, as the pipeline runs them): one outage, however many sources and ends see it."""
    det = LinkFlapDetector(fabric)
    rest, agent = Ports(fabric), Ports(fabric)
    rest_rates, agent_rates = CounterRates(RATE_COLUMNS), CounterRates(RATE_COLUMNS)

    def poll(rest_kw: dict, agent_kw: dict) -> None:
        det.observe(rest_rates.observe(with_source(rest.batch(**rest_kw), "ufm")))
        det.observe(agent_rates.observe(with_source(agent.batch(**agent_kw), "agent")))

    poll({}, {})
    poll({"down": (HOST, LEAF)}, {"down": (HOST,), "downed": {HOST: 1}})
    poll({"downed": {HOST: 1, LEAF: 1}}, {"downed": {LEAF: 1}})
    poll({}, {})
    assert int(np.isfinite(det.events).sum()) == 1
    # A second outage two minutes later is a second outage.
    for _ in range(10):
        poll({}, {})
    poll({"down": (HOST,), "downed": {HOST: 1}}, {})
    assert int(np.isfinite(det.events).sum()) == 2


def test_several_outages_between_two_polls_take_the_larger_end(fabric: Fabric) -> None:
    feed = Feed(fabric)
    feed.polls(1)
    assert feed.polls(1, downed={HOST: 2, LEAF: 1}) == []  # two quick outages; the leaf counted one
    assert feed.recorded() == 2
    (f,) = feed.polls(1, downed={HOST: 1, LEAF: 1})
    assert (f.status, f.severity, f.evidence["outages_in_window"]) == ("firing", "warning", 3)
    assert f.evidence["outage_times"] == [iso(10, T0), iso(10, T0), iso(20, T0)]


def test_outages_further_apart_than_the_window_never_open(fabric: Fabric) -> None:
    feed = Feed(fabric)
    feed.polls(1)
    for _ in range(5):  # an outage every 310 s: never three within 600 s
        feed.outage()
        feed.polls(30)
    assert feed.found == []
    assert feed.recorded() == 5


def test_a_single_outage_is_only_counted(fabric: Fabric) -> None:
    feed = Feed(fabric)
    feed.polls(1)
    assert feed.outage() == []  # a 30 s retrain: down for three polls, counted when it starts
    assert feed.polls(2, down=(HOST, LEAF)) == []
    assert feed.polls(70) == []
    assert feed.recorded() == 1


def test_config_window_and_counts(fabric: Fabric) -> None:
    feed = Feed(fabric, LinkFlapConfig(window_s=60.0, flaps_to_open=2, flaps_critical=3))
    feed.polls(1)
    feed.outage()
    (f,) = feed.outage()
    assert (f.severity, f.evidence["window_seconds"]) == ("warning", 60.0)
    assert f.summary == f"{LINK} went down 2 times in 1 min"
    (f,) = feed.outage()
    assert f.severity == "critical"
    assert feed.polls(6) == []
    (c,) = feed.polls(1)  # 70 s after the last outage: outside the one-minute window
    assert c.status == "cleared"


def test_uplink_flap_names_leaf_and_spine(fabric: Fabric) -> None:
    up = "leaf-r2-000/p9"  # the leaf's first uplink
    spine = fabric.keys[int(fabric.peer[fabric.keys.index(up)])]
    feed = Feed(fabric)
    feed.polls(1)
    for _ in range(3):
        feed.polls(1, down=(up, spine), downed={up: 1, spine: 1})
    (_, f), *_ = feed.found
    assert (f.node, f.port, f.evidence["peer_port"]) == ("leaf-r2-000", up, spine)
    assert f.entity == f.link == "<->".join(sorted((up, spine)))


@pytest.mark.parametrize("case", ["no phys_state column", "down at the first poll"])
def test_no_phantom_outage_at_start(fabric: Fabric, case: str) -> None:
    feed = Feed(fabric, with_phys=case != "no phys_state column")
    if case == "down at the first poll":
        feed.polls(3, down=(HOST, LEAF))  # an unused or long-dead link, down before graywire started
    feed.polls(1)
    feed.polls(1, downed={HOST: 1, LEAF: 1})  # two real outages ...
    feed.polls(1, downed={HOST: 1, LEAF: 1})
    assert feed.recorded() == 2
    assert feed.found == []  # ... are not three
