"""Each port's latest reading (speed, width, states, when) from a poll's port rates, for the
ports API and the status page.

Read from the poll's ``port_rate`` batch, which carries each sample's gauges and time, every
source in one batch with a dictionary kept across polls: the port lookup is a cached ``take``,
however many host agents sent a few rows each.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from graywire.collectors.model import Fabric
from graywire.detectors.base import PortIndexer

#: Ports, then speed (b/s), width, physical state, logical state and the reading's time (unix
#: seconds), each aligned with the ports.
Readings = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]


class PortReadings:
    """The latest reading of each port a poll's rates name (nulls, not read, as 0)."""

    def __init__(self, fabric: Fabric) -> None:
        self.fabric = fabric
        self._indexer = PortIndexer(fabric)

    def latest(self, port_rates: pa.RecordBatch | None) -> Readings | None:
        """None when the poll read no port."""
        if port_rates is None or not port_rates.num_rows:
            return None
        idx = np.asarray(self._indexer(port_rates.column("port")))
        micros = pc.cast(port_rates.column("time"), pa.int64()).to_numpy(zero_copy_only=False)
        known = idx >= 0
        n = self.fabric.n_ports
        present = np.zeros(n, dtype=bool)
        present[idx[known]] = True
        if int(present.sum()) == int(known.sum()):  # one row a port (the usual poll): as read

            def latest(name: str) -> np.ndarray:  # nulls (not read) as 0, the ports API's "not read"
                return np.nan_to_num(
                    port_rates.column(name).to_numpy(zero_copy_only=False).astype(np.float64), nan=0.0
                )

            ports, updated = idx, micros / 1e6
        else:
            # A port two sources describe apart (UFM REST's state beside Telemetry's counters,
            # when the join could not fold them): each figure is its latest row that read it.
            order = np.argsort(micros, kind="stable")
            ports = np.flatnonzero(present)
            at = idx[order]
            ok = at >= 0

            def latest(name: str) -> np.ndarray:
                values = np.nan_to_num(
                    port_rates.column(name).to_numpy(zero_copy_only=False).astype(np.float64), nan=0.0
                )[order]
                read = ok & (values != 0)
                out = np.zeros(n)
                out[at[read]] = values[read]  # the later row wins
                return out[ports]

            newest = np.full(n, -np.inf)
            np.maximum.at(newest, at[ok], micros[order][ok] / 1e6)
            updated = newest[ports]
        return (
            ports,
            latest("speed_bps"),
            latest("width").astype(np.int16),
            latest("phys_state").astype(np.uint8),
            latest("logical_state").astype(np.uint8),
            updated,
        )
