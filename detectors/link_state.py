"""Silent speed and width downgrades: a link that is up, but slower than it should be.

Nothing goes down when an 800G link renegotiates to 400G or a 4x cable comes up 2x, so no
alarm fires; the job just gets slower. This is deterministic state, judged at once against
the inventory's expected speed and width on both ends of each link, with a two-poll
confirmation so a reading taken mid-retrain does not page anyone.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime

import numpy as np
import pyarrow as pa

from collectors.model import Fabric
from collectors.schemas import PHYS_LINK_UP
from collectors.units import format_speed
from detectors.base import Hysteresis, HysteresisConfig, LinkEntities, PortIndexer, column
from detectors.findings import Finding


@dataclass(frozen=True, slots=True)
class LinkDowngradeConfig:
    #: A speed below this share of the expected speed is a downgrade (absorbs rounding).
    speed_tolerance: float = 0.99
    hysteresis: HysteresisConfig = field(
        default_factory=lambda: HysteresisConfig(open_after=2, close_after=2)
    )


class LinkDowngradeDetector:
    """Flags links whose negotiated speed or width is below what the fabric model expects."""

    name = "link_downgrade"
    version = "1"
    consumes = "port_rates"
    kinds = ("speed_downgrade", "width_downgrade")

    def __init__(self, fabric: Fabric, cfg: LinkDowngradeConfig | None = None) -> None:
        self.fabric = fabric
        self.cfg = cfg or LinkDowngradeConfig()
        self.links = LinkEntities(fabric)
        self.port_index = PortIndexer(fabric)
        self.kinds = ("width_downgrade", "speed_downgrade")
        self.hyst = {k: Hysteresis(self.cfg.hysteresis, fabric.n_ports) for k in self.kinds}
        self.since = {k: np.zeros(fabric.n_ports, dtype="datetime64[us]") for k in self.kinds}

    def observe(self, batch: pa.RecordBatch) -> list[Finding]:
        if batch.num_rows == 0:
            return []
        f = self.fabric
        idx = self.port_index(batch.column("port"))
        known = idx >= 0
        phys = column(batch, "phys_state", 0)
        speed = column(batch, "speed_bps", -1).astype(np.int64)
        width = column(batch, "width", 0).astype(np.int64)
        exp_speed = np.where(known, f.expected_speed_bps[idx], 0)
        exp_width = np.where(known, f.expected_width[idx], 0)
        # Only a port that is up with a reading can be judged; down or unread says nothing.
        judged = known & (phys == PHYS_LINK_UP) & (speed > 0)
        width_bad = judged & (exp_width > 0) & (width > 0) & (width < exp_width)
        ent = self.links.of_port[np.where(known, idx, 0)]
        # Width is decided per link first: a 4x->2x cable is slower too, but it is one problem,
        # even when only one end reports lanes (SNMP does not).
        width_bad_link = np.bincount(ent[width_bad], minlength=f.n_ports) > 0
        speed_bad = (
            judged & ~width_bad_link[ent] & (exp_speed > 0) & (speed < exp_speed * self.cfg.speed_tolerance)
        )
        now = batch.column("time")[0].as_py()
        n = f.n_ports
        judged_ent = np.bincount(ent[judged], minlength=n) > 0
        ids = np.flatnonzero(judged_ent)
        findings: list[Finding] = []
        for kind, bad_rows in (("width_downgrade", width_bad), ("speed_downgrade", speed_bad)):
            bad_ent = np.bincount(ent[bad_rows], minlength=n) > 0
            h = self.hyst[kind]
            fresh = bad_ent[ids] & (h.bad_run[ids] == 0) & ~h.is_open[ids]
            self.since[kind][ids[fresh]] = np.datetime64(now.replace(tzinfo=None), "us")
            opened, closed = h.update(ids, bad_ent[ids])
            if opened.size or closed.size:
                # Row of each port in this batch, built once: many findings stay linear.
                row_of = np.full(n, -1, dtype=np.int64)
                row_of[idx[known][::-1]] = np.flatnonzero(known)[::-1]  # first row wins
                for e in opened:
                    findings.append(self._finding(kind, int(e), "firing", now, row_of, speed, width))
                for e in closed:
                    findings.append(self._finding(kind, int(e), "cleared", now, row_of, speed, width))
        return findings

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
        exp_s, exp_w = int(f.expected_speed_bps[main]), int(f.expected_width[main])
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
        if kind == "width_downgrade":
            what = f"negotiated {actual.get('width')}x, expected {exp_w}x"
        else:
            what = f"negotiated {format_speed(actual.get('speed_bps') or 0)}, expected {format_speed(exp_s)}"
        if status == "firing":
            summary = f"{f.keys[main]} {what} since {since:%H:%M:%S}{peer_txt}"
        else:
            summary = f"{f.keys[main]} back at expected {'width' if kind == 'width_downgrade' else 'speed'}"
        return Finding(
            kind=kind,
            entity=f.link_label(main) or f.keys[main],
            status=status,  # type: ignore[arg-type]
            time=now,
            severity="critical",
            summary=summary,
            detector=f"{self.name}/{self.version}",
            node=f.node_of(main),
            port=f.keys[main],
            link=f.link_label(main),
            score=1.0,
            evidence={
                "expected": {"speed_bps": exp_s, "width": exp_w},
                "actual": readings,
                "since": since.isoformat(),
                "peer_port": f.keys[ends[1]] if len(ends) > 1 else None,
            },
        )
