"""From open incidents to node verdicts: whose problem is it, the host's or the network's?

- A link-level incident (downgrade, flap, BER, PFC storm) names both ends of one cable: the
  host end's node gets a *link* verdict, and the switch end is remembered.
- A switch is blamed only when links to at least ``min_hosts_for_switch`` distinct hosts on
  it are bad (or its own inter-switch links are): then it is one *network* verdict, and those
  hosts get *network* verdicts that point at it instead of host verdicts (32 hosts behind a
  dead leaf are one network incident, not 32 drains).
- A host whose NCCL ranks run slow, with no bad link of its own, gets a *host* verdict; with a
  bad link on the NIC its slow rank uses, the link explains it (still a *link* verdict, with
  the NCCL evidence attached).
- A slow NCCL *path* (``nccl_path_slow``: one channel slow on the ranks of 3+ hosts behind one
  leaf, their other channels normal) is the leaf's *network* verdict; a host behind it whose
  only evidence is NCCL slowness points at that leaf instead of getting a host verdict.
- A slow NCCL *hop* (``nccl_hop_slow``: one ring connection's network wait, from the
  profiler's proxy steps) is the link or NIC pair between two ranks: both hosts get a
  *network* verdict naming their NIC, never a host verdict (and so never a drain by itself).
- A job-wide step-time slowdown names no node and makes no verdict.
- Congestion victims are watched, never drained: a host whose received packets are ECN-marked
  (an incast toward it), or whose switch port pauses it (a PFC storm spreading from a NIC on
  the same switch), gets an *info* verdict naming the culprit when one is known; so do its
  slow NCCL ranks when no bad link of its own explains them. The storming NIC (it sends the
  pauses) keeps its link verdict and may be drained; switch ports pausing the hosts behind a
  storming NIC never blame the switch.

``root_causes`` links incidents that share a cause, so the cause is paged and its effects fold
under it (see its docstring for the rules).

Pure: takes incident dicts (as the store returns them) and the fabric model.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal

from graywire.collectors.keys import label_of_key
from graywire.collectors.model import Fabric
from graywire.detectors.findings import SEVERITY_RANK, Kind, Severity

LINK_KINDS = frozenset(
    {
        Kind.SPEED_DOWNGRADE,
        Kind.WIDTH_DOWNGRADE,
        Kind.LINK_FLAP,
        Kind.BER_DEGRADATION,
        Kind.PFC_STORM,
        Kind.XMIT_WAIT_HOTSPOT,
    }
)
#: A port's stuck error counters: evidence about its cable, but a watch at most (a legacy
#: counter may have saturated long ago), never switch blame; info ones (xmit wait) no verdict.
SATURATION_KINDS = frozenset({Kind.COUNTER_SATURATED})
PATH_KINDS = frozenset({Kind.NCCL_PATH_SLOW})
NCCL_TIMING_KINDS = frozenset({Kind.NCCL_CHANNEL_SLOW})
HOP_KINDS = frozenset({Kind.NCCL_HOP_SLOW})

Side = Literal["host", "link", "network"]


@dataclass
class NodeVerdict:
    node: str
    role: str
    side: Side
    severity: str
    reasons: list[str] = field(default_factory=list)
    incident_ids: list[int] = field(default_factory=list)
    blamed_switch: str | None = None
    ports: list[str] = field(default_factory=list)
    #: A switch failing as a whole: links to ``min_hosts_for_switch`` of its hosts bad at once.
    #: A switch on the network side for one slow NCCL path is not (the drain engine raises a
    #: ``switch_failure`` only for these).
    whole_switch: bool = False

    def as_dict(self) -> dict[str, Any]:
        return {
            "node": self.node,
            "role": self.role,
            "side": self.side,
            "severity": self.severity,
            "reasons": self.reasons,
            "incident_ids": sorted(set(self.incident_ids)),
            "blamed_switch": self.blamed_switch,
            "ports": sorted(set(self.ports)),
            "whole_switch": self.whole_switch,
        }


def _pushed(inc: Mapping[str, Any]) -> bool:
    """From timings a job pushed (the least trusted input)."""
    return (inc.get("evidence") or {}).get("provenance") == "push"


def _worse(a: str, b: str) -> str:
    return a if SEVERITY_RANK.get(a, 0) >= SEVERITY_RANK.get(b, 0) else b


def node_verdicts(
    incidents: Iterable[Mapping[str, Any]], fabric: Fabric, min_hosts_for_switch: int = 3
) -> list[NodeVerdict]:
    """Verdicts for every node with an open incident, switches first, then hosts by name."""
    roles = dict(zip(fabric.node_names, fabric.node_roles, strict=True))
    key_index = fabric.key_index
    open_ = [i for i in incidents if i.get("status") in ("open", "acknowledged")]

    def switch_end(port: str | None) -> tuple[str | None, str | None]:
        """(switch node, host node) of the link a port is on."""
        if port is None or port not in key_index:
            return None, None
        i = key_index[port]
        p = int(fabric.peer[i])
        nodes = [fabric.node_of(i)] + ([fabric.node_of(p)] if p >= 0 else [])
        sw = next((n for n in nodes if roles.get(n) != "host"), None)
        host = next((n for n in nodes if roles.get(n) == "host"), None)
        return sw, host

    def sw_side(port: str | None) -> bool:
        """True for a port on a switch (the switch end of its link)."""
        return port in key_index and roles.get(fabric.node_of(key_index[port])) != "host"

    # Host NICs storming pauses, per switch: what a congestion victim behind that switch names.
    storm_from: dict[str, str] = {}
    for inc in sorted(open_, key=_rank):
        sw, host = switch_end(inc.get("port"))
        if inc["kind"] == Kind.PFC_STORM and sw and host and not sw_side(inc["port"]):
            storm_from.setdefault(sw, str(inc["port"]))

    def victim_of(port: str | None) -> str:
        sw, _ = switch_end(port)
        if sw and sw in storm_from:
            return f"a congestion victim: the culprit is the PFC storm from {storm_from[sw]}"
        return "a congestion victim: the culprit is an incast toward it or congestion further on"

    # Which hosts' links are bad, per switch; and switch-to-switch links.
    hosts_by_switch: dict[str, set[str]] = defaultdict(set)
    for inc in open_:
        if inc["kind"] not in LINK_KINDS:
            continue
        sw, host = switch_end(inc.get("port"))
        if inc["kind"] == Kind.PFC_STORM and sw in storm_from and sw_side(inc.get("port")):
            continue  # pausing the hosts behind a storming NIC: the NIC's fault, not the switch's
        if sw and host:
            hosts_by_switch[sw].add(host)
        elif sw:  # an inter-switch link: both switches carry it
            hosts_by_switch.setdefault(sw, set())
    blamed = {sw for sw, hosts in hosts_by_switch.items() if len(hosts) >= min_hosts_for_switch}
    # Slow NCCL paths: the leaf, and the hosts whose slow channels cross it. Timings a job pushed
    # never move collected evidence onto the network, nor blame a switch.
    open_ = [i for i in open_ if not (_pushed(i) and i["kind"] in PATH_KINDS)]
    path_of_host: dict[str, str] = {}
    for inc in open_:
        if inc["kind"] in PATH_KINDS and inc.get("node"):
            for h in (inc.get("evidence") or {}).get("hosts", []):
                path_of_host.setdefault(h, inc["node"])

    # Hosts that are congestion victims (marks or pauses toward them), and hosts with a bad
    # link of their own (which explains their slow ranks better than the congestion).
    congested, badly_linked = set(), set()
    for inc in open_:
        sw, host = switch_end(inc.get("port"))
        storm_toward = inc["kind"] == Kind.PFC_STORM and sw_side(inc.get("port"))
        victim = inc["kind"] == Kind.ECN_HOTSPOT or storm_toward
        if victim and (host or inc.get("node")):
            congested.add(host or inc.get("node"))
        elif inc["kind"] in LINK_KINDS and host:
            badly_linked.add(host)

    verdicts: dict[str, NodeVerdict] = {}

    def verdict(node: str, side: Side, severity: str) -> NodeVerdict:
        v = verdicts.get(node)
        if v is None:
            v = verdicts[node] = NodeVerdict(node, roles.get(node, "unknown"), side, severity)
        else:
            order = {"host": 0, "link": 1, "network": 2}
            if order[side] > order[v.side]:
                v.side = side
            v.severity = _worse(v.severity, severity)
        return v

    for sw in sorted(blamed):
        v = verdict(sw, "network", Severity.CRITICAL)
        v.whole_switch = True
        hosts = sorted(hosts_by_switch[sw])
        shown = ", ".join(hosts[:8]) + (", …" if len(hosts) > 8 else "")
        v.reasons.append(
            f"links to {len(hosts)} hosts on {sw} are bad at once ({shown}): the switch, not the hosts"
        )

    # Hops last: a slow hop is evidence about a NIC pair, and must not lift a host's own host or
    # link verdict onto the network (where it would never drain).
    ordered = [i for i in open_ if i["kind"] not in HOP_KINDS] + [i for i in open_ if i["kind"] in HOP_KINDS]
    for inc in ordered:
        kind, node, port = inc["kind"], inc.get("node"), inc.get("port")
        sev = inc.get("severity", Severity.WARNING)
        if kind in HOP_KINDS:
            ev = inc.get("evidence") or {}
            ends = ((ev.get("src_host"), ev.get("src_port")), (ev.get("dst_host"), ev.get("dst_port")))
            for host, nic in ends:
                if not host:
                    continue
                v = verdicts.get(host) or verdict(host, "network", sev)
                v.reasons.append(
                    f"{inc['summary']} (a hop between two NICs: the network side, not this host)"
                )
                v.incident_ids.append(inc["id"])
                if nic:
                    v.ports.append(nic)
            continue
        if not node:
            continue
        if kind in SATURATION_KINDS:
            if sev == Severity.INFO:
                continue
            _, host = switch_end(port)
            v = verdict(host or node, "link", Severity.INFO)
            v.reasons.append(f"{inc['summary']} (saturated counters: watched, not drained)")
            v.incident_ids.append(inc["id"])
            if port:
                v.ports.append(port)
            continue
        if kind in PATH_KINDS:
            v = verdict(node, "network", sev)
            v.reasons.append(
                f"{inc['summary']} (seen on the ranks of several hosts: the path, not the hosts)"
            )
        elif kind in NCCL_TIMING_KINDS and node in congested and node not in badly_linked:
            v = verdict(node, "host", Severity.INFO)
            v.reasons.append(f"{inc['summary']} (slow behind congestion toward it: watched, not drained)")
        elif kind in NCCL_TIMING_KINDS and node in path_of_host:
            v = verdict(node, "network", sev)
            v.blamed_switch = path_of_host[node]
            v.reasons.append(f"{inc['summary']} (behind {path_of_host[node]}, whose NCCL path is slow)")
        elif kind == Kind.PFC_STORM and port and sw_side(port) and switch_end(port)[0] not in blamed:
            # The switch pauses the host: the host is a victim of congestion further on.
            _, host = switch_end(port)
            v = verdict(host or node, "link", Severity.INFO)
            v.reasons.append(f"{inc['summary']} ({victim_of(port)}: watched, not drained)")
        elif kind in LINK_KINDS:
            sw, host = switch_end(port)
            if sw in blamed and host:
                v = verdict(host, "network", sev)
                v.blamed_switch = sw
                v.reasons.append(f"{inc['summary']} (one of many on {sw})")
                sw_v = verdicts[sw]
                sw_v.incident_ids.append(inc["id"])
            else:
                v = verdict(host or node, "link", sev)
                v.reasons.append(str(inc["summary"]))
        elif kind == Kind.ECN_HOTSPOT:
            # Marks on what a host receives: the queue toward it is congested, not the host.
            v = verdict(node, "host", Severity.INFO)
            v.reasons.append(f"{inc['summary']} ({victim_of(port)}: watched, not drained)")
        else:  # NCCL, outliers: evidence about the host itself
            v = verdict(node, "host", sev)
            v.reasons.append(str(inc["summary"]))
        v.incident_ids.append(inc["id"])
        if port:
            v.ports.append(port)
    # A host with both a bad link and slow NCCL ranks keeps the link verdict (the side only
    # moves host -> link -> network), with the NCCL evidence among its reasons.
    return sorted(verdicts.values(), key=lambda v: (v.role == "host", v.node))


# -- root causes ------------------------------------------------------------------------------
#: Link faults that slow the NCCL ranks whose NIC sits on the link.
LINK_CAUSE_KINDS = LINK_KINDS | {Kind.LINK_MISSING, Kind.CABLING_CHANGED}
#: NCCL slowness a bad link under a rank's NIC explains (a compute straggler arrives late on
#: its own; a transport fallback or a missing GPUDirect is how the job was wired).
NCCL_EFFECT_KINDS = frozenset({Kind.NCCL_CHANNEL_SLOW, Kind.NCCL_CHANNELS_REDUCED})
#: A rank that died, hangs or holds up its collective: the fault path's findings. A link
#: incident on the rank's NIC (else its host) that opened at most ``RANK_FAULT_WINDOW_S`` before
#: (or ``RANK_FAULT_SLACK_S`` after: a link detector confirming over two polls) explains it.
RANK_FAULT_KINDS = frozenset({Kind.NCCL_RANK_DEAD, Kind.NCCL_RANK_UNRESPONSIVE, Kind.NCCL_COLLECTIVE_STUCK})
RANK_FAULT_WINDOW_S = 300.0
RANK_FAULT_SLACK_S = 60.0
#: Fabric-side incidents a failing switch explains.
SWITCH_EFFECT_KINDS = LINK_CAUSE_KINDS | SATURATION_KINDS | PATH_KINDS | {Kind.ECN_HOTSPOT}


@dataclass(frozen=True, slots=True)
class Cause:
    """Why one incident is an effect of another: the cause is paged, the effect folds under it."""

    incident_id: int
    reason: str


def _utc(value: Any) -> datetime | None:
    """An incident time as an aware UTC datetime (the store's are UTC; naive ones are taken as
    UTC); None when it is not a time."""
    try:
        t = value if isinstance(value, datetime) else datetime.fromisoformat(str(value))
    except (TypeError, ValueError):
        return None
    return t.replace(tzinfo=UTC) if t.tzinfo is None else t.astimezone(UTC)


_UNDATED = datetime.max.replace(tzinfo=UTC)


def _rank(inc: Mapping[str, Any]) -> tuple[int, datetime, int]:
    """Worst first, then oldest, then lowest id: the one incident that stands for a place."""
    return (
        -SEVERITY_RANK.get(inc.get("severity", Severity.INFO), 0),
        _utc(inc.get("opened_at")) or _UNDATED,
        int(inc["id"]),
    )


def _lead_s(cause: Mapping[str, Any], effect: Mapping[str, Any]) -> float | None:
    """Seconds the cause opened before the effect (negative: after); None when either is undated."""
    ta, tb = _utc(cause.get("opened_at")), _utc(effect.get("opened_at"))
    return None if ta is None or tb is None else (tb - ta).total_seconds()


def root_causes(
    incidents: Iterable[Mapping[str, Any]], fabric: Fabric, switch_kinds: frozenset[str] = frozenset()
) -> dict[int, Cause]:
    """Effect incident id -> its root cause, over the active incidents.

    Rules (an effect is never more severe than its cause, which would hide the worse page):
    - a failing switch (an incident of ``switch_kinds`` on it) causes the link, saturation,
      NCCL path and ECN incidents on its ports or on links with an end on it, and those the
      drain policy counted for it (its evidence's ``incident_ids``);
    - a bad link (downgrade, flap, BER, PFC storm, xmit wait, missing or moved cable) causes
      the NCCL channel slowness of the ranks on its host-end NIC; a slow hop between two NICs,
      when either NIC's link is bad; and a job-wide step slowdown, when the job's slow ranks
      all trace to bad links (the worst of them);
    - the fault path: a dead or unresponsive rank, or a stuck collective naming one host, on a
      host whose NIC (the finding's port, else the host) had a link incident (down, missing,
      flapping, downgraded, BER...) open from ``RANK_FAULT_WINDOW_S`` before it to
      ``RANK_FAULT_SLACK_S`` after: the reason says how many seconds before;
    - congestion victims: an ECN hotspot, or a switch port pausing a host (a spreading PFC
      storm), behind the same switch as a host NIC storming pauses is that storm's effect;
    - causes are followed to the root, so a slow rank behind a link behind a failing switch
      folds under the switch.
    Timings a job pushed may fold under a collected cause (one page fewer), never be one: no
    NCCL kind is a cause.
    """
    active = [i for i in incidents if i.get("status", "open") in ("open", "acknowledged")]
    by_id = {int(i["id"]): i for i in active}
    key_index = fabric.key_index
    direct: dict[int, Cause] = {}

    def ends(port: str | None) -> tuple[int, int]:
        """(host-end port index, other end) of the link a port is on; -1 unknown."""
        i = key_index.get(port or "", -1)
        if i < 0:
            return -1, -1
        h = fabric.host_end(i)
        return (h, int(fabric.peer[i])) if h == i else (h, i)

    def link(effect: Mapping[str, Any], cause: Mapping[str, Any], reason: str) -> None:
        eid, cid = int(effect["id"]), int(cause["id"])
        if eid == cid or eid in direct:
            return
        if SEVERITY_RANK.get(effect.get("severity", Severity.INFO), 0) > SEVERITY_RANK.get(
            cause.get("severity", Severity.INFO), 0
        ):
            return
        direct[eid] = Cause(cid, reason)

    # A failing switch and what sits on it.
    switches = {i["entity"]: i for i in sorted(active, key=_rank) if i["kind"] in switch_kinds}
    for sw_inc in switches.values():
        for counted in (sw_inc.get("evidence") or {}).get("incident_ids") or []:
            if isinstance(counted, int) and counted in by_id:
                link(by_id[counted], sw_inc, f"one of the links {sw_inc['entity']} fails with")
    if switches:
        for inc in sorted(active, key=_rank):
            if inc["kind"] not in SWITCH_EFFECT_KINDS:
                continue
            nodes = {inc.get("node")}
            h, s = ends(inc.get("port"))
            nodes.update(fabric.node_of(x) for x in (h, s) if x >= 0)
            sw = next((n for n in sorted(nodes, key=str) if n in switches), None)
            if sw is not None:
                link(inc, switches[sw], f"on {sw}, which is failing as a whole")

    # Bad links, by their host-end NIC and by host.
    link_at: dict[str, Mapping[str, Any]] = {}
    link_on_host: dict[str, Mapping[str, Any]] = {}
    storms_on_switch: dict[str, Mapping[str, Any]] = {}
    for inc in sorted(active, key=_rank):
        if inc["kind"] not in LINK_CAUSE_KINDS and inc["kind"] != Kind.ECN_HOTSPOT:
            continue
        h, s = ends(inc.get("port"))
        if h < 0:
            continue
        link_at.setdefault(fabric.keys[h], inc)
        link_on_host.setdefault(fabric.node_of(h), inc)
        if inc["kind"] == Kind.PFC_STORM and inc.get("port") == fabric.keys[h] and s >= 0:
            storms_on_switch.setdefault(fabric.node_of(s), inc)  # the host NIC sends the pauses

    def link_behind(port: str | None, host: str | None) -> Mapping[str, Any] | None:
        """The bad link under a NIC; with no NIC named, the host's worst bad link."""
        if port:
            h, _ = ends(port)
            return link_at.get(fabric.keys[h]) if h >= 0 else None
        return link_on_host.get(host) if host else None

    slow_jobs: dict[str, list[int]] = defaultdict(list)
    for inc in sorted(active, key=_rank):
        kind, ev = inc["kind"], inc.get("evidence") or {}
        if kind in NCCL_EFFECT_KINDS:
            cause = link_behind(inc.get("port"), inc.get("node"))
            if cause is not None:
                what = "congested" if cause["kind"] == Kind.ECN_HOTSPOT else "on a bad link"
                link(inc, cause, f"its rank's NIC is {what} ({cause['summary']})")
                if ev.get("job") is not None:
                    slow_jobs[str(ev["job"])].append(int(cause["id"]))
            elif ev.get("job") is not None:
                slow_jobs[str(ev["job"])].append(-1)  # a slow rank no bad link explains
        elif kind in HOP_KINDS:
            for host_key, port_key in (("src_host", "src_port"), ("dst_host", "dst_port")):
                cause = link_behind(ev.get(port_key), ev.get(host_key))
                if cause is not None:
                    link(inc, cause, f"one end of the hop is on a bad link ({cause['summary']})")
                    break
        elif kind == Kind.ECN_HOTSPOT or (kind == Kind.PFC_STORM and inc.get("port")):
            h, s = ends(inc.get("port"))
            victim_side = kind == Kind.ECN_HOTSPOT or (s >= 0 and inc.get("port") == fabric.keys[s])
            storm = storms_on_switch.get(fabric.node_of(s)) if s >= 0 else None
            if victim_side and storm is not None:
                link(inc, storm, f"a congestion victim of the PFC storm from {storm['port']}")
    # The fault path: a rank that died or hangs on a host whose NIC's link failed just before.
    for inc in sorted(active, key=_rank):
        if inc["kind"] in RANK_FAULT_KINDS:
            cause = link_behind(inc.get("port"), inc.get("node"))
            lead = _lead_s(cause, inc) if cause is not None and cause["kind"] in LINK_CAUSE_KINDS else None
            if cause is not None and lead is not None and -RANK_FAULT_SLACK_S <= lead <= RANK_FAULT_WINDOW_S:
                nic = label_of_key(cause.get("port")) or "its NIC"
                when = f"{lead:.0f} s before" if lead >= 0 else f"{-lead:.0f} s after"
                link(inc, cause, f"its {nic} link failed {when} ({cause['summary']})")
    for inc in sorted(active, key=_rank):
        job = (inc.get("evidence") or {}).get("job")
        if inc["kind"] == Kind.NCCL_JOB_SLOWDOWN and job is not None and str(job) in slow_jobs:
            causes = slow_jobs[str(job)]
            if -1 not in causes:
                cause = min((by_id[c] for c in set(causes)), key=_rank)
                link(inc, cause, f"its slow ranks sit on bad links ({cause['summary']})")

    # Follow to the root; a cycle (none of the rules makes one) stops where it closes.
    out: dict[int, Cause] = {}
    for eid, cause in direct.items():
        seen = {eid}
        root = cause
        while root.incident_id in direct and root.incident_id not in seen:
            seen.add(root.incident_id)
            root = Cause(direct[root.incident_id].incident_id, root.reason)
        if root.incident_id != eid:
            out[eid] = root
    return out
