"""Per-port figures of the latest poll, and their leaf and rail aggregates, for ``/metrics``.

The pipeline already turns counters into per-second rates with wraps, resets and saturation
handled; those rates are graywire's own figures, the ones its detectors judge. Values live in
numpy arrays indexed by fabric port, so a poll of 500,000 ports updates them with a handful of
vectorized assignments. NaN means unknown (the source lacks the counter, or the first poll has
no rate yet): such a port gets no sample, never a zero.

A rate over graywire's poll is a gauge Prometheus can only sample: with a 30 s scrape and a
10 s poll it sees one poll in three. So the sources' cumulative counters are exported too
(``metrics.raw_counters``), as the source last reported them, for ``rate()`` and ``increase()``
over any window, the way node_exporter, infiniband_exporter and snmp_exporter export theirs.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from graywire.collectors.model import Fabric
from graywire.collectors.schemas import PFC_PRIORITIES, PHYS_LINK_UP, PORT_COUNTERS
from graywire.detectors.base import PortIndexer, column

#: Aggregate health of a port, in order of precedence (a stale port with a critical incident
#: is critical; ``no_data``: no source reported it within the data window, unknown, not ok).
#: ``graywire_port_health`` uses the incident part: 0 ok, 1 warning, 2 critical.
HEALTH_STATES: tuple[str, ...] = ("ok", "no_data", "stale", "warning", "critical")


@dataclass(frozen=True, slots=True)
class PortSeries:
    """One per-port gauge: the figure it shows, its metric name and a fixed extra label."""

    figure: str
    metric: str
    help: str
    extra: tuple[tuple[str, str], ...] = ()


PORT_SERIES: tuple[PortSeries, ...] = (
    PortSeries("speed", "graywire_port_speed_bytes_per_second", "Negotiated link speed"),
    PortSeries("link_up", "graywire_port_link_up", "1 while the physical link is up, else 0"),
    PortSeries("rx_bytes", "graywire_port_receive_bytes_per_second", "Data received over the last poll"),
    PortSeries("tx_bytes", "graywire_port_transmit_bytes_per_second", "Data sent over the last poll"),
    PortSeries(
        "pre_fec_ber",
        "graywire_port_pre_fec_bit_error_ratio",
        "Bits the FEC corrected per bit received over the last poll (pre-FEC BER)",
    ),
    PortSeries(
        "fec_uncorrectable",
        "graywire_port_fec_uncorrectable_blocks_per_second",
        "FEC blocks the code could not correct (post-FEC errors)",
    ),
    PortSeries("symbol_errors", "graywire_port_symbol_errors_per_second", "Physical-layer symbol errors"),
    PortSeries("rcv_errors", "graywire_port_receive_errors_per_second", "Packets received with errors"),
    PortSeries(
        "pause_ratio_rx",
        "graywire_port_pfc_pause_ratio",
        "Share of time paused by PFC (busiest priority); rx: paused by the peer, tx: pausing it",
        (("direction", "rx"),),
    ),
    PortSeries(
        "pause_ratio_tx",
        "graywire_port_pfc_pause_ratio",
        "Share of time paused by PFC (busiest priority); rx: paused by the peer, tx: pausing it",
        (("direction", "tx"),),
    ),
    PortSeries(
        "pause_frames_rx",
        "graywire_port_pfc_pause_frames_per_second",
        "PFC pause frames, all priorities",
        (("direction", "rx"),),
    ),
    PortSeries(
        "pause_frames_tx",
        "graywire_port_pfc_pause_frames_per_second",
        "PFC pause frames, all priorities",
        (("direction", "tx"),),
    ),
    PortSeries(
        "ecn_marked",
        "graywire_port_ecn_marked_packets_per_second",
        "Packets the switch marked congestion-experienced (ECN)",
    ),
    PortSeries("cnp_sent", "graywire_port_cnp_sent_per_second", "RoCE congestion notification packets sent"),
)

FIGURES: tuple[str, ...] = tuple(dict.fromkeys(s.figure for s in PORT_SERIES))


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


@dataclass(frozen=True, slots=True)
class RawCounter:
    """One cumulative ``port_sample`` column as a Prometheus counter (``<metric>_total``)."""

    column: str
    metric: str
    help: str
    extra: tuple[tuple[str, str], ...] = ()


_PFC_FRAMES = "PFC pause frames, by direction (rx: received from the peer) and priority"
_PFC_SECONDS = "Time paused by PFC, by direction (rx: paused by the peer) and priority"

#: Every cumulative counter of the ``port_sample`` record, under its Prometheus name. Values are
#: what the source last reported, in base units (IB data words times 4 are bytes): a reset,
#: wrap or saturation is passed through as it came, for ``rate()`` to treat as Prometheus does.
RAW_COUNTERS: tuple[RawCounter, ...] = (
    RawCounter("rx_bytes", "graywire_port_receive_bytes", "Data received (source's cumulative counter)"),
    RawCounter("tx_bytes", "graywire_port_transmit_bytes", "Data sent (source's cumulative counter)"),
    RawCounter("rx_packets", "graywire_port_receive_packets", "Packets received"),
    RawCounter("tx_packets", "graywire_port_transmit_packets", "Packets sent"),
    RawCounter("symbol_errors", "graywire_port_symbol_errors", "Physical-layer symbol errors"),
    RawCounter("link_downed", "graywire_port_link_downed", "Times the link went down"),
    RawCounter("link_recovery", "graywire_port_link_error_recovery", "Link error recoveries (retrains)"),
    RawCounter("rcv_errors", "graywire_port_receive_errors", "Packets received with errors"),
    RawCounter(
        "rcv_remote_physical_errors",
        "graywire_port_receive_remote_physical_errors",
        "Packets received marked bad by an earlier hop",
    ),
    RawCounter(
        "rcv_switch_relay_errors",
        "graywire_port_receive_switch_relay_errors",
        "Received packets a switch could not forward",
    ),
    RawCounter(
        "rcv_constraint_errors",
        "graywire_port_receive_constraint_errors",
        "Received packets dropped by partition or raw-packet constraints",
    ),
    RawCounter(
        "local_link_integrity_errors",
        "graywire_port_local_link_integrity_errors",
        "Times the local link integrity threshold was exceeded",
    ),
    RawCounter(
        "excessive_buffer_overrun_errors",
        "graywire_port_excessive_buffer_overrun_errors",
        "Consecutive receive buffer overruns past the threshold",
    ),
    RawCounter("crc_errors", "graywire_port_crc_errors", "Frames received with a bad CRC (Ethernet)"),
    RawCounter(
        "symbol_error_packets",
        "graywire_port_symbol_error_packets",
        "Frames received with symbol errors (Ethernet)",
    ),
    RawCounter("xmit_discards", "graywire_port_transmit_discards", "Packets discarded instead of sent"),
    RawCounter(
        "xmit_constraint_errors",
        "graywire_port_transmit_constraint_errors",
        "Packets not sent because of partition or raw-packet constraints",
    ),
    RawCounter("vl15_dropped", "graywire_port_vl15_dropped", "Subnet management packets dropped (VL15)"),
    RawCounter(
        "xmit_wait_ticks",
        "graywire_port_transmit_wait_ticks",
        "Device ticks with data to send but no credit (compare on one device model only)",
    ),
    RawCounter("fec_corrected_blocks", "graywire_port_fec_corrected_blocks", "FEC blocks corrected"),
    RawCounter(
        "fec_uncorrectable_blocks",
        "graywire_port_fec_uncorrectable_blocks",
        "FEC blocks the code could not correct (post-FEC errors)",
    ),
    RawCounter("fec_corrected_symbols", "graywire_port_fec_corrected_symbols", "FEC symbols corrected"),
    # "_bits" is not a base unit to promtool's lint; "bit" in the name is.
    RawCounter(
        "fec_corrected_bits", "graywire_port_fec_corrected_bit_errors", "Bit errors the FEC corrected"
    ),
    RawCounter(
        "phy_received_bits",
        "graywire_port_phy_received_bit",
        "Bits received at the PHY: pre-FEC BER = rate(fec_corrected_bit_errors) / rate(this)",
    ),
    RawCounter(
        "ecn_marked_packets",
        "graywire_port_ecn_marked_packets",
        "Packets marked congestion-experienced (ECN)",
    ),
    RawCounter("cnp_sent", "graywire_port_cnp_sent", "RoCE congestion notification packets sent"),
    RawCounter("cnp_handled", "graywire_port_cnp_handled", "RoCE congestion notification packets handled"),
    *(
        RawCounter(
            f"pfc{p}_{d}_pause_frames",
            "graywire_port_pfc_pause_frames",
            _PFC_FRAMES,
            (("direction", d), ("priority", str(p))),
        )
        for d in ("rx", "tx")
        for p in PFC_PRIORITIES
    ),
    *(
        RawCounter(
            f"pfc{p}_{d}_pause_seconds",
            "graywire_port_pfc_pause_seconds",
            _PFC_SECONDS,
            (("direction", d), ("priority", str(p))),
        )
        for d in ("rx", "tx")
        for p in PFC_PRIORITIES
    ),
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
