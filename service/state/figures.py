"""Each port's figures from a poll's rates, the leaf and rail aggregates, and the sources' raw
counters: what the fabric state holds and ``/metrics``, the API and the status page read.

The pipeline already turns counters into per-second rates with wraps, resets and saturation
handled; those rates are graywire's own figures, the ones its detectors judge. Values live in
numpy arrays indexed by fabric port, so a poll of 500,000 ports updates them with a handful of
vectorized assignments. NaN means unknown (the source lacks the counter, or the first poll has
no rate yet): such a port gets no sample, never a zero.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, get_args

import numpy as np
import pyarrow as pa

from graywire.collectors.model import Fabric
from graywire.collectors.schemas import PFC_PRIORITIES, PHYS_LINK_UP, PORT_COUNTERS
from graywire.detectors.base import PortIndexer, column

#: A port's health as the API names it: by its worst open incident (``PORT_HEALTH``'s code
#: indexes the first three), else ``no_data``: no incident and no reading, unknown, not ok.
PortHealth = Literal["ok", "warning", "critical", "no_data"]
INCIDENT_HEALTH: tuple[str, ...] = get_args(PortHealth)[:-1]
NO_DATA: str = get_args(PortHealth)[-1]
#: Aggregate health of a port, in order of precedence (a stale port with a critical incident
#: is critical; ``no_data``: no source reported it within the data window, unknown, not ok).
#: ``graywire_port_health`` uses the incident part: 0 ok, 1 warning, 2 critical.
HEALTH_STATES: tuple[str, ...] = ("ok", NO_DATA, "stale", *INCIDENT_HEALTH[1:])

#: The figures :func:`port_figures` computes for each port, by name (``metrics.ports`` exports
#: each under its Prometheus name).
FIGURES: tuple[str, ...] = (
    "speed",
    "link_up",
    "rx_bytes",
    "tx_bytes",
    "pre_fec_ber",
    "fec_uncorrectable",
    "symbol_errors",
    "rcv_errors",
    "pause_ratio_rx",
    "pause_ratio_tx",
    "pause_frames_rx",
    "pause_frames_tx",
    "ecn_marked",
    "cnp_sent",
)


def _max_or_nan(columns: list[np.ndarray]) -> np.ndarray:
    """Element-wise max over columns, NaN only where every column is NaN (``fmax`` skips NaN);
    one pass per column, with no stacked copy of them all."""
    out = columns[0].copy()
    for c in columns[1:]:
        np.fmax(out, c, out=out)
    return out


def _sum_or_nan(columns: list[np.ndarray]) -> np.ndarray:
    """Element-wise sum over columns, NaN taken as 0, NaN only where every column is NaN
    (``nansum`` over stacked rows, adding in the same order)."""
    known = ~np.isnan(columns[0])
    out = np.where(known, columns[0], 0.0)
    for c in columns[1:]:
        have = ~np.isnan(c)
        out += np.where(have, c, 0.0)
        known |= have
    out[~known] = np.nan
    return out


def port_figures(rates: pa.RecordBatch) -> dict[str, np.ndarray]:
    """Every figure of :data:`FIGURES` for each row of a ``port_rate`` batch (NaN = unknown)."""
    phys = column(rates, "phys_state")
    bits = column(rates, "phy_received_bits_per_second")
    corrected = column(rates, "fec_corrected_bits_per_second")
    with np.errstate(divide="ignore", invalid="ignore"):
        ber = np.where(bits > 0, corrected / bits, np.nan)
    out = {
        "speed": column(rates, "speed_bps") / 8,
        "link_up": np.where(np.isnan(phys), np.nan, (phys == PHYS_LINK_UP).astype(np.float64)),
        "rx_bytes": column(rates, "rx_bytes_per_second"),
        "tx_bytes": column(rates, "tx_bytes_per_second"),
        "pre_fec_ber": ber,
        "fec_uncorrectable": column(rates, "fec_uncorrectable_blocks_per_second"),
        "symbol_errors": column(rates, "symbol_errors_per_second"),
        "rcv_errors": column(rates, "rcv_errors_per_second"),
        "ecn_marked": column(rates, "ecn_marked_packets_per_second"),
        "cnp_sent": column(rates, "cnp_sent_per_second"),
    }
    for d in ("rx", "tx"):
        secs = [column(rates, f"pfc{p}_{d}_pause_seconds_per_second") for p in PFC_PRIORITIES]
        frames = [column(rates, f"pfc{p}_{d}_pause_frames_per_second") for p in PFC_PRIORITIES]
        out[f"pause_ratio_{d}"] = np.clip(_max_or_nan(secs), 0.0, 1.0)
        out[f"pause_frames_{d}"] = _sum_or_nan(frames)
    return out


def leaf_of_ports(fabric: Fabric) -> np.ndarray:
    """Node index of the leaf each port belongs to: its own node, or the leaf it is cabled to.

    Host NICs and spine downlinks count under the leaf at their other end; ports touching no
    leaf get -1 and appear only in the rail and fabric-wide figures.
    """
    is_leaf = np.array([r == "leaf" for r in fabric.node_roles], dtype=bool)
    own = fabric.node_of_port
    out = np.where(is_leaf[own], own, -1).astype(np.int32)
    peer = fabric.peer
    linked = (out < 0) & (peer >= 0)
    peer_node = own[np.where(peer >= 0, peer, 0)]
    via_peer = linked & is_leaf[peer_node]
    out[via_peer] = peer_node[via_peer]
    return out


@dataclass
class GroupFigures:
    """Aggregates of one grouping (leaf or rail): arrays by group index."""

    ports_by_health: np.ndarray  # (groups, len(HEALTH_STATES)) counts
    below_expected_speed: np.ndarray  # ports running slower than the inventory says
    pre_fec_ber_max: np.ndarray  # NaN where unknown
    pfc_pause_ratio_max: np.ndarray


def group_figures(
    group: np.ndarray,
    n: int,
    health: np.ndarray,
    reported: np.ndarray,
    below: np.ndarray,
    ber: np.ndarray,
    pause: np.ndarray,
) -> GroupFigures:
    """Aggregate per-port arrays into ``n`` groups; ports with ``group < 0`` are left out. A port
    never reported counts (as its health says: no data), its figures are unknown."""
    keep = group >= 0
    g = group[keep]
    counts = np.bincount(g * len(HEALTH_STATES) + health[keep], minlength=n * len(HEALTH_STATES))
    ber_max = np.full(n, np.nan)
    pause_max = np.full(n, np.nan)
    np.fmax.at(ber_max, g, ber[keep])
    np.fmax.at(pause_max, g, pause[keep])
    return GroupFigures(
        ports_by_health=counts.reshape(n, len(HEALTH_STATES)),
        below_expected_speed=np.bincount(g, weights=below[keep], minlength=n),
        pre_fec_ber_max=ber_max,
        pfc_pause_ratio_max=pause_max,
    )


def _as_float(arr: pa.Array) -> np.ndarray:
    """A counter column as float64, nulls NaN. Unsafe: a 64-bit counter past 2**53 rounds to
    the nearest float, as Prometheus would store it anyway."""
    return arr.cast(pa.float64(), safe=False).to_numpy(zero_copy_only=False)


class RawCounterBook:
    """The latest cumulative counters of every port, by source, as the source reported them.

    Per poll, a source that sent ``port_sample`` rows gets fresh arrays: a port it reported has
    its values, a null counter and a port it did not report this poll are NaN (absent, never
    0), and a counter none of its rows carries has no array at all, so an InfiniBand-only
    fabric allocates nothing for PFC. A source that sent nothing this poll keeps its arrays:
    its targets are failing, and the exporter hides stale ports' counters.

    Two sources reporting one port (UFM and a host agent) keep their own arrays: their
    counters differ, and one series alternating between them would look like resets.
    """

    def __init__(self, fabric: Fabric) -> None:
        self.fabric = fabric
        self._indexers: dict[str, PortIndexer] = {}

    def observe(self, batches: list[pa.RecordBatch]) -> dict[str, dict[str, np.ndarray]]:
        """``{source: {column: values by fabric port}}`` for the sources among ``batches``
        (``port_sample`` batches of one poll)."""
        by_source: dict[str, list[pa.RecordBatch]] = {}
        for b in batches:
            if b.num_rows:
                by_source.setdefault(str(b.column("source")[0].as_py()), []).append(b)
        out: dict[str, dict[str, np.ndarray]] = {}
        n = self.fabric.n_ports
        for source, parts in by_source.items():
            indexer = self._indexers.setdefault(source, PortIndexer(self.fabric))
            idx = np.concatenate([indexer(b.column("port")) for b in parts])
            keep = idx >= 0
            at = idx[keep]
            rows = sum(b.num_rows for b in parts)
            arrays: dict[str, np.ndarray] = {}
            for c in PORT_COUNTERS:
                if sum(b.column(c).null_count for b in parts) == rows:
                    continue  # the source has no such counter
                values = np.full(n, np.nan)
                values[at] = np.concatenate([_as_float(b.column(c)) for b in parts])[keep]
                values.setflags(write=False)
                arrays[c] = values
            out[source] = arrays
        return out
