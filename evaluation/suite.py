"""``graywire eval``: the detectors and a static-rule baseline, scored on a suite of simulations.

The suite injects every fault type at several magnitudes into fabrics of 64 to 4,096 hosts
over several seeds, mixed with benign events (counter resets, 32-bit wraps, short retrains,
collector outages, checkpoint bursts), plus a long healthy soak that measures false findings
per 1,000 port-hours. Both the detectors and the baseline see the same batches.

*Representation variants* replay the mixed scenarios (and a shorter soak) as other source
mixes show them: each variant names a port view and an NCCL view (``graywire.fabricsim.port_views``,
``graywire.fabricsim.nccl_views``) that render the simulator's poll in a real source's format and read
it back with graywire's collectors. Scores are reported per variant, so a fault family that
only works with the richest counters shows up as such; a fault a variant's sources cannot
show at all is reported as not observable, not as a miss.
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Any, TextIO

from graywire.detectors.ber_thresholds import ThresholdTable
from graywire.detectors.findings import Kind
from graywire.detectors.pipeline import Pipeline, default_detectors
from graywire.evaluation.baseline import StaticRules
from graywire.evaluation.scoring import Report, score
from graywire.fabricsim.faults import FAULT_KINDS
from graywire.fabricsim.nccl_views import NCCL_VIEWS, InitLogView
from graywire.fabricsim.port_views import PORT_VIEWS, UfmLinksView
from graywire.fabricsim.ras import read_back
from graywire.fabricsim.sim import EPOCH, FabricSim, SimConfig, truth_document
from graywire.fabricsim.topology import TopologySpec

MAGNITUDES: dict[str, tuple[float, ...]] = {
    Kind.SPEED_DOWNGRADE: (0.5, 0.25),
    Kind.WIDTH_DOWNGRADE: (0.5, 0.25),
    "ber_ramp": (3.0, 10.0, 30.0),
    Kind.PFC_STORM: (1.0,),
    Kind.ECN_HOTSPOT: (100.0, 300.0, 1000.0),
    Kind.LINK_FLAP: (5.0, 8.0, 12.0),
    "slow_channel": (0.1, 0.2, 0.5),
    "slow_nic": (0.1, 0.3),
    "straggler": (0.05, 0.1, 0.2),
    "nccl_slow_path": (0.1, 0.3, 0.5),
    "job_slowdown": (0.1, 0.2, 0.5),
    Kind.NCCL_TRANSPORT_FALLBACK: (0.5, 1.0),
    Kind.NCCL_GDRDMA_MISSING: (0.1, 0.3),
    "credit_starvation": (0.02, 0.1, 0.5),
    "slow_hop": (0.2, 0.5, 1.0),
    "cable_moved": (20.0, 40.0),
    "cable_missing": (0.0,),
    "rail_miscabled": (0.0,),
}
BENIGN = (
    "counter_reset@{a}+5m,counter_wrap@{b},short_retrain@{c},collector_outage@{d}+90s,checkpoint_burst@{e}+2m,"
    "slow_step@{f}+10s,driver_reload@{g}=1"
)


#: When each benign event of a mixed run happens.
BENIGN_AT = {"a": "700s", "b": "300s", "c": "900s", "d": "1500s", "e": "1700s", "f": "1100s", "g": "1900s"}


@dataclass(frozen=True, slots=True)
class Variant:
    """One source mix: which port view and which NCCL view the detectors are fed through."""

    name: str
    port: str = "rich"
    nccl: str = "rich"


#: The simulator's own batches, then what real source mixes give (poorest last).
VARIANTS: tuple[Variant, ...] = (
    Variant("rich"),
    Variant("ufm_default+inspector_verbose", "ufm_default", "inspector_verbose"),
    Variant("perfquery_legacy+inspector_verbose", "perfquery_legacy", "inspector_verbose"),
    Variant("host_ethtool+inspector_verbose", "host_ethtool", "inspector_verbose"),
    Variant("ufm_default+inspector_default", "ufm_default", "inspector_default"),
)
VARIANT_BY_NAME = {v.name: v for v in VARIANTS}


def variant_of(name: str) -> Variant:
    """A suite variant by name, or any ``PORT_VIEW+NCCL_VIEW`` pair (``ufm_default+rich``)."""
    if name in VARIANT_BY_NAME:
        return VARIANT_BY_NAME[name]
    port, _, nccl = name.partition("+")
    if port in PORT_VIEWS and nccl in NCCL_VIEWS:
        return Variant(name, port, nccl)
    raise ValueError(
        f"unknown variant {name!r}; known: {', '.join(VARIANT_BY_NAME)}, or PORT+NCCL with PORT one of "
        f"{', '.join(PORT_VIEWS)} and NCCL one of {', '.join(NCCL_VIEWS)}"
    )


@dataclass(frozen=True, slots=True)
class Scenario:
    name: str
    hosts: int
    seed: int
    duration_s: float
    interval_s: float
    faults: str
    variant: str = "rich"
    #: Storage NICs per host (``TopologySpec.storage_nics``); the phase scenarios use them.
    storage_nics: int = 0
    #: A phase's scenarios (docs/phases) are scored apart, as variant ``<variant>/<phase>``.
    phase: str | None = None

    @property
    def group(self) -> str:
        return f"{self.variant}/{self.phase}" if self.phase else self.variant

    @property
    def polls(self) -> int:
        return int(self.duration_s // self.interval_s) + 1


def suite(quick: bool = False, seeds: int = 3, variants: tuple[str, ...] | None = None) -> list[Scenario]:
    """The scenario list: per seed and magnitude index, all fault types at once on 64 hosts
    (targets never overlap), one run each at 256 / 1,024 / 4,096 hosts, and the soak, all on
    the simulator's own batches; then, per other variant, the mixed runs and a 12 h soak
    (3 h with ``quick``) as that source mix shows them."""
    out: list[Scenario] = []
    dur, step = 2400.0, 10.0
    names = [v.name for v in VARIANTS] if variants is None else list(variants)
    for n in names:
        variant_of(n)  # names the bad one
    mixes: list[Scenario] = []
    for seed in range(seeds):
        for m in range(3):
            items = []
            for i, (kind, mags) in enumerate(MAGNITUDES.items()):
                mag = mags[m % len(mags)]
                start = 60 + 60 * i  # staggered so each fault has its own stretch of the timeline
                items.append(f"{kind}@{start}s+1200s={mag:g}")
            benign = BENIGN.format(**BENIGN_AT)
            mixes.append(Scenario(f"mix-s{seed}-m{m}", 64, seed, dur, step, ",".join(items) + "," + benign))
    if "rich" in names:
        out += mixes
        sizes = (256,) if quick else (256, 1024, 4096)
        for n in sizes:
            out.append(Scenario(f"default-{n}", n, 11, 1300.0 if n >= 4096 else 2400.0, step, "default"))
        # The healthy soak: 1,024 ports for 72 simulated hours, polled every minute, with the
        # hourly checkpoint bursts a training job makes.
        out.append(_soak(6 if quick else 72))
        out += datapath_scenarios(seeds)
        out += phase_scenarios(seeds)
        out += startup_scenarios(1 if quick else seeds)
        out += fault_path_scenarios(1 if quick else seeds)
    if QUIRK_VARIANT in names:
        out += quirk_scenarios(seeds)
    for name in names:
        if name == "rich":
            continue
        out += [replace(sc, name=f"{sc.name}@{name}", variant=name) for sc in mixes]
        soak = _soak(3 if quick else 12)
        out.append(replace(soak, name=f"{soak.name}@{name}", variant=name))
    return out


def datapath_scenarios(seeds: int = 3) -> list[Scenario]:
    """The data path (GPU<->NIC affinity): per seed, NICs moved to the other socket on 64 hosts
    (two from boot, one at a maintenance reboot, one put back), the same on a fleet whose NICs all
    sit off the CPU by design (``NODE``), and the benign twins: whole fleets wired ``NODE`` or
    across the sockets by design, where every peer agrees and nothing may fire."""
    moved = "nic_cross_numa,nic_cross_numa,nic_cross_numa@600s,nic_cross_numa@300s+600s"
    out = []
    for seed in range(seeds):
        out += [
            Scenario(f"datapath-s{seed}", 64, seed, 1200.0, 10.0, moved),
            Scenario(f"datapath-node-s{seed}", 64, seed, 1200.0, 10.0, f"nic_layout_shared=0,{moved}"),
            Scenario(f"datapath-benign-node-s{seed}", 64, seed, 1200.0, 10.0, "nic_layout_shared=0"),
            Scenario(f"datapath-benign-remote-s{seed}", 64, seed, 1200.0, 10.0, "nic_layout_shared=1"),
        ]
    return out


#: ``ecmp_polarization`` magnitudes: the share of a leaf's uplinks its upward traffic hashes onto.
POLARIZATION = (0.25, 0.5)


def phase_scenarios(seeds: int = 3) -> list[Scenario]:
    """The checkpoint and multipath phases (docs/phases), each fault beside its benign twin, on
    64 hosts for 40 minutes per seed; scored apart from the rest of the suite.

    ``checkpoints``: a fabric with two storage NICs a host checkpoints every 5 minutes, over
    its compute NICs (the fault) or over its storage NICs (the twin, ``checkpoint_burst``).
    ``multipath``: one leaf whose upward traffic hashes onto a quarter or half of its uplinks
    (the fault), or every leaf spreading evenly through a fabric-wide checkpoint (the twin).
    """
    out: list[Scenario] = []
    for seed in range(seeds):
        run = partial(Scenario, hosts=64, seed=seed, duration_s=2400.0, interval_s=10.0)
        storage = ",".join(f"checkpoint_burst@{300 + 300 * k}s+60s" for k in range(6))
        for name, faults in (("compute", "checkpoint_on_compute@300s+1800s=300"), ("storage", storage)):
            sc = run(name=f"checkpoints-{name}-s{seed}", faults=faults, storage_nics=2, phase="checkpoints")
            out.append(sc)
        for m, mag in enumerate(POLARIZATION):
            polarized = f"ecmp_polarization@300s+1500s={mag:g}"
            out.append(run(name=f"multipath-polarized-s{seed}-m{m}", faults=polarized, phase="multipath"))
        out.append(run(name=f"multipath-even-s{seed}", faults="checkpoint_burst@1200s+2m", phase="multipath"))
    return out


#: Start-up (docs/phases/start-up.md): fleet jobs restarting on 64 hosts, read back from their
#: NCCL_DEBUG init lines. The faulty run has two slow inits and three stalls in init (a rank
#: that never starts, one that hangs after bootstrap, a host whose ranks hang in the job's split
#: communicator); its benign twin has a job of every host restarting, whose inits are long and
#: normal for its size. Kept out of the mixes and of ``default``.
STARTUP = (
    "nccl_init_slow@600s+1500s=3,nccl_init_slow@600s+1500s=5,"
    "nccl_bootstrap_stall@700s+1200s=0,nccl_bootstrap_stall@800s+1200s=1,nccl_bootstrap_stall@900s+1200s=2"
)
STARTUP_BENIGN = "big_job_init@300s+2000s"
#: Topology probes (docs/phases/start-up.md): a host that missed NVLink peer access and one whose
#: NICs it saw across the CPU interconnect; the twin, a fleet whose every host has the lesser layout.
STARTUP_TOPOLOGY = "nccl_topology_mismatch@300s+1500s=0,nccl_topology_mismatch@400s+1500s=1"
STARTUP_TOPOLOGY_BENIGN = "topology_layout_shared@0s+2400s"


def startup_scenarios(seeds: int = 3) -> list[Scenario]:
    """Per seed, the start-up faults and their benign twin (same fleet, same seed)."""
    out = []
    for seed in range(seeds):
        out.append(Scenario(f"startup-s{seed}", 64, seed, 2400.0, 10.0, STARTUP))
        out.append(Scenario(f"startup-benign-s{seed}", 64, seed, 2400.0, 10.0, STARTUP_BENIGN))
        out.append(Scenario(f"startup-topology-s{seed}", 64, seed, 2400.0, 10.0, STARTUP_TOPOLOGY))
        out.append(
            Scenario(f"startup-topology-benign-s{seed}", 64, seed, 2400.0, 10.0, STARTUP_TOPOLOGY_BENIGN)
        )
    return out


#: The fault path (docs/phases/fault-path.md): on 64 hosts (two jobs of 32), a host NIC's link
#: fails for good in each job and the rank on it dies; in the second run the failed link comes
#: back 15 minutes later (replaced), after the scheduler killed the job. Benign twin: both jobs
#: end normally, their ranks finalizing and leaving. Kept out of the mixes and of ``default``.
FAULT_PATH = ("rank_dead@300s,rank_dead@1200s", "rank_dead@300s+900s,rank_dead@1000s+900s")
FAULT_PATH_BENIGN = "job_end@300s,job_end@1200s"


def fault_path_scenarios(seeds: int = 3) -> list[Scenario]:
    """Per seed, the dead-rank runs and their benign twin (same jobs, same seed)."""
    out = []
    for seed in range(seeds):
        run = partial(Scenario, hosts=64, seed=seed, duration_s=2400.0, interval_s=10.0, phase="fault-path")
        for m, faults in enumerate(FAULT_PATH):
            out.append(run(name=f"fault-rank-dead-s{seed}-m{m}", faults=faults))
        out.append(run(name=f"fault-job-end-s{seed}", faults=FAULT_PATH_BENIGN))
    return out


#: Source quirks (docs/evaluation.md): a RoCE fabric read by host agents (ethtool), where NIC drivers
#: reload with their FEC corrected-bit counters in each band: below 2^31, between 2^31 and 2^32
#: (where a reset looks like a 32-bit wrap), above 2^32. The fault run adds a pre-FEC BER ramp
#: from the port's own level to 10x the field "Error" threshold over 90 s; the twin has the
#: reloads alone, and nothing may fire.
QUIRK_RELOADS = ",".join(
    f"driver_reload@{300 + 100 * band + 20 * k}s={band}" for band in range(3) for k in range(2)
)
QUIRK_RAMP = "ber_ramp@600s+90s=10"
QUIRK_VARIANT = "host_ethtool+inspector_verbose"


def quirk_scenarios(seeds: int = 3) -> list[Scenario]:
    """Per seed, driver reloads at every counter band with a 90-s BER ramp, and the reloads alone."""
    out = []
    for seed in range(seeds):
        run = partial(Scenario, hosts=64, seed=seed, duration_s=900.0, interval_s=10.0,
                      variant=QUIRK_VARIANT, phase="quirks")  # fmt: skip
        out.append(run(name=f"quirks-reload-ramp-s{seed}", faults=f"{QUIRK_RELOADS},{QUIRK_RAMP}"))
        out.append(run(name=f"quirks-reload-s{seed}", faults=QUIRK_RELOADS))
    return out


def _soak(hours: int) -> Scenario:
    bursts = ",".join(f"checkpoint_burst@{h * 3600 + 600}s+2m" for h in range(hours))
    return Scenario(f"soak-{hours}h", 32, 5, hours * 3600.0, 60.0, bursts)


@dataclass
class Totals:
    """Reports added up over scenarios."""

    faults: dict[str, dict[str, Any]] = field(default_factory=dict)
    by_kind: dict[str, list[int]] = field(default_factory=dict)
    port_hours: float = 0.0
    soak_port_hours: float = 0.0
    soak_false: int = 0

    def add(self, r: Report, soak: bool) -> None:
        for kind, s in r.by_fault.items():
            if not s.covered:
                continue  # not observable from this source mix: neither a catch nor a miss
            t = self.faults.setdefault(kind, {"delays_s": [], "delays_polls": []})
            for counter in ("faults", "detected", "localized", "candidates"):
                t.setdefault(counter, 0)
            t["faults"] += s.total
            t["detected"] += s.detected
            t["localized"] += s.localized
            t["candidates"] += s.with_candidates
            t["delays_s"] += s.delays_s
            t["delays_polls"] += [d / r.interval_s for d in s.delays_s]
        for kind, c in r.by_kind.items():
            acc = self.by_kind.setdefault(kind, [0, 0, 0])
            for i in range(3):
                acc[i] += c[i]
        self.port_hours += r.port_hours
        if soak:
            self.soak_port_hours += r.port_hours
            self.soak_false += r.false_findings + r.benign_alarms

    def summary(self) -> dict[str, Any]:
        by_fault: dict[str, Any] = {}
        tp = fp = 0
        for c in self.by_kind.values():
            tp += c[0]
            fp += c[1] + c[2]
        rec_num = rec_den = 0
        for kind, t in sorted(self.faults.items()):
            if not t["faults"]:
                continue
            kinds = FAULT_KINDS[kind]
            k_tp = sum(self.by_kind.get(k, [0, 0, 0])[0] for k in kinds)
            k_all = sum(sum(self.by_kind.get(k, [0, 0, 0])) for k in kinds)
            precision = k_tp / k_all if k_all else None
            recall = t["detected"] / t["faults"]
            rec_num += t["detected"]
            rec_den += t["faults"]
            d = t["delays_s"]
            by_fault[kind] = {
                "faults": t["faults"],
                "recall": recall,
                "precision": precision,
                "f1": _f1(precision, recall),
                "delay_median_s": statistics.median(d) if d else None,
                "delay_p95_s": _p95(d),
                "delay_median_polls": statistics.median(t["delays_polls"]) if d else None,
                "delay_p95_polls": _p95(t["delays_polls"]),
                "localization_top1": t["localized"] / t["candidates"] if t["candidates"] else None,
            }
        precision = tp / (tp + fp) if tp + fp else None
        recall = rec_num / rec_den if rec_den else None
        false_all = sum(c[1] + c[2] for c in self.by_kind.values())
        return {
            "overall": {"precision": precision, "recall": recall, "f1": _f1(precision, recall)},
            "by_fault": by_fault,
            "false_findings": false_all,
            "false_per_1000_port_hours": 1000 * false_all / self.port_hours if self.port_hours else None,
            "soak": {
                "port_hours": self.soak_port_hours,
                "false_findings": self.soak_false,
                "false_per_1000_port_hours": 1000 * self.soak_false / self.soak_port_hours
                if self.soak_port_hours
                else None,
            },
        }


def _f1(p: float | None, r: float | None) -> float | None:
    if p is None or r is None or p + r == 0:
        return None
    return 2 * p * r / (p + r)


def _p95(values: list[float]) -> float | None:
    if not values:
        return None
    v = sorted(values)
    return v[max(0, round(0.95 * len(v)) - 1)]


def run_scenario(
    sc: Scenario,
    table: ThresholdTable | None,
    tick: Callable[[int], None] | None = None,
    record: Callable[[list[Any]], None] | None = None,
) -> tuple[Report, Report]:
    """Simulate one scenario and score the detectors and the baseline on it, both fed the
    batches the scenario's variant gives (its sources' formats, read back by the collectors).
    ``record`` is given every finding the detectors made, in order."""
    topology = TopologySpec(hosts=sc.hosts, storage_nics=sc.storage_nics)
    sim = FabricSim(SimConfig(topology=topology, interval_s=sc.interval_s,
                              duration_s=sc.duration_s, seed=sc.seed, faults=sc.faults))  # fmt: skip
    variant = variant_of(sc.variant)
    port_view = PORT_VIEWS[variant.port](sim.fabric)
    nccl_view = NCCL_VIEWS[variant.nccl]()
    # The cables: the simulator's own view, or UFM's links list read back by its parser.
    link_view = None if variant.port == "rich" else UfmLinksView(sim.fabric)
    pipe = Pipeline(sim.fabric, default_detectors(sim.fabric, table))
    base = StaticRules(sim.fabric)
    found, base_found = [], []
    init_view = InitLogView() if sim.startup is not None else None
    try:
        for step in sim.run():
            ports = port_view.apply(step.port_sample)
            links = step.links if link_view is None or step.links is None else link_view.apply(step.links)
            if ports or links is not None:
                polled = pipe.process_poll(ports if links is None else [*ports, links])
                found += polled.findings
                if polled.port_rates is not None:  # the baseline reads the same joined rates
                    base_found += base.observe(polled.port_rates)
            nccl = nccl_view.apply(step.nccl_timing) if step.nccl_timing is not None else None
            if nccl is not None:
                found += pipe.process(nccl)
                base_found += base.observe(nccl)
            if step.nccl_transport is not None:
                found += pipe.process(step.nccl_transport)
            if step.nccl_proxy is not None:
                found += pipe.process(step.nccl_proxy)
            if step.gpu_paths is not None:
                found += pipe.process(step.gpu_paths)
            if init_view is not None and step.nccl_init_events is not None:
                init = init_view.apply(step.nccl_init_events, step.time, step.index * sc.interval_s)
                if init is not None:
                    found += pipe.process(init)
                layout = init_view.layout()
                if layout is not None:
                    found += pipe.process(layout)
            if step.ras_status is not None:  # each job's RAS report, read back as a nccl_ras source would
                ras = read_back(step.ras_status, sim.ras_names, step.time)
                if ras is not None:
                    found += pipe.process(ras)
            if tick:
                tick(1)
    finally:
        nccl_view.close()
        if init_view is not None:
            init_view.close()
    if record is not None:
        record(found)
    truth = truth_document(sim)
    blind = set(getattr(port_view, "blind_to", ())) | set(nccl_view.blind_to)
    reports = score(found, truth, pipe.kinds), score(base_found, truth, list(StaticRules.kinds))
    for rep in reports:
        for kind in blind & set(rep.by_fault):
            rep.by_fault[kind].covered = False
    return reports


def evaluate(
    scenarios: list[Scenario],
    table: ThresholdTable | None,
    progress: Callable[[int], None] | None = None,
    findings: TextIO | None = None,
) -> dict[str, Any]:
    """Scores per variant (``variants``); the top level is the first variant's (``rich``).
    ``findings`` gets every finding as a JSON line (:func:`finding_line`)."""
    totals: dict[str, tuple[Totals, Totals]] = {}
    runs = []
    for sc in scenarios:
        made: list[Any] = []
        rep, base = run_scenario(sc, table, progress, made.extend if findings is not None else None)
        if findings is not None:
            verdict = {id(f): why for f, why in rep.verdicts}
            for f in made:
                findings.write(json.dumps(finding_line(sc, f, verdict.get(id(f))), default=str) + "\n")
        soak = sc.name.startswith("soak")
        ours, baseline = totals.setdefault(sc.group, (Totals(), Totals()))
        ours.add(rep, soak)
        baseline.add(base, soak)
        hidden = sorted(k for k, f in rep.by_fault.items() if not f.covered)
        runs.append({"scenario": sc.name, "variant": sc.group, "hosts": sc.hosts, "polls": sc.polls,
                     "precision": rep.precision, "recall": rep.recall,
                     "baseline_precision": base.precision, "baseline_recall": base.recall,
                     "not_observable": hidden})  # fmt: skip
    variants: dict[str, Any] = {}
    for name, (ours, baseline) in totals.items():
        v = ours.summary()
        v["baseline"] = baseline.summary()
        v["not_observable"] = sorted({k for r in runs if r["variant"] == name for k in r["not_observable"]})
        variants[name] = v
    result = dict(next(iter(variants.values()))) if variants else {}
    result["variants"] = variants
    result["scenarios"] = runs
    result["ber_thresholds"] = "NVIDIA field table" if table else "generic PAM4 rule"
    return result


def finding_line(sc: Scenario, f: Any, verdict: str | None) -> dict[str, Any]:
    """One finding of one scenario, as ``graywire eval --findings`` writes it: where and when
    (seconds into the scenario), and for a firing one what the scoring made of it (``true``: at
    an injected fault; ``false``; ``benign``: at a benign event such as a driver reload)."""
    return {
        "scenario": sc.name, "variant": sc.group, "seed": sc.seed,
        "t_s": round((f.time - EPOCH).total_seconds(), 3), "kind": str(f.kind), "status": f.status,
        "entity": f.entity, "severity": str(f.severity), "node": f.node, "port": f.port, "link": f.link,
        "verdict": verdict, "summary": f.summary,
    }  # fmt: skip
