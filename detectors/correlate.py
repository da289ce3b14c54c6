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

Pure: takes incident dicts (as the store returns them) and the fabric model.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from graywire.collectors.model import Fabric
from graywire.detectors.findings import SEVERITY_RANK, Kind

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
    key_index = {k: i for i, k in enumerate(fabric.keys)}
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

    # Which hosts' links are bad, per switch; and switch-to-switch links.
    hosts_by_switch: dict[str, set[str]] = defaultdict(set)
    for inc in open_:
        if inc["kind"] not in LINK_KINDS:
            continue
        sw, host = switch_end(inc.get("port"))
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
        v = verdict(sw, "network", "critical")
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
        sev = inc.get("severity", "warning")
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
            if sev == "info":
                continue
            _, host = switch_end(port)
            v = verdict(host or node, "link", "info")
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
        elif kind in NCCL_TIMING_KINDS and node in path_of_host:
            v = verdict(node, "network", sev)
            v.blamed_switch = path_of_host[node]
            v.reasons.append(f"{inc['summary']} (behind {path_of_host[node]}, whose NCCL path is slow)")
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
        else:  # NCCL, ECN, outliers: evidence about the host itself
            v = verdict(node, "host", sev)
            v.reasons.append(str(inc["summary"]))
        v.incident_ids.append(inc["id"])
        if port:
            v.ports.append(port)
    # A host with both a bad link and slow NCCL ranks keeps the link verdict (the side only
    # moves host -> link -> network), with the NCCL evidence among its reasons.
    return sorted(verdicts.values(), key=lambda v: (v.role == "host", v.node))
