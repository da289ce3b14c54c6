"""Saturated error counters: evidence, not silence.

Legacy IB PortCounters stick at ``2**bits - 1`` (IBA vol. 1, PortCounters), and fleets read
``link_downed`` 255, ``port_xmit_discards`` 65535, ``port_xmit_wait`` 2**32-1 from sysfs on
their worst links (leptonai/gpud#943). The rate of a stuck counter is unknown, but its reading says "at least
this many since the last clear", which is bad news: this detector reports it on the port. It
clears when the counter is cleared (no saturated error counter for ``close_after`` polls with
counters); a poll without counter data for the port says nothing.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

import numpy as np
import pyarrow as pa

from graywire.collectors.counters import ERROR_COLUMNS, IBA_COUNTERS
from graywire.collectors.model import Fabric
from graywire.detectors.base import Hysteresis, HysteresisConfig, PortIndexer, column
from graywire.detectors.findings import Finding
from graywire.detectors.rates import SATURATION_COLUMNS

#: Column -> legacy width, for the evidence (saturating sources are the legacy IBA fields).
_WIDTH = {c.column: c.legacy_bits for c in IBA_COUNTERS.values() if c.legacy_bits}


@dataclass(frozen=True, slots=True)
class SaturationConfig:
    hysteresis: HysteresisConfig = field(
        default_factory=lambda: HysteresisConfig(open_after=1, close_after=2)
    )


class CounterSaturationDetector:
    name = "counter_saturation"
    version = "1"
    consumes = "port_rates"
    kinds = ("counter_saturated",)

    def __init__(self, fabric: Fabric, cfg: SaturationConfig | None = None) -> None:
        self.fabric = fabric
        self.cfg = cfg or SaturationConfig()
        self.port_index = PortIndexer(fabric)
        self.hyst = Hysteresis(self.cfg.hysteresis, fabric.n_ports)
        self.mask = np.zeros(fabric.n_ports, dtype=np.uint32)  # saturated counters when it fired

    def observe(self, batch: pa.RecordBatch) -> list[Finding]:
        if batch.num_rows == 0 or "saturated_counters" not in batch.schema.names:
            return []
        idx = self.port_index(batch.column("port"))
        mask = batch.column("saturated_counters").to_numpy(zero_copy_only=False).astype(np.uint32)
        # Judged: rows with a counter reading (an interval), or a saturated reading of any age.
        has_data = np.isfinite(column(batch, "interval_seconds")) | (mask > 0)
        ok = (idx >= 0) & has_data
        p, m = idx[ok], mask[ok]
        opened, closed = self.hyst.update(p, m > 0)
        out: list[Finding] = []
        if not opened.size and not closed.size:
            return out
        now = batch.column("time")[0].as_py()
        row_of = dict(zip(p.tolist(), m.tolist(), strict=True))
        for e in opened.tolist():
            self.mask[e] = row_of[e]
            out.append(self._finding(e, "firing", now, int(row_of[e])))
        for e in closed.tolist():
            out.append(self._finding(e, "cleared", now, int(self.mask[e])))
            self.mask[e] = 0
        return out

    def _finding(self, port: int, status: str, now: datetime, mask: int) -> Finding:
        f = self.fabric
        key = f.keys[port]
        counters = [
            {"counter": c, "value": 2 ** _WIDTH.get(c, 64) - 1, "width": _WIDTH.get(c)}
            for i, c in enumerate(SATURATION_COLUMNS)
            if mask >> i & 1
        ]
        # A stuck error counter is bad news; a stuck xmit-wait counter alone is only congestion
        # history (busy healthy ports fill a 32-bit PortXmitWait in hours): info.
        errors = any(c["counter"] in ERROR_COLUMNS for c in counters)
        names = ", ".join(f"{c['counter']} at {c['value']}" for c in counters)
        summary = (
            f"{key}: {names} (saturated: at least that many since the last clear)"
            if status == "firing"
            else f"{key}: error counters no longer saturated (cleared)"
        )
        return Finding(
            kind="counter_saturated",
            entity=key,
            status=status,  # type: ignore[arg-type]
            time=now,
            severity="warning" if errors else "info",
            summary=summary,
            detector=f"{self.name}/{self.version}",
            node=f.node_of(port),
            port=key,
            link=f.link_label(port),
            score=float(len(counters)),
            evidence={"counters": counters, "meaning": "at least this many since the last clear"},
        )
