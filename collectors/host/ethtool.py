"""ethtool text as mlx5 hosts print it: ``ethtool -S``, ``ethtool -I --show-fec`` and ``ethtool <if>``.

sysfs has no PHY counters: PFC pauses, FEC and pre-FEC bit counts exist only in the driver's
``ethtool -S`` statistics (names in the kernel's mlx5 ``counters.rst``). What maps where:

=============================================  ==============================================
``ethtool -S`` name                            canonical column
=============================================  ==============================================
``rx_prio{p}_pause`` / ``tx_prio{p}_pause``    ``pfc{p}_rx_pause_frames`` / ``pfc{p}_tx_pause_frames``
``rx_prio{p}_pause_duration`` (µs)             ``pfc{p}_rx_pause_seconds`` (÷10⁶), tx likewise
``rx_corrected_bits_phy``                      ``fec_corrected_bits``
``rx_bits_phy``                                ``phy_received_bits``
``rx_err_lane_{l}_phy``                        ``fec_lane_errors`` (lane order; pre-FEC errors)
``rx_pcs_symbol_err_phy``                      ``symbol_errors`` (errors FEC did not correct)
``rx_crc_errors_phy``                          ``crc_errors`` (packets dropped on an FCS error)
``rx_symbol_err_phy``                          ``symbol_error_packets`` (packets dropped on symbol errors)
``link_down_events_phy``                       ``link_downed``
``tx_discards_phy``                            ``xmit_discards``
``{rx,tx}_{bytes,packets}_phy``                ``{rx,tx}_{bytes,packets}`` where sysfs has none
=============================================  ==============================================

The PHY error counters above are the physical port's own 64-bit counters, so on an Ethernet
(RoCE) port they win over the PMA emulation in sysfs (and over the netdev's ``rx_crc_errors``);
on an InfiniBand port sysfs wins. Meanings are the kernel's mlx5 ``counters.rst``: on a RoCE NIC
the CRC (FCS) errors are the receive errors that matter.
FEC block counts come from ``--show-fec`` statistics (``corrected_blocks``,
``uncorrectable_blocks``). Names kept in ``extra`` as ``ethtool/<name>``: see :data:`EXTRA_STATS`
and ``rx_prio{p}_pause_transition``.

``--show-fec`` prints ``Configured FEC encodings:`` (ioctl ethtool) or
``Supported/Configured FEC encodings:`` (netlink ethtool ≥ 5.19) and ``Active FEC encoding:``
(``encodings`` on some versions). :func:`fec_mode_code` maps the active name to UFM's
``fec_mode_active`` code; ethtool names are coarser than UFM's, so:

- ``Off`` -> 0 (No_FEC); ``BaseR`` -> 1 (Firecode_FEC, Clause 74);
- ``RS`` -> 2 (RS(528,514)) on NRZ lanes below 40 Gb/s, 7 (RS(544,514)) on PAM4 lanes;
  unknown when the lane rate is;
- ``LLRS`` -> 9 (Ethernet Consortium RS(272,257+1)); UFM's PLR variants (13-15) show as LLRS too;
- ``None`` (the driver reports no active mode), ``Auto`` and anything else -> null.

Output is read from a subprocess with a timeout (:class:`EthtoolCommand`) or from pre-captured
files (:class:`EthtoolDirectory`: ``<dir>/<if>/{statistics,fec,settings}``, the layout of
node_exporter's ethtool fixtures). Stray lines (``netlink error: Operation not permitted``),
dotted keys (``port.rx_dropped``) and keys with spaces (``duplicate metric``) are tolerated.
"""

from __future__ import annotations

import logging
import re
import subprocess
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from graywire.collectors.base import OUT_OF_RANGE
from graywire.collectors.host.sysfs import PortReading, read_text

log = logging.getLogger("graywire.agent.ethtool")

#: Always from ethtool: sysfs has no such counter.
PHY_COUNTERS = {"rx_corrected_bits_phy": "fec_corrected_bits", "rx_bits_phy": "phy_received_bits"}
#: The physical port's own error counters: they replace sysfs on Ethernet ports, fill in elsewhere.
PHY_OVERRIDES = {
    "rx_pcs_symbol_err_phy": "symbol_errors",
    "rx_crc_errors_phy": "crc_errors",
    "rx_symbol_err_phy": "symbol_error_packets",
    "link_down_events_phy": "link_downed",
    "tx_discards_phy": "xmit_discards",
}
#: Used only where sysfs gave nothing (sysfs data/packet counters are the IB definition).
PHY_FALLBACKS = {
    "rx_bytes_phy": "rx_bytes",
    "tx_bytes_phy": "tx_bytes",
    "rx_packets_phy": "rx_packets",
    "tx_packets_phy": "tx_packets",
}
#: Kept in ``PortReading.extra`` as ``ethtool/<name>`` (no canonical column).
EXTRA_STATS = frozenset(
    {
        "tx_pause_storm_warning_events",
        "tx_pause_storm_error_events",
        "rx_discards_phy",
        "rx_out_of_buffer",
        "rx_buffer_passed_thres_phy",
        "rx_pause_ctrl_phy",
        "tx_pause_ctrl_phy",
        "rx_global_pause",
        "tx_global_pause",
        "rx_global_pause_duration",
        "tx_global_pause_duration",
        "module_unplug",
        "module_high_temp",
        "module_bus_stuck",
        "module_bad_shorted",
    }
)

_PRIO = re.compile(r"^(rx|tx)_prio([0-7])_pause(_duration)?$")
_TRANSITION = re.compile(r"^rx_prio[0-7]_pause_transition$")
_LANE = re.compile(r"^rx_err_lane_(\d+)_phy$")
_CONFIGURED = re.compile(r"^(?:Supported/)?Configured FEC encodings?\s*:(.*)$", re.IGNORECASE)
_ACTIVE = re.compile(r"^Active FEC encodings?\s*:(.*)$", re.IGNORECASE)
_FEC_STAT = re.compile(r"^([A-Za-z][\w]*)\s*:\s*(\d+)\s*(?:\[\s*per_lane:\s*([\d,\s]*)\])?\s*$")
_FEC_LANE = re.compile(r"^Lane\s+(\d+)\s*:\s*(\d+)\s*$", re.IGNORECASE)
_SPEED = re.compile(r"^(\d+)\s*([KMG])b/s$", re.IGNORECASE)
_SPEED_SCALE = {"k": 10**3, "m": 10**6, "g": 10**9}
_U64 = 2**64


@dataclass(frozen=True, slots=True)
class FecInfo:
    """``ethtool --show-fec``: encodings as printed, and the statistics when ``-I`` was given."""

    active: str | None
    configured: tuple[str, ...] = ()
    stats: dict[str, int] = field(default_factory=dict)
    lanes: dict[str, list[int]] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class LinkSettings:
    """``ethtool <if>``: what the link negotiated."""

    speed_bps: int | None
    lanes: int | None = None
    duplex: str | None = None
    link_detected: bool | None = None


@dataclass(frozen=True, slots=True)
class EthtoolReading:
    """One interface's three outputs; None where a command failed or a file is missing."""

    statistics: dict[str, int] | None = None
    fec: FecInfo | None = None
    settings: LinkSettings | None = None
    errors: tuple[str, ...] = ()


# -- parsers ------------------------------------------------------------------------------------


def parse_statistics(text: str) -> dict[str, int]:
    """``ethtool -S``: ``name: value`` lines; headers, comments and non-numeric lines are skipped.

    The value is after the *last* colon, so names with dots or spaces survive as printed.
    """
    out: dict[str, int] = {}
    for line in text.splitlines():
        s = line.strip()
        if not s or s.startswith("#"):
            continue
        key, sep, value = s.rpartition(":")
        value = value.strip()
        if sep and key.strip() and value.isascii() and value.isdigit():  # "²".isdigit() too
            out[key.strip()] = int(value)
    return out


def parse_fec(text: str) -> FecInfo | None:
    """``ethtool [-I] --show-fec``; None when the text has no ``Active FEC encoding`` line."""
    active: str | None = None
    seen_active = False
    configured: tuple[str, ...] = ()
    stats: dict[str, int] = {}
    lanes: dict[str, list[int]] = {}
    last: str | None = None
    for line in text.splitlines():
        s = line.strip()
        if m := _ACTIVE.match(s):
            names = m.group(1).split()
            active = names[0] if names else None
            seen_active = True
        elif m := _CONFIGURED.match(s):
            configured = tuple(m.group(1).split())
        elif m := _FEC_LANE.match(s):
            if last is not None:
                lane, value = int(m.group(1)), int(m.group(2))
                values = lanes.setdefault(last, [])
                if lane == len(values):
                    values.append(value)
        elif m := _FEC_STAT.match(s):
            last = m.group(1)
            stats[last] = int(m.group(2))
            if m.group(3):
                lanes[last] = [int(v) for v in m.group(3).replace(",", " ").split()]
    if not seen_active:
        return None
    return FecInfo(active=active, configured=configured, stats=stats, lanes=lanes)


def parse_settings(text: str) -> LinkSettings | None:
    """``ethtool <if>``: ``Speed: 1000Mb/s`` (``Unknown!`` when down), ``Lanes:``, ``Duplex:``,
    ``Link detected:``. None when the text has no ``Speed:`` line."""
    fields: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.strip().partition(":")
        if sep:
            fields.setdefault(key.strip().lower(), value.strip())
    if "speed" not in fields:
        return None
    speed = None
    if m := _SPEED.match(fields["speed"]):
        speed = int(m.group(1)) * _SPEED_SCALE[m.group(2).lower()] or None
    lanes_text = fields.get("lanes", "")
    detected = fields.get("link detected", "").lower()
    return LinkSettings(
        speed_bps=speed,
        lanes=int(lanes_text)
        if lanes_text.isascii() and lanes_text.isdigit() and int(lanes_text) > 0
        else None,
        duplex=fields.get("duplex") or None,
        link_detected={"yes": True, "no": False}.get(detected),
    )


def fec_mode_code(active: str | None, speed_bps: int | None, lanes: int | None) -> int | None:
    """UFM ``fec_mode_active`` code for an ethtool FEC name (see the module docstring)."""
    name = (active or "").strip().lower()
    if name == "off":
        return 0
    if name == "baser":
        return 1
    if name == "llrs":
        return 9
    if name != "rs" or not speed_bps:
        return None
    if lanes:  # compared, not divided: an absurd speed must not overflow a float
        return 7 if speed_bps >= 40e9 * lanes else 2
    if speed_bps >= 200e9:
        return 7  # 200G and up only exist with PAM4 lanes
    if speed_bps <= 25e9:
        return 2
    return None  # 50G/100G: NRZ or PAM4, can't tell without the lane count


# -- into a port reading -----------------------------------------------------------------------


def apply_ethtool(r: PortReading, eth: EthtoolReading) -> None:
    """Fold one interface's ethtool output into its port reading (see the module docstring)."""
    stats = eth.statistics or {}
    ethernet = (r.link_layer or "").lower() == "ethernet"
    lanes: dict[int, int] = {}
    for name, value in stats.items():
        if value >= _U64:  # ethtool prints u64: a wider number is not a counter
            r.skipped[OUT_OF_RANGE] += 1
            continue
        if m := _PRIO.match(name):
            direction, prio, duration = m.groups()
            if duration:
                r.set_counter(f"pfc{prio}_{direction}_pause_seconds", value / 1e6)
            else:
                r.set_counter(f"pfc{prio}_{direction}_pause_frames", value)
        elif name in PHY_COUNTERS:
            r.set_counter(PHY_COUNTERS[name], value)
        elif name in PHY_OVERRIDES:
            column = PHY_OVERRIDES[name]
            if ethernet or r.counters.get(column) is None:
                r.set_counter(column, value)
        elif name in PHY_FALLBACKS:
            if r.counters.get(PHY_FALLBACKS[name]) is None:
                r.set_counter(PHY_FALLBACKS[name], value)
        elif m := _LANE.match(name):
            lanes[int(m.group(1))] = value
        elif name in EXTRA_STATS or _TRANSITION.match(name):
            r.extra[f"ethtool/{name}"] = value
    if lanes and sorted(lanes) == list(range(len(lanes))):
        r.fec_lane_errors = [lanes[i] for i in range(len(lanes))]
    if eth.settings is not None:
        if r.netdev_speed_bps is None:
            r.netdev_speed_bps = eth.settings.speed_bps
        r.lanes = eth.settings.lanes
    fec = eth.fec
    if fec is not None:
        for stat, column in (
            ("corrected_blocks", "fec_corrected_blocks"),
            ("uncorrectable_blocks", "fec_uncorrectable_blocks"),
        ):
            if stat in fec.stats:
                r.set_counter(column, fec.stats[stat])
        if "corrected_bits" in fec.stats and r.counters.get("fec_corrected_bits") is None:
            r.set_counter("fec_corrected_bits", fec.stats["corrected_bits"])
        r.fec_mode = fec_mode_code(fec.active, r.any_speed_bps, r.any_width)


# -- sources ------------------------------------------------------------------------------------


class EthtoolSource(Protocol):
    def read_many(self, ifnames: Sequence[str]) -> dict[str, EthtoolReading]: ...


def _valid_ifname(name: str) -> bool:
    # Passed as an argument, never through a shell; a leading '-' would read as an option.
    return bool(name) and not name.startswith("-") and "/" not in name and "\x00" not in name


class EthtoolCommand:
    """Runs ``ethtool`` (read-only queries), each call bounded by ``timeout`` seconds.

    Interfaces are read in parallel on a few threads, so a host's NICs cost one slow call, not
    the sum. A missing binary, a timeout or a non-zero exit gives None for that output.
    """

    def __init__(self, binary: str = "ethtool", timeout: float = 5.0, workers: int = 8) -> None:
        self.binary = binary
        self.timeout = timeout
        self.workers = workers

    def _run(self, args: Sequence[str], errors: list[str]) -> tuple[int, str] | None:
        try:
            p = subprocess.run(
                [self.binary, *args], capture_output=True, text=True, timeout=self.timeout, check=False
            )
        except subprocess.TimeoutExpired:
            errors.append(f"{self.binary} {' '.join(args)}: timed out after {self.timeout:g} s")
            return None
        except OSError as e:
            errors.append(f"{self.binary} {' '.join(args)}: {e}")
            return None
        if p.returncode != 0:
            msg = (p.stderr or p.stdout).strip().splitlines()
            errors.append(f"{self.binary} {' '.join(args)}: exit {p.returncode}: {msg[0] if msg else ''}")
        return p.returncode, p.stdout

    def read(self, ifname: str) -> EthtoolReading:
        if not _valid_ifname(ifname):
            return EthtoolReading(errors=(f"invalid interface name {ifname!r}",))
        errors: list[str] = []
        stats = fec = settings = None
        if (out := self._run(["-S", ifname], errors)) and out[0] == 0:
            stats = parse_statistics(out[1])
        fec_errors: list[str] = []
        for args in (["-I", "--show-fec", ifname], ["--show-fec", ifname]):  # old ethtool lacks -I
            if (out := self._run(args, fec_errors)) and out[0] == 0:
                fec = parse_fec(out[1])
                break
        else:
            errors.extend(fec_errors[-1:])
        if out := self._run([ifname], errors):
            # Unprivileged ethtool exits non-zero over the message level, after printing the speed.
            settings = parse_settings(out[1])
        return EthtoolReading(stats, fec, settings, tuple(errors))

    def read_many(self, ifnames: Sequence[str]) -> dict[str, EthtoolReading]:
        names = list(dict.fromkeys(ifnames))
        if not names:
            return {}
        with ThreadPoolExecutor(max_workers=min(self.workers, len(names))) as pool:
            return dict(zip(names, pool.map(self.read, names), strict=True))


class EthtoolDirectory:
    """Pre-captured ethtool output: ``<dir>/<if>/statistics``, ``fec`` and ``settings``."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)

    def read(self, ifname: str) -> EthtoolReading:
        if not _valid_ifname(ifname):
            return EthtoolReading(errors=(f"invalid interface name {ifname!r}",))
        d = self.path / ifname
        stats_text = read_text(d / "statistics")
        fec_text = read_text(d / "fec")
        settings_text = read_text(d / "settings")
        return EthtoolReading(
            statistics=parse_statistics(stats_text) if stats_text is not None else None,
            fec=parse_fec(fec_text) if fec_text is not None else None,
            settings=parse_settings(settings_text) if settings_text is not None else None,
        )

    def read_many(self, ifnames: Sequence[str]) -> dict[str, EthtoolReading]:
        return {name: self.read(name) for name in dict.fromkeys(ifnames)}


def apply_all(readings: Iterable[PortReading], source: EthtoolSource) -> list[str]:
    """Read ethtool for every port with a netdev and fold it in; returns the errors met."""
    ports = [r for r in readings if r.netdev]
    got = source.read_many([r.netdev for r in ports if r.netdev])
    errors: list[str] = []
    for r in ports:
        eth = got.get(r.netdev or "")
        if eth is not None:
            apply_ethtool(r, eth)
            errors.extend(eth.errors)
    return errors
