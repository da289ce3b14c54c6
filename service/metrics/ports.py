"""The per-port series ``/metrics`` exports, under their Prometheus names: each figure the
fabric state holds (``state.figures``) as a gauge, and each cumulative ``port_sample`` counter
as the source last reported it.

A rate over graywire's poll is a gauge Prometheus can only sample: with a 30 s scrape and a
10 s poll it sees one poll in three. So the sources' cumulative counters are exported too
(``metrics.raw_counters``), as the source last reported them, for ``rate()`` and ``increase()``
over any window, the way node_exporter, infiniband_exporter and snmp_exporter export theirs.
"""

from __future__ import annotations

from dataclasses import dataclass

from graywire.collectors.schemas import PFC_PRIORITIES


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
