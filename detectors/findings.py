"""What a detector says: a finding opens (``firing``) or closes (``cleared``) on one entity."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Any, Literal


class Severity(StrEnum):
    """How bad, ordered: ``Severity.INFO < Severity.WARNING < Severity.CRITICAL``.

    A ``StrEnum``: each member is its plain string too, so stored rows, JSON and config files
    carry ``"critical"`` and compare equal to it.
    """

    INFO = "info"
    WARNING = "warning"
    CRITICAL = "critical"

    @property
    def rank(self) -> int:
        return SEVERITY_RANK[self]

    def __lt__(self, other: object) -> bool:
        return self.rank < Severity(other).rank

    def __le__(self, other: object) -> bool:
        return self.rank <= Severity(other).rank

    def __gt__(self, other: object) -> bool:
        return self.rank > Severity(other).rank

    def __ge__(self, other: object) -> bool:
        return self.rank >= Severity(other).rank


#: Every severity as plain text, least to most: a severity's index is its rank.
SEVERITIES: tuple[str, ...] = tuple(s.value for s in Severity)
SEVERITY_RANK: dict[str, int] = {name: rank for rank, name in enumerate(SEVERITIES)}
Status = Literal["firing", "cleared"]


class Kind(StrEnum):
    """Every finding kind a detector emits: the names incidents, alerts and the drain policy key on."""

    SPEED_DOWNGRADE = "speed_downgrade"
    WIDTH_DOWNGRADE = "width_downgrade"
    LINK_FLAP = "link_flap"
    BER_DEGRADATION = "ber_degradation"
    PFC_STORM = "pfc_storm"
    ECN_HOTSPOT = "ecn_hotspot"
    XMIT_WAIT_HOTSPOT = "xmit_wait_hotspot"
    COUNTER_SATURATED = "counter_saturated"
    PORT_ANOMALY = "port_anomaly"
    NCCL_CHANNEL_SLOW = "nccl_channel_slow"
    NCCL_PATH_SLOW = "nccl_path_slow"
    NCCL_HOP_SLOW = "nccl_hop_slow"
    NCCL_STRAGGLER = "nccl_straggler"
    NCCL_JOB_SLOWDOWN = "nccl_job_slowdown"
    NCCL_TRANSPORT_FALLBACK = "nccl_transport_fallback"
    NCCL_GDRDMA_MISSING = "nccl_gdrdma_missing"
    NCCL_CHANNELS_REDUCED = "nccl_channels_reduced"
    LINK_MISSING = "link_missing"
    CABLING_CHANGED = "cabling_changed"
    LINK_UNEXPECTED = "link_unexpected"
    RAIL_MISCABLED = "rail_miscabled"
    # The fault path: NCCL RAS, Flight Recorder and the watchdog.
    NCCL_RANK_DEAD = "nccl_rank_dead"
    NCCL_RANK_UNRESPONSIVE = "nccl_rank_unresponsive"
    NCCL_COLLECTIVE_STUCK = "nccl_collective_stuck"
    GPU_NIC_AFFINITY = "gpu_nic_affinity"
    CHECKPOINT_ON_COMPUTE = "checkpoint_on_compute"
    UPLINK_IMBALANCE = "uplink_imbalance"
    # Start-up (detectors/nccl_bootstrap.py)
    NCCL_BOOTSTRAP_STALL = "nccl_bootstrap_stall"
    NCCL_INIT_SLOW = "nccl_init_slow"
    # Start-up: a host's NCCL topology probe against its peers' (detectors/nccl_topology.py)
    NCCL_TOPOLOGY_MISMATCH = "nccl_topology_mismatch"
    # The drain engine's own (service/drain_engine.py), from the verdicts, not from a detector:
    # a switch failing as a whole, and the circuit breaker that stops new drains.
    SWITCH_FAILURE = "switch_failure"
    DRAIN_CIRCUIT_BREAKER = "drain_circuit_breaker"


class Phase(StrEnum):
    """Where in a training job's life a finding kind belongs, or ``fabric`` for a link or port
    kind that is about the fabric whatever runs on it (docs/phases/)."""

    START_UP = "start_up"
    DATA_PATH = "data_path"
    STEADY_STATE = "steady_state"
    FAULT_PATH = "fault_path"
    FABRIC = "fabric"


#: A job's phases in the order of its life: how a job's findings are listed.
JOB_PHASES: tuple[Phase, ...] = (Phase.START_UP, Phase.DATA_PATH, Phase.STEADY_STATE, Phase.FAULT_PATH)
#: The phase of every finding kind: the one home the API and the status page group by. A new
#: kind needs its line here (tests/detectors/test_findings.py checks every Kind has one).
PHASE: dict[str, Phase] = {
    Kind.SPEED_DOWNGRADE: Phase.FABRIC,
    Kind.WIDTH_DOWNGRADE: Phase.FABRIC,
    Kind.LINK_FLAP: Phase.FABRIC,
    Kind.BER_DEGRADATION: Phase.FABRIC,
    Kind.PFC_STORM: Phase.FABRIC,
    Kind.ECN_HOTSPOT: Phase.FABRIC,
    Kind.XMIT_WAIT_HOTSPOT: Phase.FABRIC,
    Kind.COUNTER_SATURATED: Phase.FABRIC,
    Kind.PORT_ANOMALY: Phase.FABRIC,
    Kind.LINK_MISSING: Phase.FABRIC,
    Kind.CABLING_CHANGED: Phase.FABRIC,
    Kind.LINK_UNEXPECTED: Phase.FABRIC,
    Kind.RAIL_MISCABLED: Phase.FABRIC,
    Kind.NCCL_BOOTSTRAP_STALL: Phase.START_UP,
    Kind.NCCL_INIT_SLOW: Phase.START_UP,
    Kind.NCCL_TOPOLOGY_MISMATCH: Phase.START_UP,
    Kind.GPU_NIC_AFFINITY: Phase.DATA_PATH,
    Kind.NCCL_TRANSPORT_FALLBACK: Phase.DATA_PATH,
    Kind.NCCL_GDRDMA_MISSING: Phase.DATA_PATH,
    Kind.NCCL_CHANNELS_REDUCED: Phase.DATA_PATH,
    Kind.NCCL_CHANNEL_SLOW: Phase.STEADY_STATE,
    Kind.NCCL_STRAGGLER: Phase.STEADY_STATE,
    Kind.NCCL_JOB_SLOWDOWN: Phase.STEADY_STATE,
    Kind.NCCL_HOP_SLOW: Phase.STEADY_STATE,
    Kind.NCCL_PATH_SLOW: Phase.STEADY_STATE,
    Kind.UPLINK_IMBALANCE: Phase.STEADY_STATE,
    Kind.CHECKPOINT_ON_COMPUTE: Phase.STEADY_STATE,
    Kind.NCCL_RANK_DEAD: Phase.FAULT_PATH,
    Kind.NCCL_RANK_UNRESPONSIVE: Phase.FAULT_PATH,
    Kind.NCCL_COLLECTIVE_STUCK: Phase.FAULT_PATH,
    Kind.SWITCH_FAILURE: Phase.FABRIC,
    Kind.DRAIN_CIRCUIT_BREAKER: Phase.FABRIC,
}

#: Kinds of a job's life (every phase but the fabric under it): a finding of one names its job
#: (:func:`job_of`): the alerts' ``job`` label, the jobs API.
JOB_KINDS = frozenset(str(k) for k, phase in PHASE.items() if phase != Phase.FABRIC)


def job_of(kind: str, entity: str, evidence: Mapping[str, Any] | None) -> str | None:
    """The job of a job-scoped incident: its evidence's ``job`` (NCCL channel, straggler and
    transport findings carry it), else the entity of a job-wide slowdown (which is the job)."""
    if kind not in JOB_KINDS:
        return None
    job = (evidence or {}).get("job")
    if job is not None and str(job):
        return str(job)
    return entity if kind == Kind.NCCL_JOB_SLOWDOWN and entity else None


#: A port's health from the worst open incident on it: 0 ok, 1 warning, 2 critical. Any open
#: incident marks its port, an ``info`` one too (something is open there). The one rule that
#: ``/metrics``, ``/api/v1/ports`` and the status page all use.
PORT_HEALTH: dict[str, int] = {Severity.INFO: 1, Severity.WARNING: 1, Severity.CRITICAL: 2}


@dataclass(frozen=True, slots=True)
class Finding:
    """One decision of one detector about one entity at one time.

    ``entity`` is the deduplication key (with ``kind``): the same gray failure seen on later
    polls keeps the same entity, so it rolls up into one incident. ``node`` and ``port`` say
    where to look (the host to drain, the NIC to reseat); ``evidence`` holds the numbers a
    person needs to believe it: raw values, expected vs actual, peer baseline, score.
    """

    kind: str
    entity: str
    status: Status
    time: datetime
    severity: Severity
    summary: str
    detector: str
    node: str | None = None
    port: str | None = None
    link: str | None = None
    score: float = 0.0
    confidence: float = 1.0
    evidence: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["time"] = self.time.isoformat()
        return d
