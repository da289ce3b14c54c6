"""Score detector findings against a simulation's ground truth.

A firing finding is *true* when it points at the place of a real fault (its port, the other end
of its link, or its node) while that fault is active (plus a grace period for windowed
detectors); a finding near a benign event is a *benign alarm* (the worst kind of false alarm:
on-call was paged for a checkpoint); anything else is *false*. A fault is *detected* when a
finding of a kind that names it arrives at its place; *localized* when the first finding of
that kind anywhere in the fault's window, leaving out those at other faults of its kind active
then, is at its place.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from graywire.fabricsim.faults import FAULT_KINDS


@dataclass
class FaultScore:
    kind: str
    total: int = 0
    detected: int = 0
    localized: int = 0
    with_candidates: int = 0
    delays_s: list[float] = field(default_factory=list)
    covered: bool = True

    def as_dict(self, interval_s: float) -> dict[str, Any]:
        d: dict[str, Any] = {"faults": self.total, "covered": self.covered}
        if not self.covered:
            return d
        d["detected"] = self.detected
        d["recall"] = self.detected / self.total if self.total else None
        d["localization_top1"] = self.localized / self.with_candidates if self.with_candidates else None
        if self.delays_s:
            med = statistics.median(self.delays_s)
            p95 = sorted(self.delays_s)[max(0, round(0.95 * len(self.delays_s)) - 1)]
            d |= {"delay_median_s": med, "delay_p95_s": p95,
                  "delay_median_polls": med / interval_s, "delay_p95_polls": p95 / interval_s}  # fmt: skip
        return d


@dataclass
class Report:
    by_fault: dict[str, FaultScore]
    true_findings: int
    false_findings: int
    benign_alarms: int
    false_examples: list[dict[str, Any]]
    port_hours: float
    interval_s: float
    #: finding kind -> [true, false, benign alarms], for per-fault-type precision
    by_kind: dict[str, list[int]] = field(default_factory=dict)
    #: Each firing finding scored, in order, with what it was: ``true``, ``false`` or ``benign``.
    verdicts: list[tuple[Any, str]] = field(default_factory=list)

    @property
    def precision(self) -> float | None:
        n = self.true_findings + self.false_findings + self.benign_alarms
        return self.true_findings / n if n else None

    @property
    def recall(self) -> float | None:
        covered = [s for s in self.by_fault.values() if s.covered]
        total = sum(s.total for s in covered)
        return sum(s.detected for s in covered) / total if total else None

    @property
    def f1(self) -> float | None:
        p, r = self.precision, self.recall
        if p is None or r is None or p + r == 0:
            return None
        return 2 * p * r / (p + r)

    def as_dict(self) -> dict[str, Any]:
        false = self.false_findings + self.benign_alarms
        return {
            "overall": {"precision": self.precision, "recall": self.recall, "f1": self.f1},
            "by_fault": {k: s.as_dict(self.interval_s) for k, s in sorted(self.by_fault.items())},
            "findings": {
                "true": self.true_findings,
                "false": self.false_findings,
                "benign_alarms": self.benign_alarms,
            },
            "false_per_1000_port_hours": 1000 * false / self.port_hours if self.port_hours else None,
            "false_examples": self.false_examples[:10],
        }


def _where(f: Any) -> set[str]:
    places = {p for p in (f.port, f.node, f.link) if p}
    if f.link:
        places.update(f.link.split("<->"))
    job = (getattr(f, "evidence", None) or {}).get("job")
    if not places and job:
        places.add(f"job:{job}")  # a job-wide finding names the job, not a node
    network = (getattr(f, "evidence", None) or {}).get("network")
    if not places and network:
        places.add(f"network:{network}")  # a network-wide finding (checkpoint traffic) names it
    return places


#: Places a fault's ``extra`` names that are part of it: a moved cable's new port and the cable
#: pulled to make room for it (which is missing until the moved one is plugged in); the switch a
#: PFC storm spreads over (its ports pausing their hosts are the storm's victims).
EXTRA_PLACES = ("to", "displaced", "spreads_to")


def _fault_places(fault: dict[str, Any]) -> set[str]:
    places = {p for p in (fault.get("port"), fault.get("peer"), fault.get("node")) if p}
    extra = fault.get("extra") or {}
    places.update(extra[k] for k in EXTRA_PLACES if extra.get(k))
    if extra.get("network"):
        places.add(f"network:{extra['network']}")  # a fault of a whole network (compute, storage)
    if fault.get("job"):
        places.add(f"job:{fault['job']}")  # an NCCL fault slows its job: a job-wide finding is true
    return places


def score(
    findings: Iterable[Any],
    truth: dict[str, Any],
    detectable_kinds: Sequence[str],
    grace_s: float | None = None,
) -> Report:
    """Score firing findings (objects with kind, status, time, node, port, link) against truth."""
    interval = float(truth["interval_s"])
    start = datetime.fromisoformat(truth["start"])
    grace = grace_s if grace_s is not None else max(60.0, 6 * interval)
    faults = truth["faults"]
    real = [f for f in faults if not f.get("benign")]
    benign = [f for f in faults if f.get("benign")]
    firing = [f for f in findings if f.status == "firing"]

    def rel(f: Any) -> float:
        return (f.time - start).total_seconds()

    def near(fault: dict[str, Any], t: float, lead: float = 0.0) -> bool:
        end = fault["end_s"]
        if fault["kind"] == "counter_wrap":
            end = float(truth["duration_s"])  # a 32-bit device stays 32-bit
        return fault["start_s"] - lead <= t <= end + grace

    by_fault: dict[str, FaultScore] = {}
    for k in FAULT_KINDS:
        covered = any(kind in detectable_kinds for kind in FAULT_KINDS[k])
        by_fault[k] = FaultScore(k, covered=covered)
    for fault in real:
        s = by_fault[fault["kind"]]
        s.total += 1
        if not s.covered:
            continue
        kinds = FAULT_KINDS[fault["kind"]]
        places = _fault_places(fault)
        in_window = sorted((f for f in firing if f.kind in kinds and near(fault, rel(f))), key=rel)
        hits = [f for f in in_window if _where(f) & places]
        if hits:
            s.detected += 1
            s.delays_s.append(max(0.0, rel(hits[0]) - fault["start_s"]))
        # A finding at another fault of the same kind, active then, is that fault's: it says
        # nothing about where this one was placed (two hosts with the same fault at once).
        twins = [x for x in real if x is not fault and x["kind"] == fault["kind"]]
        candidates = [
            f for f in in_window
            if _where(f) & places or not any(_where(f) & _fault_places(x) and near(x, rel(f)) for x in twins)
        ]  # fmt: skip
        if candidates:
            s.with_candidates += 1
            s.localized += bool(_where(candidates[0]) & places)

    true = false = benign_alarms = 0
    examples: list[dict[str, Any]] = []
    by_kind: dict[str, list[int]] = {}
    verdicts: list[tuple[Any, str]] = []
    for f in firing:
        t, where = rel(f), _where(f)
        counts = by_kind.setdefault(f.kind, [0, 0, 0])
        if any(where & _fault_places(x) and near(x, t, interval) for x in real):
            true += 1
            counts[0] += 1
            verdicts.append((f, "true"))
            continue
        if any((x.get("node") == "*" or where & _fault_places(x)) and near(x, t, interval) for x in benign):
            benign_alarms += 1
            counts[2] += 1
            why = "benign"
        else:
            false += 1
            counts[1] += 1
            why = "false"
        verdicts.append((f, why))
        examples.append({"kind": f.kind, "entity": f.entity, "time": f.time.isoformat(), "why": why})
    port_hours = float(truth.get("ports", 0)) * float(truth["duration_s"]) / 3600
    return Report(by_fault, true, false, benign_alarms, examples, port_hours, interval, by_kind, verdicts)
