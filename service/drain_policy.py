"""The drain policy: node verdicts in, one recommendation per host out (drain, watch or none).

Pure: no clock, no database. The engine (``graywire.service.drain_engine``) feeds it the open
incidents, the current recommendations, the exclude list and the circuit breaker's state, and
writes back what it returns, with an audit row for every change.

Rules, in the order they apply to a host:

- Only hosts are drained. A host behind a switch that is blamed (links to 3 or more of its
  hosts bad at once) is not drained: the switch is one *network* incident, not 32 drains.
- A host or link verdict at or above ``min_severity`` wants a drain; below it, a watch.
- Timings a job pushed (evidence ``provenance`` ``push``) never drain a host, nor keep one
  drained: pushed data names hosts and times graywire cannot check. A verdict drains only when
  the incidents graywire collected itself reach ``min_severity``; else it is watched. Unless
  ``trust_pushed``.
- An excluded node is never drained: it is watched instead, and a drain in place is lifted.
- A drained node stays drained while it has any verdict, and until it has had none for
  ``clean_window``.
- A node that returned to service is not drained again within ``cooldown``; it is watched.
- New drains are capped: at most ``max_fraction`` of the hosts within ``window`` (the
  circuit breaker). The first node over the cap trips the breaker; while it is tripped no
  new drain is made (held nodes are watched and say why) until an operator resets it.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any, Literal

from graywire.detectors.correlate import NodeVerdict
from graywire.detectors.findings import SEVERITY_RANK, Severity

Action = Literal["drain", "watch", "none"]
#: What changed for a node, as written to the audit log (``None``: nothing changed).
Event = Literal["drain", "watch", "hold", "return_to_service", "clear", "lift_excluded"]


@dataclass(frozen=True, slots=True)
class DrainPolicy:
    """Drain settings, as the operator configured them."""

    shadow: bool = False
    max_fraction: float = 0.10
    window: timedelta = timedelta(minutes=10)
    clean_window: timedelta = timedelta(minutes=10)
    cooldown: timedelta = timedelta(minutes=30)
    min_severity: Severity = Severity.WARNING
    trust_pushed: bool = False
    #: The cap never goes below this many nodes (one drain on a small cluster is no storm)...
    min_nodes: int = 2
    #: ...nor above this many, when set (a fraction of a huge fleet can still be too many).
    max_nodes: int | None = None

    def cap(self, hosts: int) -> int:
        """New drains allowed per window: ``max(min_nodes, max_fraction × hosts)``, at most
        ``max_nodes``; never less than one."""
        cap = max(self.min_nodes, math.floor(self.max_fraction * hosts + 1e-9))
        if self.max_nodes is not None:
            cap = min(cap, self.max_nodes)
        return max(1, cap)


@dataclass(frozen=True, slots=True)
class Current:
    """A node's recommendation as stored before this run."""

    node: str
    action: Action
    since: datetime
    reason: str
    incident_ids: tuple[int, ...] = ()
    clean_since: datetime | None = None
    released_at: datetime | None = None
    #: Decided in shadow mode: recommended only, never acted on.
    shadow: bool = False


@dataclass(frozen=True, slots=True)
class Breaker:
    """The circuit breaker as stored: tripped or not, and drains made inside the window."""

    tripped: bool
    since: datetime | None
    recent_drains: int
    message: str = ""


@dataclass(slots=True)
class Decision:
    node: str
    action: Action
    reason: str
    since: datetime
    incident_ids: list[int]
    evidence: dict[str, Any]
    clean_since: datetime | None = None
    released_at: datetime | None = None
    event: Event | None = None


@dataclass(slots=True)
class PolicyResult:
    decisions: list[Decision] = field(default_factory=list)
    tripped_now: bool = False
    breaker_message: str = ""
    recent_drains: int = 0
    cap: int = 0
    #: Blamed switches: {switch: (hosts behind it, incident ids)}, one network incident each.
    network: dict[str, tuple[list[str], list[int]]] = field(default_factory=dict)


def _iso(t: datetime) -> str:
    return t.isoformat()


def _since(ids: Iterable[int], incidents: Mapping[int, Mapping[str, Any]], now: datetime) -> datetime:
    times = [incidents[i]["opened_at"] for i in ids if i in incidents]
    parsed = [datetime.fromisoformat(t) if isinstance(t, str) else t for t in times if t]
    return min(parsed) if parsed else now


def _is_pushed(incident: Mapping[str, Any]) -> bool:
    return (incident.get("evidence") or {}).get("provenance") == "push"


def _pushed_only(v: NodeVerdict, incidents: Mapping[int, Mapping[str, Any]]) -> bool:
    """Every incident behind the verdict comes from timings a job pushed."""
    found = [incidents[i] for i in v.incident_ids if i in incidents]
    return bool(found) and all(_is_pushed(i) for i in found)


def _collected_severity(v: NodeVerdict, incidents: Mapping[int, Mapping[str, Any]]) -> int:
    """The worst severity rank among the verdict's incidents that graywire collected itself
    (-1 with none). A verdict whose own severity came from a pushed incident is not a drain."""
    ranks = [
        SEVERITY_RANK.get(str(incidents[i].get("severity", v.severity)), 0)
        for i in v.incident_ids
        if i in incidents and not _is_pushed(incidents[i])
    ]
    if not ranks and not _pushed_only(v, incidents):
        return SEVERITY_RANK.get(v.severity, 0)  # no incident rows behind it (e.g. a blamed switch)
    return max(ranks, default=-1)


#: A drained node's reason while its clean window runs, around the reason it was drained for.
CLEAN_PREFIX, WAS = "no longer failing since ", " (was: "


def _first_reason(reason: str) -> str:
    """The reason a node was drained for, out of a clean-window reason written by an earlier
    run: each run restates the window, and must not wrap the last run's sentence again."""
    if reason.startswith(CLEAN_PREFIX) and WAS in reason and reason.endswith(")"):
        return reason.split(WAS, 1)[1][:-1]
    return reason


def decide(
    verdicts: Iterable[NodeVerdict],
    incidents: Mapping[int, Mapping[str, Any]],
    current: Mapping[str, Current],
    excluded: Mapping[str, str],
    breaker: Breaker,
    hosts: int,
    policy: DrainPolicy,
    now: datetime,
) -> PolicyResult:
    """One policy run. ``excluded`` maps node -> a sentence saying who excluded it and why.

    Returns a decision for every node whose recommendation exists or changes; unchanged
    rows come back with ``event`` None (their reason and incident list may still refresh).
    """
    out = PolicyResult(cap=policy.cap(hosts), recent_drains=breaker.recent_drains)
    tripped = breaker.tripped
    min_rank = SEVERITY_RANK.get(policy.min_severity, 1)
    wanted: dict[str, tuple[Action, NodeVerdict]] = {}
    push_held: set[str] = set()  # would drain, but on pushed timings alone
    for v in verdicts:
        if v.role != "host":
            if v.whole_switch:  # not a switch on the network side of one slow NCCL path
                hosts_behind = sorted(
                    {
                        str(incidents[i].get("node"))
                        for i in v.incident_ids
                        if i in incidents and incidents[i].get("node")
                    }
                )
                out.network[v.node] = (hosts_behind, sorted(set(v.incident_ids)))
            continue
        if v.side == "network":
            wanted[v.node] = ("none", v)
        elif SEVERITY_RANK.get(v.severity, 0) >= min_rank:
            # Pushed timings never raise a host to a drain: the verdict drains only when the
            # incidents graywire collected itself reach min_severity on their own.
            collected = _collected_severity(v, incidents)
            if not policy.trust_pushed and collected < min_rank:
                push_held.add(v.node)
                wanted[v.node] = ("watch", v)
            else:
                wanted[v.node] = ("drain", v)
        else:
            wanted[v.node] = ("watch", v)

    def evidence(v: NodeVerdict | None) -> dict[str, Any]:
        if v is None:
            return {}
        return {
            "verdict": v.as_dict(),
            "incidents": [dict(incidents[i]) for i in v.incident_ids if i in incidents],
        }

    candidates: list[tuple[NodeVerdict, Current | None]] = []
    for node in sorted(set(wanted) | set(current)):
        want, v = wanted.get(node, ("none", None))
        cur = current.get(node)
        if cur is not None and cur.action == "drain" and cur.shadow and not policy.shadow:
            # Shadow mode has ended: a drain it only recommended was never made. Going live it
            # is a new drain like any other, capped by the breaker, or it would be a drain
            # storm of everything shadow mode piled up over many windows.
            cur = replace(cur, action="watch")
        reason = "; ".join(v.reasons) if v is not None else ""
        ids = sorted(set(v.incident_ids)) if v is not None else []
        since = _since(ids, incidents, now)
        if node in excluded and want == "drain":
            want = "watch"
            reason = f"excluded from drains ({excluded[node]}); would drain: {reason}"
        if node in push_held:
            reason = (
                "pushed timings only, not corroborated by data graywire collected itself: watch, not drain "
                f"(drain.trust_pushed: true lets them drain): {reason}"
            )
        if v is not None and v.side == "network" and v.blamed_switch:
            reason = f"behind {v.blamed_switch}, which is failing as a whole (a network incident): {reason}"

        if cur is not None and cur.action == "drain":
            if node in excluded:
                if want != "watch" or not reason.startswith("excluded"):
                    lifted = f"excluded from drains ({excluded[node]}): drain lifted"
                    reason = f"{lifted}; {reason}" if reason else lifted
                out.decisions.append(
                    Decision(node, "watch", reason, cur.since, ids, evidence(v), None, now, "lift_excluded")
                )
            elif v is not None and (policy.trust_pushed or not _pushed_only(v, incidents)):
                # still failing (whatever the side): stays drained; pushed timings alone do not
                # keep a node drained any more than they drain it
                out.decisions.append(
                    Decision(node, "drain", reason, cur.since, ids, evidence(v), None, cur.released_at)
                )
            else:
                clean = cur.clean_since or now
                back_at = clean + policy.clean_window
                if now >= back_at:
                    why = (
                        f"clean since {_iso(clean)} ({policy.clean_window} clean window): returned to service"
                    )
                    out.decisions.append(
                        Decision(node, "none", why, now, [], {}, None, now, "return_to_service")
                    )
                else:
                    why = (
                        f"{CLEAN_PREFIX}{_iso(clean)}; stays drained until its clean window "
                        f"ends at {_iso(back_at)}{WAS}{_first_reason(cur.reason)})"
                    )
                    out.decisions.append(
                        Decision(
                            node, "drain", why, cur.since, list(cur.incident_ids), {}, clean, cur.released_at
                        )
                    )
            continue

        if want == "drain":
            if cur is not None and cur.released_at is not None and now < cur.released_at + policy.cooldown:
                until = cur.released_at + policy.cooldown
                why = (
                    f"returned to service at {_iso(cur.released_at)}; in cooldown until {_iso(until)}: "
                    f"{reason}"
                )
                event: Event | None = "watch" if cur.action != "watch" else None
                out.decisions.append(
                    Decision(node, "watch", why, since, ids, evidence(v), None, cur.released_at, event)
                )
            else:
                assert v is not None
                candidates.append((v, cur))
            continue
        if want == "watch":
            event = "watch" if cur is None or cur.action != "watch" or cur.shadow != policy.shadow else None
            released = cur.released_at if cur is not None else None
            out.decisions.append(
                Decision(node, "watch", reason, since, ids, evidence(v), None, released, event)
            )
            continue
        # want none
        if cur is not None and cur.action == "watch":
            why = reason or "no open incident on this node"
            out.decisions.append(
                Decision(node, "none", why, now, ids, evidence(v), None, cur.released_at, "clear")
            )

    # New drains, most severe and oldest first, under the breaker's cap.
    candidates.sort(
        key=lambda c: (
            -SEVERITY_RANK.get(c[0].severity, 0),
            _since(c[0].incident_ids, incidents, now),
            c[0].node,
        )
    )
    for v, cur in candidates:
        ids = sorted(set(v.incident_ids))
        since = _since(ids, incidents, now)
        reason = "; ".join(v.reasons)
        released = cur.released_at if cur is not None else None
        if not tripped and out.recent_drains < out.cap:
            out.recent_drains += 1
            out.decisions.append(
                Decision(
                    node=v.node,
                    action="drain",
                    reason=reason,
                    since=since,
                    incident_ids=ids,
                    evidence=evidence(v),
                    released_at=released,
                    event="drain",
                )
            )
            continue
        if not tripped:
            tripped = True
            out.tripped_now = True
            out.breaker_message = (
                f"circuit breaker tripped at {_iso(now)}: {out.recent_drains} drains in the last "
                f"{policy.window} reached the cap of {out.cap} ({policy.max_fraction:.0%} of {hosts} hosts); "
                "no new drains until an operator resets it"
            )
        held = (
            f"held by the drain circuit breaker ({out.recent_drains}/{out.cap} drains in "
            f"{policy.window}); would drain: {reason}"
        )
        event = "hold" if cur is None or cur.action != "watch" or not cur.reason.startswith("held") else None
        out.decisions.append(Decision(v.node, "watch", held, since, ids, evidence(v), None, released, event))
    return out
