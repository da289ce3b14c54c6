"""Saturated error counters: evidence, not silence.

Legacy IB PortCounters stick at ``2**bits - 1`` (IBA vol. 1, PortCounters), and fleets read
``link_downed`` 255, ``port_xmit_discards`` 65535, ``port_xmit_wait`` 2**32-1 from sysfs on
their worst links (leptonai/gpud#943). The rate of a stuck counter is unknown, but its reading says "at least
this many since the last clear", which is bad news: this detector reports it on the port. It
clears when the counter is cleared (no saturated error counter for ``close_after`` polls with
counters); a poll without counter data for the port says nothing.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import numpy as np
import pyarrow as pa

from graywire.collectors.ib.counters import ERROR_COLUMNS, IBA_COUNTERS
from graywire.collectors.model import Fabric
from graywire.detectors.base import (
    PORT_RATES,
    Hysteresis,
    HysteresisConfig,
    PortIndexer,
    Scores,
    column,
    open_ports,
    port_finding,
    port_place,
    resume_open,
)
from graywire.detectors.findings import Finding, Kind, Severity
from graywire.detectors.rates import SATURATION_COLUMNS

#: Column -> legacy width, for the evidence (saturating sources are the legacy IBA fields).
_WIDTH = {c.column: c.legacy_bits for c in IBA_COUNTERS.values() if c.legacy_bits}


@dataclass(frozen=True, slots=True)
class SaturationConfig:
    hysteresis: HysteresisConfig = field(
        default_factory=lambda: HysteresisConfig(open_after=1, close_after=2)
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class _SaturationScores(Scores):
    mask: np.ndarray  # saturated_counters bitmask per judged port


class CounterSaturationDetector:
    name = "counter_saturation"
    version = "1"
    consumes = PORT_RATES
    kinds = (Kind.COUNTER_SATURATED,)

    def __init__(self, fabric: Fabric, cfg: SaturationConfig | None = None) -> None:
        self.fabric = fabric
        self.cfg = cfg or SaturationConfig()
        self.port_index = PortIndexer(fabric)
        self.hyst = Hysteresis(self.cfg.hysteresis, fabric.n_ports)
        self.mask = np.zeros(fabric.n_ports, dtype=np.uint32)  # saturated counters when it fired

    def resume(self, incidents: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
        """Open incidents of its kinds, back after a restart (:class:`Resumable`)."""
        ports, taken = open_ports(self.fabric, incidents, self.kinds)
        resume_open(self.hyst, ports)
        return taken

    def observe(self, batch: pa.RecordBatch) -> list[Finding]:
        scores = self._score(batch)
        if scores is None:
            return []
        decision = self.hyst.decide(scores)
        if not decision:
            return []
        now = batch.column("time")[0].as_py()
        out: list[Finding] = []
        for status, e, j in decision.changes():
            if status == "firing":
                self.mask[e] = scores.mask[j]
                out.append(self._finding(e, status, now, int(scores.mask[j])))
            else:
                out.append(self._finding(e, status, now, int(self.mask[e])))
                self.mask[e] = 0
        return out

    def _score(self, batch: pa.RecordBatch) -> _SaturationScores | None:
        """Bad: any error counter (or xmit wait) saturated. Judged: rows with a counter reading
        (an interval), or a saturated reading of any age."""
        if batch.num_rows == 0 or "saturated_counters" not in batch.schema.names:
            return None
        idx = self.port_index(batch.column("port"))
        mask = batch.column("saturated_counters").to_numpy(zero_copy_only=False).astype(np.uint32)
        has_data = np.isfinite(column(batch, "interval_seconds")) | (mask > 0)
        ok = (idx >= 0) & has_data
        p, m = idx[ok], mask[ok]
        return _SaturationScores(ids=p, bad=m > 0, mask=m)

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
        return port_finding(
            self,
            Kind.COUNTER_SATURATED,
            port_place(f, port),
            status,  # type: ignore[arg-type]
            now,
            Severity.WARNING if errors else Severity.INFO,
            summary,
            float(len(counters)),
            {"counters": counters, "meaning": "at least this many since the last clear"},
        )
