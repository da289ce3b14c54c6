"""fabricsim's hosts as sysfs trees and ethtool text, so the host agent reads simulated hosts.

One directory per host, laid out as on a real host (the agent's ``--sysfs-root`` and
``--ethtool-dir``)::

    <out>/<host>/sys/devices/pci0000:00/0000:<bus>:00.0/infiniband/mlx5_<r>/ports/1/
        rate, state, phys_state, link_layer, counters/*, hw_counters/*
    <out>/<host>/sys/devices/pci0000:00/0000:<bus>:00.0/infiniband/mlx5_<r>/device -> ../../../0000:<bus>:00.0
    <out>/<host>/sys/devices/pci0000:00/0000:<bus>:00.0/net/<if>/{speed,operstate,carrier_changes,dev_port,address}
    <out>/<host>/sys/class/infiniband/mlx5_<r> -> ../../devices/.../infiniband/mlx5_<r>
    <out>/<host>/sys/class/net/<if> -> ../../devices/.../net/<if>
    <out>/<host>/ethtool/<if>/{statistics,fec,settings}   (ethtool -S, -I --show-fec, <if>)
    <out>/<host>/sys/devices/pci0000:00/0000:<bus>:00.0/numa_node          (write_gpu_layout)
    <out>/<host>/nvidia-smi/topo-m.txt   (nvidia-smi topo -m; the agent's --topo-file)

Values are what a device would show for the simulated counters: ``rate`` as the kernel prints
it (``800 Gb/sec (4X XDR)``), data counters in 4-octet words, legacy PMA error counters
saturated at their width, pause durations in microseconds. Ports are RoCE (``link_layer``
``Ethernet``, netdev ``enp<bus>s0np0``) by default, since the simulated counters include PFC and
ECN; with ``link_layer="InfiniBand"`` they are IB ports with an IPoIB netdev and no PHY counters,
as on a real IB host. :meth:`HostTreeWriter.write` rewrites the values for the next step; every
file is replaced atomically, so an agent reading concurrently sees old or new values, never half.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

import numpy as np
import pyarrow as pa

from graywire.collectors.host.sysfs import PMA_COUNTERS
from graywire.collectors.keys import split_port_key
from graywire.collectors.model import Fabric
from graywire.collectors.schemas import PFC_PRIORITIES, PHYS_LINK_UP
from graywire.fabricsim.gpu_layout import HostLayout
from graywire.fabricsim.topology import mac_of_guid, nic_netdev, pci_bus

#: Per-lane signalling rate (Gb/s) -> the IB speed name the kernel prints in ``rate``.
LANE_SPEED_NAMES = {2.5: "SDR", 5: "DDR", 10: "QDR", 14: "FDR", 25: "EDR", 50: "HDR", 100: "NDR", 200: "XDR"}
PHYS_STATE_TEXT = {
    1: "Sleep",
    2: "Polling",
    3: "Disabled",
    4: "PortConfigurationTraining",
    5: "LinkUp",
    6: "LinkErrorRecovery",
    7: "Phy Test",
}
LOGICAL_STATE_TEXT = {1: "DOWN", 2: "INIT", 3: "ARMED", 4: "ACTIVE"}
#: UFM fec_mode_active code -> the name ethtool prints (ethtool has no PLR or vendor modes).
FEC_NAMES = {0: "Off", 1: "BaseR", 2: "RS", 6: "RS", 7: "RS", 11: "RS", 12: "RS",
             3: "LLRS", 9: "LLRS", 10: "LLRS", 13: "LLRS", 14: "LLRS", 15: "LLRS"}  # fmt: skip
#: Canonical column -> hw_counters file (RoCE only).
HW_FILES = {"ecn_marked_packets": "np_ecn_marked_roce_packets", "cnp_sent": "np_cnp_sent",
            "cnp_handled": "rp_cnp_handled"}  # fmt: skip
#: ethtool -S name -> canonical column, written for RoCE ports.
ETHTOOL_COLUMNS = {
    "rx_bytes_phy": "rx_bytes",
    "tx_bytes_phy": "tx_bytes",
    "rx_packets_phy": "rx_packets",
    "tx_packets_phy": "tx_packets",
    "rx_pcs_symbol_err_phy": "symbol_errors",
    "rx_crc_errors_phy": "crc_errors",
    "link_down_events_phy": "link_downed",
    "tx_discards_phy": "xmit_discards",
    "rx_corrected_bits_phy": "fec_corrected_bits",
    "rx_bits_phy": "phy_received_bits",
}


def rate_text(speed_bps: int, width: int) -> str:
    """The ``rate`` file as ``drivers/infiniband/core/sysfs.c`` prints it."""
    total = speed_bps / 1e9
    lane = total / max(width, 1)
    name = LANE_SPEED_NAMES.get(round(lane * 2) / 2)
    total_text = f"{total:.0f}" if total == int(total) else f"{total:g}"
    return f"{total_text} Gb/sec ({width}X{' ' + name if name else ''})"


def _atomic_write(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def _symlink(link: Path, target: str) -> None:
    if link.is_symlink() and os.readlink(link) == target:
        return
    if link.is_symlink() or link.exists():
        link.unlink()
    link.symlink_to(target)


class HostTreeWriter:
    """Writes every host (or some) of a fabricsim ``port_sample`` batch under ``out``."""

    def __init__(self, out: str | Path, fabric: Fabric, link_layer: str = "Ethernet") -> None:
        if link_layer not in ("Ethernet", "InfiniBand"):
            raise ValueError(f"link_layer must be Ethernet or InfiniBand, not {link_layer!r}")
        self.out = Path(out)
        self.fabric = fabric
        self.link_layer = link_layer
        self._made: set[tuple[str, str, str]] = set()  # devices and ports already laid out
        self._written: dict[Path, str] = {}  # what each file holds: unchanged files are not rewritten

    def _put(self, path: Path, text: str) -> None:
        if self._written.get(path) != text or not path.exists():
            _atomic_write(path, text)
            self._written[path] = text

    def _drop(self, path: Path) -> None:
        self._written.pop(path, None)
        path.unlink(missing_ok=True)

    def host_root(self, host: str) -> Path:
        """The sysfs root of one host (the agent's ``--sysfs-root``)."""
        return self.out / host

    def ethtool_dir(self, host: str) -> Path:
        """Pre-captured ethtool text of one host (the agent's ``--ethtool-dir``)."""
        return self.out / host / "ethtool"

    def topo_file(self, host: str) -> Path:
        """The host's ``nvidia-smi topo -m`` text (the agent's ``--topo-file``)."""
        return self.out / host / "nvidia-smi" / "topo-m.txt"

    def write_gpu_layout(self, host: str, layout: HostLayout) -> None:
        """The host's ``topo -m`` text and each NIC's ``numa_node`` (its socket in ``layout``)."""
        path = self.topo_file(host)
        path.parent.mkdir(parents=True, exist_ok=True)
        self._put(path, layout.render())
        for r, socket in enumerate(layout.nic_socket):
            dev_dir, _ = self._layout(host, f"mlx5_{r}")
            self._put(dev_dir / "device" / "numa_node", f"{socket}\n")

    @staticmethod
    def device_of(label: str) -> tuple[str, int]:
        """``mlx5_3`` -> (``mlx5_3``, port 1); ``mlx5_3:2`` -> (``mlx5_3``, port 2)."""
        dev, _, num = label.partition(":")
        return dev, int(num) if num else 1

    def netdev_of(self, dev: str) -> str:
        return nic_netdev(dev, self.link_layer)

    def hw_address(self, host: str, dev: str) -> str:
        """The netdev's ``address``: the port's MAC on RoCE; on IPoIB the 20-byte hardware
        address (queue pair number ``00:00:10:87`` (invented), then the port GID: the subnet prefix
        ``fe80::`` and the port GUID), which no MAC parser takes for a MAC."""
        i = int(self.fabric.lookup(pa.array([f"{host}/{dev}"]))[0])
        guid = self.fabric.guids[i] if i >= 0 and self.fabric.guids else None
        if not guid:
            return "00:00:00:00:00:00"
        if self.link_layer == "Ethernet":
            return mac_of_guid(guid)
        g = guid.removeprefix("0x").rjust(16, "0")
        return ":".join(
            ["00", "00", "10", "87", "fe", "80", *["00"] * 6, *(g[i : i + 2] for i in range(0, 16, 2))]
        )

    def _layout(self, host: str, dev: str) -> tuple[Path, Path]:
        """Create one device's directories and links once; returns (device dir, netdev dir)."""
        root = self.host_root(host) / "sys"
        pci = f"0000:{pci_bus(dev):02x}:00.0"
        pci_dir = root / "devices" / "pci0000:00" / pci
        dev_dir = pci_dir / "infiniband" / dev
        netdev = self.netdev_of(dev)
        nd_dir = pci_dir / "net" / netdev
        if ("device", host, dev) not in self._made:
            dev_dir.mkdir(parents=True, exist_ok=True)
            nd_dir.mkdir(parents=True, exist_ok=True)
            (root / "class" / "infiniband").mkdir(parents=True, exist_ok=True)
            (root / "class" / "net").mkdir(parents=True, exist_ok=True)
            _symlink(dev_dir / "device", f"../../../{pci}")
            _symlink(nd_dir / "device", f"../../../{pci}")
            rel = f"../../devices/pci0000:00/{pci}"
            _symlink(root / "class" / "infiniband" / dev, f"{rel}/infiniband/{dev}")
            _symlink(root / "class" / "net" / netdev, f"{rel}/net/{netdev}")
            self._put(nd_dir / "dev_port", "0\n")
            self._put(nd_dir / "address", f"{self.hw_address(host, dev)}\n")
            (self.ethtool_dir(host) / netdev).mkdir(parents=True, exist_ok=True)
            self._made.add(("device", host, dev))
        return dev_dir, nd_dir

    def write(self, batch: pa.RecordBatch, hosts: Iterable[str] | None = None) -> list[str]:
        """Write (or rewrite) the host ports of ``batch``; returns the hosts written.

        Ports missing from the batch (a simulated collector outage) keep their previous files.
        """
        f = self.fabric
        idx = f.lookup(batch.column("port"))
        rows = np.flatnonzero((idx >= 0) & f.host_port[np.maximum(idx, 0)])
        wanted = set(hosts) if hosts is not None else None
        cols = {name: batch.column(name).to_pylist() for name in batch.schema.names if name != "port"}
        written: dict[str, None] = {}
        for i in rows.tolist():
            host, label = split_port_key(f.keys[idx[i]])
            if wanted is not None and host not in wanted:
                continue
            self._write_port(host, label, {name: values[i] for name, values in cols.items()}, int(idx[i]))
            written[host] = None
        return list(written)

    def _write_port(self, host: str, label: str, v: dict, port_idx: int) -> None:
        dev, num = self.device_of(label)
        dev_dir, nd_dir = self._layout(host, dev)
        port_dir = dev_dir / "ports" / str(num)
        if ("port", host, label) not in self._made:
            (port_dir / "counters").mkdir(parents=True, exist_ok=True)
            (port_dir / "hw_counters").mkdir(parents=True, exist_ok=True)
            self._made.add(("port", host, label))
        up = v["phys_state"] == PHYS_LINK_UP and v["speed_bps"] is not None
        if up:
            speed, width = int(v["speed_bps"]), int(v["width"] or self.fabric.expected_width[port_idx] or 4)
        else:  # a down port still shows a rate: the expected one, as last configured
            speed = int(self.fabric.expected_speed_bps[port_idx])
            width = int(self.fabric.expected_width[port_idx] or 4)
        self._put(port_dir / "rate", rate_text(speed, width) + "\n")
        if v["phys_state"] is not None:
            self._put(port_dir / "phys_state", f"{v['phys_state']}: {PHYS_STATE_TEXT[v['phys_state']]}\n")
        if v["logical_state"] is not None:
            state = v["logical_state"]
            self._put(port_dir / "state", f"{state}: {LOGICAL_STATE_TEXT[state]}\n")
        self._put(port_dir / "link_layer", f"{self.link_layer}\n")
        for fname, spec in PMA_COUNTERS.items():
            value = v.get(spec.column)
            path = port_dir / "counters" / fname
            if value is None:
                self._drop(path)
                continue
            value = int(value) // spec.scale
            if spec.bits < 64:
                value = min(value, 2**spec.bits - 1)  # legacy PortCounters stick at their maximum
            self._put(path, f"{value}\n")
        roce = self.link_layer == "Ethernet"
        for column, fname in HW_FILES.items():
            path = port_dir / "hw_counters" / fname
            if roce and v.get(column) is not None:
                self._put(path, f"{int(v[column])}\n")
            else:
                self._drop(path)
        self._put(nd_dir / "speed", f"{speed // 10**6 if up else -1}\n")
        self._put(nd_dir / "operstate", "up\n" if up else "down\n")
        downs = v.get("link_downed")
        self._put(nd_dir / "carrier_changes", f"{2 * int(downs) if downs is not None else 0}\n")
        eth_dir = self.ethtool_dir(host) / self.netdev_of(dev)
        self._put(eth_dir / "settings", self._settings_text(self.netdev_of(dev), up, speed, width))
        if roce:
            self._put(eth_dir / "statistics", self._statistics_text(v))
            self._put(eth_dir / "fec", self._fec_text(self.netdev_of(dev), v))

    @staticmethod
    def _settings_text(netdev: str, up: bool, speed: int, width: int) -> str:
        if not up:
            return (
                f"Settings for {netdev}:\n\tSpeed: Unknown!\n\tDuplex: Unknown! (255)\n"
                "\tAuto-negotiation: on\n\tLink detected: no\n"
            )
        return (
            f"Settings for {netdev}:\n\tSpeed: {speed // 10**6}Mb/s\n\tLanes: {width}\n\tDuplex: Full\n"
            "\tAuto-negotiation: on\n\tPort: Direct Attach Copper\n\tLink detected: yes\n"
        )

    @staticmethod
    def _statistics_text(v: dict) -> str:
        lines = ["NIC statistics:"]
        for name, column in ETHTOOL_COLUMNS.items():
            if v.get(column) is not None:
                lines.append(f"     {name}: {int(v[column])}")
        for lane, value in enumerate(v.get("fec_lane_errors") or []):
            lines.append(f"     rx_err_lane_{lane}_phy: {int(value)}")
        for p in PFC_PRIORITIES:  # mlx5 lists a priority's pause counters only where PFC is on
            for d in ("rx", "tx"):
                frames, seconds = v.get(f"pfc{p}_{d}_pause_frames"), v.get(f"pfc{p}_{d}_pause_seconds")
                if frames is not None:
                    lines.append(f"     {d}_prio{p}_pause: {int(frames)}")
                if seconds is not None:
                    lines.append(f"     {d}_prio{p}_pause_duration: {round(seconds * 1e6)}")
        return "\n".join(lines) + "\n"

    @staticmethod
    def _fec_text(netdev: str, v: dict) -> str:
        active = FEC_NAMES.get(v.get("fec_mode"), "None") if v.get("fec_mode") is not None else "None"
        lines = [
            f"FEC parameters for {netdev}:",
            "Supported/Configured FEC encodings: Auto RS LLRS",
            f"Active FEC encoding: {active}",
            "Statistics:",
        ]
        for stat, column in (
            ("corrected_blocks", "fec_corrected_blocks"),
            ("uncorrectable_blocks", "fec_uncorrectable_blocks"),
        ):
            if v.get(column) is not None:
                lines.append(f"  {stat}: {int(v[column])}")
        return "\n".join(lines) + "\n"


def write_host_trees(
    out: str | Path, fabric: Fabric, batch: pa.RecordBatch, hosts: Iterable[str] | None = None
) -> HostTreeWriter:
    """Write one step's host trees; keep the returned writer to rewrite later steps."""
    writer = HostTreeWriter(out, fabric)
    writer.write(batch, hosts)
    return writer
