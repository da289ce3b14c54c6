"""InfiniBand PM counter names, one home for every collector that reads them.

UFM Telemetry, the TFS stream, ``perfquery`` (legacy PortCounters, ``-x`` PortCountersExtended,
the RS-FEC PortExtendedSpeedsCounters) and sysfs ``counters/`` all export the IBA Performance
Management attributes, under slightly different spellings and at different widths. The width
depends on the *attribute* a value came from, not on its name: ``perfquery -x`` prints the 64-bit
PortCountersExtended error counters under their legacy names (``SymbolErrorCounter``), UFM
suffixes the Extended form (``SymbolErrorCounterExtended``), and the legacy PortCounters fields
are 4 to 32 bits wide and saturate (IBA vol. 1, PortCounters: "counters stop at all ones").
Widths below are those of libibmad's ``fields.c`` (infiniband-diags), which perfquery prints from.

The RS-FEC counters (PortExtendedSpeedsCounters with RS-FEC active) are 32-bit; perfquery
names them ``PortFECCorrectableBlockCtr``, UFM ``PortFECCorrectableBlockCounter``.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class CounterSpec:
    """One source counter: its canonical column, the factor to base units, and its width."""

    column: str
    scale: int = 1
    bits: int = 64
    saturating: bool = False
    rank: int = 2  # when two source counters feed one column for a port, the higher rank wins
    lane: int | None = None  # phy_raw_errors_lane<N>: element N of fec_lane_errors


@dataclass(frozen=True, slots=True)
class IbaCounter:
    """An IBA PM counter: canonical column, legacy PortCounters width (None: no legacy form), scale."""

    column: str
    legacy_bits: int | None
    scale: int = 1
    extended: bool = True  # has a 64-bit PortCountersExtended form


#: IBA PM field name (as perfquery prints it) -> canonical column and widths.
IBA_COUNTERS: dict[str, IbaCounter] = {
    # PortXmitData/PortRcvData count 4-octet words.
    "PortXmitData": IbaCounter("tx_bytes", 32, 4),
    "PortRcvData": IbaCounter("rx_bytes", 32, 4),
    "PortXmitPkts": IbaCounter("tx_packets", 32),
    "PortRcvPkts": IbaCounter("rx_packets", 32),
    "SymbolErrorCounter": IbaCounter("symbol_errors", 16),
    "LinkErrorRecoveryCounter": IbaCounter("link_recovery", 8),
    "LinkDownedCounter": IbaCounter("link_downed", 8),
    "PortRcvErrors": IbaCounter("rcv_errors", 16),
    "PortRcvRemotePhysicalErrors": IbaCounter("rcv_remote_physical_errors", 16),
    "PortRcvSwitchRelayErrors": IbaCounter("rcv_switch_relay_errors", 16),
    "PortXmitDiscards": IbaCounter("xmit_discards", 16),
    "PortXmitConstraintErrors": IbaCounter("xmit_constraint_errors", 8),
    "PortRcvConstraintErrors": IbaCounter("rcv_constraint_errors", 8),
    "LocalLinkIntegrityErrors": IbaCounter("local_link_integrity_errors", 4),
    "ExcessiveBufferOverrunErrors": IbaCounter("excessive_buffer_overrun_errors", 4),
    "VL15Dropped": IbaCounter("vl15_dropped", 16),
    "PortXmitWait": IbaCounter("xmit_wait_ticks", 32),
    # PortExtendedSpeedsCounters, RS-FEC active: 32-bit, no Extended form.
    "PortFECCorrectableBlockCounter": IbaCounter("fec_corrected_blocks", 32, extended=False),
    "PortFECUncorrectableBlockCounter": IbaCounter("fec_uncorrectable_blocks", 32, extended=False),
    "PortFECCorrectedSymbolCounter": IbaCounter("fec_corrected_symbols", 32, extended=False),
}
#: perfquery's (libibmad's) spellings of the RS-FEC counters.
IBA_ALIASES: dict[str, str] = {
    "PortFECCorrectableBlockCtr": "PortFECCorrectableBlockCounter",
    "PortFECUncorrectableBlockCtr": "PortFECUncorrectableBlockCounter",
    "PortFECCorrectedSymbolCtr": "PortFECCorrectedSymbolCounter",
}

#: Error counters: a saturated one means "at least its maximum since the last clear" (bad news).
ERROR_COLUMNS: tuple[str, ...] = (
    "symbol_errors",
    "link_recovery",
    "link_downed",
    "rcv_errors",
    "rcv_remote_physical_errors",
    "rcv_switch_relay_errors",
    "xmit_discards",
    "xmit_constraint_errors",
    "rcv_constraint_errors",
    "local_link_integrity_errors",
    "excessive_buffer_overrun_errors",
    "vl15_dropped",
    "fec_uncorrectable_blocks",
)

#: sysfs ``ports/<n>/counters/<file>`` -> IBA field (kernel Documentation/ABI/stable/sysfs-class-infiniband).
SYSFS_COUNTERS: dict[str, str] = {
    "port_xmit_data": "PortXmitData",
    "port_rcv_data": "PortRcvData",
    "port_xmit_packets": "PortXmitPkts",
    "port_rcv_packets": "PortRcvPkts",
    "symbol_error": "SymbolErrorCounter",
    "link_error_recovery": "LinkErrorRecoveryCounter",
    "link_downed": "LinkDownedCounter",
    "port_rcv_errors": "PortRcvErrors",
    "port_rcv_remote_physical_errors": "PortRcvRemotePhysicalErrors",
    "port_rcv_switch_relay_errors": "PortRcvSwitchRelayErrors",
    "port_xmit_discards": "PortXmitDiscards",
    "port_xmit_constraint_errors": "PortXmitConstraintErrors",
    "port_rcv_constraint_errors": "PortRcvConstraintErrors",
    "local_link_integrity_errors": "LocalLinkIntegrityErrors",
    "excessive_buffer_overrun_errors": "ExcessiveBufferOverrunErrors",
    "VL15_dropped": "VL15Dropped",
    "port_xmit_wait": "PortXmitWait",
}
#: sysfs data and packet counters come from PortCountersExtended on HCAs that have it (mlx4, mlx5).
SYSFS_WIDE = frozenset({"port_xmit_data", "port_rcv_data", "port_xmit_packets", "port_rcv_packets"})


def iba_counter(name: str) -> IbaCounter | None:
    """The IBA counter behind a field name in any tool's spelling, or None."""
    return IBA_COUNTERS.get(IBA_ALIASES.get(name, name))


def iba_spec(name: str, extended: bool) -> CounterSpec | None:
    """The column and width of an IBA field read from the Extended (64-bit) or legacy attribute."""
    c = iba_counter(name)
    if c is None:
        return None
    if extended and c.extended:
        return CounterSpec(c.column, c.scale)
    bits = c.legacy_bits or 64
    return CounterSpec(c.column, c.scale, bits=bits, saturating=bits < 64, rank=1)


def ufm_names() -> dict[str, CounterSpec]:
    """UFM Telemetry spellings: ``<Name>Extended`` is 64-bit, the bare name its legacy field."""
    out: dict[str, CounterSpec] = {}
    for name, c in IBA_COUNTERS.items():
        if c.extended:
            out[f"{name}Extended"] = CounterSpec(c.column, c.scale)
        spec = iba_spec(name, extended=False)
        assert spec is not None
        out[name] = spec
    return out
