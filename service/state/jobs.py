"""A job's findings together: its active incidents by phase of its life, and the fabric under it.

Pure: given the active incidents (the store's rows, with ``effects``) and what the fabric model
says of node roles, it groups; :mod:`graywire.service.api.jobs` does the reading. The rules:

- **The job of an incident** is :func:`graywire.detectors.findings.job_of` (the rule alert
  labels use, for every job-phase kind: ``evidence.job``, or the entity of a job-wide slowdown;
  ``uplink_imbalance`` names the job behind the leaf).
- **A job's hosts** are the hosts its own incidents name (their ``node``, ``evidence.host`` and
  ``evidence.hosts``: names only, a count is not a host, less the switches: an uplink finding's
  node is its leaf), and the hosts its NCCL timings came from lately (``job_hosts``, kept by
  the fabric state from every poll).
- **Per-host findings join a job through its hosts**: a data-path finding without a job
  (``gpu_nic_affinity`` is per GPU of a host) is the job's when its node is one of the job's
  hosts; a fabric finding (link and port kinds) is "the fabric under the job" when its node, its
  port's node or either end of its link is.
- A kind with no phase (the drain policy's own incidents, a kind this build does not know) and
  a fleet-wide finding that names neither job nor host (``checkpoint_on_compute``) join no job:
  nothing is placed on a guess.

Within a phase, incidents are listed worst first, then oldest first, as on the status page.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from graywire.collectors.keys import keys_named, node_of_key
from graywire.detectors.findings import JOB_PHASES, PHASE, SEVERITY_RANK, Phase, job_of

#: What a job's view shows of each incident (the row has more; ``/api/v1/incidents/{id}`` has it all).
INCIDENT_FIELDS = (
    "id", "kind", "entity", "status", "severity", "summary", "node", "port", "link",
    "opened_at", "last_seen_at", "caused_by", "cause_reason", "effects",
)  # fmt: skip
#: Each phase's words, for the API and the page.
PHASE_LABEL: dict[Phase, str] = {
    Phase.START_UP: "start-up",
    Phase.DATA_PATH: "data path",
    Phase.STEADY_STATE: "steady state",
    Phase.FAULT_PATH: "fault path",
    Phase.FABRIC: "fabric under the job",
}


def incident_job(incident: Mapping[str, Any]) -> str | None:
    """The job an incident itself names, or None (see the module's rules)."""
    evidence = incident.get("evidence")
    return job_of(
        str(incident.get("kind")),
        str(incident.get("entity") or ""),
        evidence if isinstance(evidence, Mapping) else None,
    )


def _is_host(name: str, roles: Mapping[str, str]) -> bool:
    # A node the model does not know is taken as a host: pushed and file sources name hosts
    # the ingest checks already admitted; a known switch never is one.
    return roles.get(name, "host") == "host"


def _named_hosts(incident: Mapping[str, Any], roles: Mapping[str, str]) -> set[str]:
    evidence = incident.get("evidence") or {}
    names: set[str] = set()
    if isinstance(incident.get("node"), str) and incident["node"]:
        names.add(incident["node"])
    if isinstance(evidence, Mapping):
        if isinstance(evidence.get("host"), str) and evidence["host"]:
            names.add(evidence["host"])
        hosts = evidence.get("hosts")
        if isinstance(hosts, list | tuple):
            names.update(h for h in hosts if isinstance(h, str) and h)
    return {n for n in names if _is_host(n, roles)}


def _where(incident: Mapping[str, Any]) -> set[str]:
    """The nodes a per-host incident is on: its node, its port's node, either end of its link."""
    where = {incident.get("node"), node_of_key(incident.get("port"))}
    link = incident.get("link")
    if isinstance(link, str):
        where.update(node_of_key(end) for end in keys_named(link))
    return {w for w in where if isinstance(w, str) and w}


def _order(incident: Mapping[str, Any]) -> tuple[int, str, int]:
    return (
        -SEVERITY_RANK.get(str(incident.get("severity")), 0),
        str(incident.get("opened_at")),
        int(incident["id"]),
    )


def _brief(incident: Mapping[str, Any]) -> dict[str, Any]:
    out = {k: incident.get(k) for k in INCIDENT_FIELDS}
    out["effects"] = list(incident.get("effects") or [])
    return out


@dataclass(slots=True)
class JobView:
    """One job's active incidents: by phase of its life, and the fabric under its hosts."""

    job: str
    hosts: list[str]
    phases: dict[Phase, list[dict[str, Any]]] = field(default_factory=dict)

    @property
    def incidents(self) -> list[dict[str, Any]]:
        return [i for p in (*JOB_PHASES, Phase.FABRIC) for i in self.phases.get(p, [])]

    @property
    def worst_severity(self) -> str:
        return max((str(i["severity"]) for i in self.incidents), key=lambda s: SEVERITY_RANK.get(s, -1))

    def summary(self) -> dict[str, Any]:
        """The job's line in ``/api/v1/jobs``: hosts, counts by phase, worst severity."""
        return {
            "job": self.job,
            "hosts": self.hosts,
            "counts": {p.value: len(self.phases.get(p, [])) for p in (*JOB_PHASES, Phase.FABRIC)},
            "incident_count": len(self.incidents),
            "worst_severity": self.worst_severity,
        }

    def detail(self) -> dict[str, Any]:
        """``/api/v1/jobs/{job}``: every phase in life order (an empty one too: nothing found
        there is an answer), then the fabric under the job."""
        return {
            **self.summary(),
            "phases": [
                {
                    "phase": p.value,
                    "label": PHASE_LABEL[p],
                    "incidents": [_brief(i) for i in self.phases.get(p, [])],
                }
                for p in JOB_PHASES
            ],
            "fabric": [_brief(i) for i in self.phases.get(Phase.FABRIC, [])],
        }


def job_views(
    incidents: Iterable[Mapping[str, Any]],
    roles: Mapping[str, str] | None = None,
    job_hosts: Mapping[str, Iterable[str]] | None = None,
) -> list[JobView]:
    """Every job with a finding, worst first, then by name.

    ``incidents`` are the active ones (open and acknowledged); ``roles`` maps node names to
    their role in the fabric model (nothing given: every node counts as a host); ``job_hosts``
    are the hosts each job's NCCL timings came from lately (``FabricState.job_hosts``): a
    per-host finding there is the job's too, though no incident of the job names that host.
    """
    roles = roles or {}
    job_hosts = job_hosts or {}
    own: dict[str, list[Mapping[str, Any]]] = {}
    by_host: dict[str, list[Mapping[str, Any]]] = {}  # per-host incidents naming no job
    for inc in incidents:
        job = incident_job(inc)
        if job is not None:
            own.setdefault(job, []).append(inc)
        elif PHASE.get(str(inc["kind"])) in (Phase.DATA_PATH, Phase.FABRIC):
            for host in _where(inc):
                by_host.setdefault(host, []).append(inc)
    views = []
    running = {j: set(hs) for j, hs in job_hosts.items()}
    jobs = set(own) | {j for j, hs in running.items() if hs & by_host.keys()}
    for job in jobs:
        mine = own.get(job, [])
        hosts = set().union(*(_named_hosts(i, roles) for i in mine)) | running.get(job, set())
        placed: dict[Phase, dict[int, Mapping[str, Any]]] = {}
        for inc in [*mine, *(i for h in hosts for i in by_host.get(h, []))]:
            phase = PHASE.get(str(inc["kind"]))
            if phase is not None:
                placed.setdefault(phase, {})[int(inc["id"])] = inc
        phases = {p: [dict(i) for i in sorted(v.values(), key=_order)] for p, v in placed.items()}
        if any(phases.get(p) for p in JOB_PHASES):
            views.append(JobView(job=job, hosts=sorted(hosts), phases=phases))
    return sorted(views, key=lambda v: (-SEVERITY_RANK.get(v.worst_severity, -1), v.job))
