"""Silent speed and width downgrades: a link that is up, but slower than it should be.

Nothing goes down when an 800G link renegotiates to 400G or a 4x cable comes up 2x, so no
alarm fires; the job just gets slower. This is deterministic state, judged on both ends of each
link with a two-poll confirmation so a reading taken mid-retrain does not page anyone.

The expected speed and width of a port come, in order of trust, from the inventory; else from
what the port and its link peer enable or support (UFM's capabilities, fed with
:meth:`LinkDowngradeDetector.set_capabilities`); else from the consensus of its peers: ports of
the same role and label (``mlx5_2`` on every host, ``p4`` on every leaf) are the same part
wired the same way, so when a clear majority of them runs at one speed, the odd one out below
it has downgraded. A group without a clear majority sets no expectation for its ports nor for
their link peers: mixed NIC generations must not page anyone.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import numpy as np
import pyarrow as pa

from graywire.collectors.keys import split_port_key
from graywire.collectors.model import Fabric
from graywire.collectors.schemas import PHYS_LINK_UP
from graywire.collectors.units import format_speed
from graywire.detectors.base import (
    PORT_RATES,
    Hysteresis,
    HysteresisConfig,
    LinkEntities,
    PortIndexer,
    Scores,
    column,
    open_ports,
    resume_open,
)
from graywire.detectors.findings import Finding, Kind, Severity


@dataclass(frozen=True, slots=True)
class LinkDowngradeConfig:
    #: A speed below this share of the expected speed is a downgrade (absorbs rounding).
    speed_tolerance: float = 0.99
    hysteresis: HysteresisConfig = field(
        default_factory=lambda: HysteresisConfig(open_after=2, close_after=2)
    )
    #: Peer consensus needs at least this many up ports of the same role and label in a poll...
    consensus_min_peers: int = 4
    #: ...and this share of them at one value; otherwise the group sets no expectation.
    consensus_min_share: float = 0.75


#: Where a port's expectation came from, by code (evidence names it).
_FROM = ("none", "inventory", "capabilities", "peers")


def capability_expectations(fabric: Fabric, caps: pa.RecordBatch | pa.Table) -> tuple[np.ndarray, np.ndarray]:
    """Per fabric port, the speed and width its link can train to: the lower of both ends' maxima.

    ``caps`` is a ``port_capability`` record (``port``, ``max_speed_bps``, ``enabled_width``,
    ``supported_width``); a port it does not list, or lists without values, stays 0 (unknown).
    """
    n = fabric.n_ports
    speed = np.zeros(n, np.int64)
    width = np.zeros(n, np.int64)
    if caps.num_rows:
        idx = fabric.lookup(caps.column("port"))
        known = idx >= 0
        speed[idx[known]] = caps.column("max_speed_bps").fill_null(0).to_numpy()[known]
        enabled = caps.column("enabled_width").fill_null(0).to_numpy().astype(np.int64)
        supported = caps.column("supported_width").fill_null(0).to_numpy().astype(np.int64)
        width[idx[known]] = np.where(enabled > 0, enabled, supported)[known]
    peer = fabric.peer
    out = []
    for own in (speed, width):
        other = np.where(peer >= 0, own[np.maximum(peer, 0)], 0)
        out.append(np.where((own > 0) & (other > 0), np.minimum(own, other), own))
    return out[0], out[1]


def group_consensus(
    groups: np.ndarray, values: np.ndarray, n_groups: int, min_peers: int, min_share: float
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per group: the most common value, how many share it, and the group's size.

    The value is 0 for a group smaller than ``min_peers`` or whose most common value is held by
    less than ``min_share`` of it. Vectorized: a port's speed takes one of a handful of values,
    so one ``bincount`` over (group, value code) pairs counts them all.
    """
    if groups.size == 0:
        zeros = np.zeros(n_groups, np.int64)
        return zeros, zeros.copy(), zeros.copy()
    uniq, code = np.unique(values, return_inverse=True)
    k = uniq.size
    counts = np.bincount(groups * k + code.ravel(), minlength=n_groups * k).reshape(n_groups, k)
    best = counts.argmax(axis=1)
    mode_n = counts.max(axis=1).astype(np.int64)
    total = counts.sum(axis=1).astype(np.int64)
    ok = (total > 0) & (total >= min_peers) & (mode_n >= min_share * total)
    mode = np.where(ok, uniq[best], 0).astype(np.int64)
    return mode, mode_n, total


@dataclass(frozen=True, slots=True, kw_only=True)
class _DowngradeScores(Scores):
    """Per link entity the verdict; the readings are the batch's rows, for the evidence."""

    idx: np.ndarray  # fabric port of each row (-1 unknown)
    known: np.ndarray
    speed: np.ndarray
    width: np.ndarray


class LinkDowngradeDetector:
    """Flags links whose negotiated speed or width is below what the fabric model expects."""

    name = "link_downgrade"
    version = "1"
    consumes = PORT_RATES
    kinds = (Kind.SPEED_DOWNGRADE, Kind.WIDTH_DOWNGRADE)

    def __init__(self, fabric: Fabric, cfg: LinkDowngradeConfig | None = None) -> None:
        self.fabric = fabric
        self.cfg = cfg or LinkDowngradeConfig()
        self.links = LinkEntities(fabric)
        self.port_index = PortIndexer(fabric)
        self.kinds = (Kind.WIDTH_DOWNGRADE, Kind.SPEED_DOWNGRADE)
        self.hyst = {k: Hysteresis(self.cfg.hysteresis, fabric.n_ports) for k in self.kinds}
        self.since = {k: np.zeros(fabric.n_ports, dtype="datetime64[us]") for k in self.kinds}
        n = fabric.n_ports
        self.cap_speed = np.zeros(n, np.int64)
        self.cap_width = np.zeros(n, np.int16)  # lanes (the schema's width is uint8)
        labels = [split_port_key(k)[1] for k in fabric.keys]
        roles = fabric.port_role.tolist() if n else []
        _, self.group = np.unique(np.array([f"{r}|{lab}" for r, lab in zip(roles, labels, strict=True)],
                                           dtype=object), return_inverse=True)  # fmt: skip
        self.group = self.group.astype(np.int32)
        self.n_groups = int(self.group.max()) + 1 if n else 0
        #: The expectation used for each port at its last judgement, and where it came from.
        self.exp_speed = fabric.expected_speed_bps.astype(np.int64).copy()
        self.exp_width = fabric.expected_width.astype(np.int16)
        self.speed_from = np.where(self.exp_speed > 0, 1, 0).astype(np.int8)
        self.width_from = np.where(self.exp_width > 0, 1, 0).astype(np.int8)
        #: True once no port needs a peer consensus (until capabilities change).
        self._settled = False

    def set_capabilities(self, caps: pa.RecordBatch | pa.Table) -> None:
        """Take a ``port_capability`` view (UFM REST's enabled/supported maxima) as the second
        source of expectations; the pipeline calls it for every view a source sends."""
        speed, width = capability_expectations(self.fabric, caps)
        # A port UFM stops listing keeps what it last said: the cable did not change.
        self.cap_speed = np.where(speed > 0, speed, self.cap_speed)
        self.cap_width = np.where(width > 0, width, self.cap_width).astype(np.int16)
        self._settled = False

    def _expected(self, idx: np.ndarray, judged: np.ndarray, speed: np.ndarray, width: np.ndarray) -> None:
        """Refresh ``exp_speed``/``exp_width`` per port: inventory, else capabilities, else peers."""
        if self._settled:
            return  # every port is known from the inventory or capabilities: no peers needed
        f = self.fabric
        rows = np.flatnonzero(judged)
        grp = self.group[idx[rows]]
        settled = True
        for inv, cap, val, exp, src in (
            (f.expected_speed_bps, self.cap_speed, speed, self.exp_speed, self.speed_from),
            (f.expected_width, self.cap_width, width, self.exp_width, self.width_from),
        ):
            inv = inv.astype(np.int64)
            if ((inv > 0) | (cap > 0)).all():
                exp[:] = np.where(inv > 0, inv, cap)
                src[:] = np.where(inv > 0, 1, 2)
                continue
            settled = False
            has = val[rows] > 0
            mode, _, total = group_consensus(
                grp[has],
                val[rows][has],
                self.n_groups,
                self.cfg.consensus_min_peers,
                self.cfg.consensus_min_share,
            )
            peers = mode[self.group]
            # A link trains to the lower of its ends, and an end whose group is split (mixed
            # parts) vetoes the link: the other end's group alone cannot say what it should be.
            linked = f.peer >= 0
            peer_of = np.maximum(f.peer, 0)
            mixed = (total[self.group] >= self.cfg.consensus_min_peers) & (peers == 0)
            other = np.where(linked, peers[peer_of], 0)
            vetoed = mixed | (linked & mixed[peer_of])
            peers = np.where(vetoed, 0, np.where(other > 0, np.minimum(peers, other), peers))
            exp[:] = np.where(inv > 0, inv, np.where(cap > 0, cap, peers))
            src[:] = np.where(inv > 0, 1, np.where(cap > 0, 2, np.where(peers > 0, 3, 0)))
        self._settled = settled

    def resume(self, incidents: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
        """Open incidents of its kinds, back after a restart (:class:`Resumable`)."""
        taken: list[Mapping[str, Any]] = []
        for kind, hyst in self.hyst.items():
            ports, mine = open_ports(self.fabric, incidents, (kind,))
            resume_open(hyst, self.links.of_port[ports])
            taken += mine
        return taken

    def observe(self, batch: pa.RecordBatch) -> list[Finding]:
        scored = self._score(batch)
        if not scored:
            return []
        now = batch.column("time")[0].as_py()
        findings: list[Finding] = []
        for kind, scores in scored:
            h, ids = self.hyst[kind], scores.ids
            # A bad run starting now dates the finding it may open.
            fresh = scores.bad & (h.bad_run[ids] == 0) & ~h.is_open[ids]
            self.since[kind][ids[fresh]] = np.datetime64(now.replace(tzinfo=None), "us")
            decision = h.decide(scores)
            if decision:
                # Row of each port in this batch, built once: many findings stay linear.
                s = scores
                row_of = np.full(self.fabric.n_ports, -1, dtype=np.int64)
                row_of[s.idx[s.known][::-1]] = np.flatnonzero(s.known)[::-1]  # first row wins
                for status, e, _ in decision.changes():
                    findings.append(self._finding(kind, e, status, now, row_of, s.speed, s.width))
        return findings

    def _score(self, batch: pa.RecordBatch) -> list[tuple[str, _DowngradeScores]]:
        """Per kind (width first), the link entities judged and whether they run below their
        expectation; only a port that is up with a reading is judged."""
        if batch.num_rows == 0:
            return []
        f = self.fabric
        idx = self.port_index(batch.column("port"))
        known = idx >= 0
        phys = column(batch, "phys_state", 0)
        speed = column(batch, "speed_bps", -1).astype(np.int64)
        width = column(batch, "width", 0).astype(np.int64)
        # Only a port that is up with a reading can be judged; down or unread says nothing.
        judged = known & (phys == PHYS_LINK_UP) & (speed > 0)
        self._expected(idx, judged, speed, width)
        exp_speed = np.where(known, self.exp_speed[idx], 0)
        exp_width = np.where(known, self.exp_width[idx], 0)
        width_bad = judged & (exp_width > 0) & (width > 0) & (width < exp_width)
        ent = self.links.of_port[np.where(known, idx, 0)]
        # Width is decided per link first: a 4x->2x cable is slower too, but it is one problem,
        # even when only one end reports lanes (SNMP does not).
        width_bad_link = np.bincount(ent[width_bad], minlength=f.n_ports) > 0
        speed_bad = (
            judged & ~width_bad_link[ent] & (exp_speed > 0) & (speed < exp_speed * self.cfg.speed_tolerance)
        )
        n = f.n_ports
        ids = np.flatnonzero(np.bincount(ent[judged], minlength=n) > 0)
        out = []
        for kind, bad_rows in ((Kind.WIDTH_DOWNGRADE, width_bad), (Kind.SPEED_DOWNGRADE, speed_bad)):
            bad_ent = np.bincount(ent[bad_rows], minlength=n) > 0
            out.append((kind, _DowngradeScores(ids=ids, bad=bad_ent[ids], idx=idx, known=known,
                                               speed=speed, width=width)))  # fmt: skip
        return out

    def _finding(
        self,
        kind: str,
        ent: int,
        status: str,
        now: datetime,
        row_of: np.ndarray,
        speed: np.ndarray,
        width: np.ndarray,
    ) -> Finding:
        f = self.fabric
        ends = self.links.ends(ent)  # host end first: where a person acts
        main = ends[0]
        readings = {}
        for p in ends:
            r = int(row_of[p])
            if r >= 0:
                readings[f.keys[p]] = {"speed_bps": int(speed[r]) if speed[r] > 0 else None,
                                       "width": int(width[r]) if width[r] > 0 else None}  # fmt: skip
            else:
                readings[f.keys[p]] = None
        exp_s, exp_w = int(self.exp_speed[main]), int(self.exp_width[main])
        source = _FROM[int(self.width_from[main] if kind == Kind.WIDTH_DOWNGRADE else self.speed_from[main])]
        actual = readings.get(f.keys[main]) or next((v for v in readings.values() if v), {})
        since = self.since[kind][ent].astype(datetime).replace(tzinfo=UTC)
        peer_txt = ""
        if len(ends) > 1:
            other = readings.get(f.keys[ends[1]])
            if other is None:
                peer_txt = f"; other end {f.keys[ends[1]]} not in this poll"
            elif other == actual:
                peer_txt = f"; other end {f.keys[ends[1]]} agrees"
            else:
                peer_txt = f"; other end {f.keys[ends[1]]} reads {other}"
        if kind == Kind.WIDTH_DOWNGRADE:
            what = f"negotiated {actual.get('width')}x, expected {exp_w}x"
        else:
            what = f"negotiated {format_speed(actual.get('speed_bps') or 0)}, expected {format_speed(exp_s)}"
        if source != "inventory":
            what += f" (from {'peer consensus' if source == 'peers' else 'port capabilities'})"
        if status == "firing":
            summary = f"{f.keys[main]} {what} since {since:%H:%M:%S}{peer_txt}"
        else:
            summary = f"{f.keys[main]} back at expected {'width' if kind == 'width_downgrade' else 'speed'}"
        return Finding(
            kind=kind,
            entity=f.link_label(main) or f.keys[main],
            status=status,  # type: ignore[arg-type]
            time=now,
            severity=Severity.CRITICAL,
            summary=summary,
            detector=f"{self.name}/{self.version}",
            node=f.node_of(main),
            port=f.keys[main],
            link=f.link_label(main),
            score=1.0,
            evidence={
                "expected": {"speed_bps": exp_s, "width": exp_w},
                "expected_from": source,
                "actual": readings,
                "since": since.isoformat(),
                "peer_port": f.keys[ends[1]] if len(ends) > 1 else None,
            },
        )
