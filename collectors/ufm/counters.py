"""Which UFM counter feeds which canonical ``port_sample`` column, and in what unit.

UFM Telemetry (Prometheus ``/metrics``, ``/csv``) names counters as InfiniBand PM attributes
(``PortXmitDataExtended``…) and PHY/PPCNT fields (``phy_received_bits``…); the TFS/fluentd
stream renames UFM's monitoring counters ``Infiniband_<Name>_u_<unit>``. Sources and decisions:

* ``PortXmitData``/``PortRcvData`` (and their ``Extended`` forms) count 4-octet words: ×4 for
  bytes. UFM documents its monitoring attribute ``Infiniband_MBOut``/``MBIn`` as the same counter
  ("total number of data octets, divided by 4 … reported as a multiple of four octets"), whatever
  its name says, and the real TFS sample labels it ``_u_Gb``: 4,086,720 "Gb" in 14,190 packets is
  impossible, 4,086,720 words is 1,152 bytes a packet. So MBOut/MBIn are words (×4) unless the
  unit suffix is an explicit byte unit (``_u_B``/``_u_Bytes``: ×1, ``_u_KB``: ×10³, ``_u_MB``:
  ×10⁶; not seen in any real sample).
* The legacy PortCounters (no ``Extended``) are narrow and saturate (widths in
  :mod:`graywire.collectors.ib.counters`). When both forms of a counter are present for a port, the Extended
  one wins.
* ``phy_corrected_bits``/``phy_received_bits`` (PPCNT physical-layer statistics) give pre-FEC BER
  over a window as Δcorrected/Δreceived; ``phy_raw_errors_lane<N>`` become ``fec_lane_errors``.
* ``raw_ber``, ``eff_ber``, ``symbol_ber`` are not mapped: they are gauges computed by the device
  "since the last clear", printed with a one-digit coefficient (``3E-9``). Rebuilding a
  cumulative counter from them (BER × received bits) makes the coefficient's rounding step look
  like bursts of errors, so BER is left to the detectors, from the counters above.
  ``phy_symbol_errors`` (PPCNT, post-FEC) feeds ``symbol_errors``; ``phy_effective_errors`` has
  no canonical column.
* ``rs_fec_corrected_blocks``/``rs_fec_uncorrectable_blocks`` are the PPCNT RS-FEC field names;
  that UFM Telemetry exports them under these names is assumed, not verified.
"""

from __future__ import annotations

import re

from graywire.collectors.ib.counters import CounterSpec, ufm_names

__all__ = ["TELEMETRY_COUNTERS", "TFS_COUNTERS", "CounterSpec", "counter_spec"]

#: UFM Telemetry counter names (Prometheus metric names and CSV header names). The IBA PM names
#: and their widths live in :mod:`graywire.collectors.ib.counters`, shared with perfquery and sysfs.
TELEMETRY_COUNTERS: dict[str, CounterSpec] = {
    **ufm_names(),
    "phy_received_bits": CounterSpec("phy_received_bits"),
    "phy_corrected_bits": CounterSpec("fec_corrected_bits"),
    # PPCNT's post-FEC symbol errors: what NVIDIA's Symbol BER levels (and the PDR plugin) are
    # defined on, so it wins over the PM SymbolErrorCounter where both are exported.
    "phy_symbol_errors": CounterSpec("symbol_errors", rank=3),
    "rs_fec_corrected_blocks": CounterSpec("fec_corrected_blocks"),
    "rs_fec_uncorrectable_blocks": CounterSpec("fec_uncorrectable_blocks"),
    **{f"phy_raw_errors_lane{n}": CounterSpec("fec_lane_errors", lane=n) for n in range(8)},
    "fec_mode_active": CounterSpec("fec_mode"),
    # A Prometheus metric name cannot hold '.', so accept the underscore spelling too.
    "CableInfo.Temperature": CounterSpec("temperature_celsius"),
    "CableInfo_Temperature": CounterSpec("temperature_celsius"),
}

#: UFM monitoring counters as the TFS/fluentd stream names them (``Infiniband_<base>_u_<unit>``).
TFS_COUNTERS: dict[str, CounterSpec] = {
    "Infiniband_MBOut": CounterSpec("tx_bytes", 4),
    "Infiniband_MBIn": CounterSpec("rx_bytes", 4),
    "Infiniband_PckOut": CounterSpec("tx_packets"),
    "Infiniband_PckIn": CounterSpec("rx_packets"),
    "Infiniband_SymbolErrors": CounterSpec("symbol_errors"),
    "Infiniband_LinkRecovers": CounterSpec("link_recovery"),
    "Infiniband_LinkDowned": CounterSpec("link_downed"),
    "Infiniband_RcvErrors": CounterSpec("rcv_errors"),
    "Infiniband_XmtDiscards": CounterSpec("xmit_discards"),
    "Infiniband_XmitWait": CounterSpec("xmit_wait_ticks"),
    "Infiniband_RcvRemotePhysErrors": CounterSpec("rcv_remote_physical_errors"),
    "Infiniband_VL15Dropped": CounterSpec("vl15_dropped"),
}
_DATA_COLUMNS = {"tx_bytes", "rx_bytes"}
#: Explicit byte units on a TFS data counter; anything else (``Gb``, none) is 4-octet words.
_BYTE_UNITS = {"b": 1, "bytes": 1, "kb": 10**3, "mb": 10**6}
_TFS_NAME = re.compile(r"^(?P<base>.+?)(?P<float>_f)?(?:_u_(?P<unit>[A-Za-z%]+))?$")


def counter_spec(name: str) -> CounterSpec | None:
    """The canonical mapping of a counter name from any UFM form, or None when it is not used."""
    spec = TELEMETRY_COUNTERS.get(name)
    if spec is not None:
        return spec
    m = _TFS_NAME.match(name)
    if m is None:
        return None
    spec = TFS_COUNTERS.get(m.group("base"))
    if spec is None:
        return None
    unit = (m.group("unit") or "").lower()
    if spec.column in _DATA_COLUMNS and unit in _BYTE_UNITS:
        return CounterSpec(spec.column, _BYTE_UNITS[unit])
    return spec
