"""Where each GPU sits relative to each RDMA NIC: ``nvidia-smi topo -m`` and the PCIe/NUMA facts in sysfs.

GPUDirect RDMA moves data between a GPU and its NIC over PCIe without a bounce through host
memory; NCCL enables it only when the GPU-NIC path is at most ``PXB`` (``ncclTopoCheckGdr`` in
NCCL's ``src/graph/paths.cc``: ``netGdrLevel = PATH_PXB`` unless ``NCCL_NET_GDR_LEVEL`` says
otherwise). A NIC in a slot on the other socket (``SYS``) crosses the CPU interconnect and loses
GPUDirect RDMA by default: the host's rail runs at a fraction of its bandwidth, and nothing fails.

Two readers, one record (``gpu_nic_path``, one row per GPU x NIC):

- :func:`parse_topo_matrix`: ``nvidia-smi topo -m`` as the driver prints it (tab-separated
  header ``GPU0 ... NIC0 ... CPU Affinity  NUMA Affinity  GPU NUMA ID``; cells ``X``, ``NV#``,
  ``PIX``, ``PXB``, ``PHB``, ``NODE``, ``SYS``; a ``NIC Legend:`` mapping ``NIC0: mlx5_0``).
  Older drivers name the NICs in the header (``mlx5_0``) and have no legend, and print ``SOC``
  for what newer ones call ``SYS``; both are read. A capture's terminal escapes (the header is
  underlined with ``ESC[4m … ESC[0m`` even in a file) and CRLF line ends are removed first.
  Fixtures: tests/fixtures/corpus/nvidia_smi_topo and tests/fixtures/topo (SOURCES.md).
- :func:`read_pci_devices` / :func:`sysfs_paths`: without ``nvidia-smi``, the same levels from
  the PCIe tree (the device directories under ``/sys/devices/pci<domain>:<bus>/``) and
  ``numa_node`` (``/sys/bus/pci/devices/*/numa_node``, ``/sys/class/infiniband/*/device/numa_node``;
  ``-1`` means the platform reports none, which is unknown, not node 0). Devices on different
  known NUMA nodes are ``SYS``; under different host bridges of one node ``NODE``; meeting only at
  the host bridge ``PHB``; under one bridge at most one level above both ``PIX``; else ``PXB``.
  nvidia-smi asks the driver, so it wins where both exist.

:class:`TopoCommand` runs ``nvidia-smi topo -m`` only when the binary exists, with a timeout, and
never raises: a failure is an error string and no matrix.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import pyarrow as pa

from graywire.collectors.schemas import GPU_NIC_PATH, TS, make_batch
from graywire.collectors.text import plain_text

#: nvidia-smi's PCIe levels, nearest first (NVML ``nvmlGpuTopologyLevel_t``: SINGLE, MULTIPLE,
#: HOSTBRIDGE, NODE, SYSTEM). ``NV#`` (NVLink) ranks before all of them.
LEVELS: tuple[str, ...] = ("NV", "PIX", "PXB", "PHB", "NODE", "SYS")
LEVEL_RANK: dict[str, int] = {name: i for i, name in enumerate(LEVELS)}
#: The farthest path NCCL still uses GPUDirect RDMA over by default (NCCL_NET_GDR_LEVEL).
GDR_DEFAULT_LEVEL = "PXB"
NVIDIA_VENDOR = "0x10de"
#: PCI base class 03 (display controller): 0x0300 VGA, 0x0302 3D controller (datacenter GPUs).
DISPLAY_CLASS = "0x03"

_MULTIWORD = (
    ("CPU Affinity", "CPU_Affinity"),
    ("NUMA Affinity", "NUMA_Affinity"),
    ("GPU NUMA ID", "GPU_NUMA_ID"),
)
_LEGEND_NIC = re.compile(r"^\s*(NIC\d+)\s*:\s*(\S+)\s*$")
_GPU = re.compile(r"^GPU(\d+)$")
_NV = re.compile(r"^NV\d+$")
_BDF = re.compile(r"^[0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]$")


class TopoParseError(ValueError):
    """The text is not a ``nvidia-smi topo -m`` matrix (the message says what is wrong)."""


def cell_level(token: str) -> str | None:
    """A matrix cell as a level name: ``NV18`` -> ``NV``, ``SOC`` -> ``SYS``; unknown -> None."""
    token = token.strip()
    if _NV.match(token):
        return "NV"
    if token == "SOC":  # drivers before ~R384 named the inter-socket path SOC
        return "SYS"
    return token if token in LEVEL_RANK else None


@dataclass(frozen=True, slots=True)
class TopoMatrix:
    """The GPU rows of one ``topo -m`` matrix: GPU index -> NIC name -> level, and affinities."""

    gpus: tuple[int, ...]
    nics: tuple[str, ...]  # RDMA device names (the NIC legend applied), in column order
    levels: dict[int, dict[str, str | None]]
    numa: dict[int, int | None]  # the GPU's NUMA Affinity (None: N/A or a range)
    cpu_affinity: dict[int, str | None]


def _numa(token: str | None) -> int | None:
    if token is None or not token.isdigit():
        return None  # "N/A", or "0-1" on a GPU the driver cannot place on one node
    return int(token)


def parse_topo_matrix(text: str) -> TopoMatrix:
    """Read ``nvidia-smi topo -m``, as printed or as a capture keeps it (the header wrapped in
    ``ESC[4m … ESC[0m``, CRLF); raise :class:`TopoParseError` naming what is wrong."""
    lines = [ln.rstrip() for ln in plain_text(text).split("\n")]
    # The header is the first line naming GPU0 first (indented; a stripped copy loses the tab);
    # GPU0's own row follows it with `X` on the diagonal.
    header_at = next(
        (i for i, ln in enumerate(lines) if (t := ln.split()) and t[0] == "GPU0" and t[1:2] != ["X"]), None
    )
    if header_at is None:
        raise TopoParseError("no matrix header (a line naming GPU0 and the other devices)")
    header = lines[header_at]
    for words, joined in _MULTIWORD:
        header = header.replace(words, joined)
    columns = header.split()
    legend: dict[str, str] = {}
    for ln in lines[header_at + 1 :]:
        if m := _LEGEND_NIC.match(ln):
            legend[m.group(1)] = m.group(2)
    n_dev = next((i for i, c in enumerate(columns) if c in ("CPU_Affinity", "NUMA_Affinity")), len(columns))
    devices = columns[:n_dev]
    extra = columns[n_dev:]
    gpus: list[int] = []
    nics: list[tuple[int, str]] = []
    for i, c in enumerate(devices):
        if m := _GPU.match(c):
            gpus.append(int(m.group(1)))
        else:
            nics.append((i, legend.get(c, c)))  # NICn through the legend; old drivers print mlx5_0
    if not gpus:
        raise TopoParseError("the header names no GPU columns")
    levels: dict[int, dict[str, str | None]] = {}
    numa: dict[int, int | None] = {}
    cpus: dict[int, str | None] = {}
    for ln in lines[header_at + 1 :]:
        parts = ln.split()
        if not parts or not _GPU.match(parts[0]):
            if parts and parts[0] == "Legend:":
                break
            continue
        g = int(parts[0][3:])
        cells = parts[1 : 1 + n_dev]
        if len(cells) < n_dev:
            raise TopoParseError(f"row {parts[0]} has {len(cells)} cells, the header {n_dev} devices")
        rest = parts[1 + n_dev :]
        tail = dict(zip(extra, rest, strict=False))
        levels[g] = {name: cell_level(cells[i]) for i, name in nics}
        numa[g] = _numa(tail.get("NUMA_Affinity"))
        cpu = tail.get("CPU_Affinity")
        cpus[g] = None if cpu in (None, "N/A") else cpu
    missing = sorted(set(gpus) - set(levels))
    if missing:
        raise TopoParseError(f"no row for GPU{missing[0]} of the header")
    return TopoMatrix(tuple(gpus), tuple(n for _, n in nics), levels, numa, cpus)


@dataclass(frozen=True, slots=True)
class TopoCommand:
    """Runs ``nvidia-smi topo -m``, bounded by ``timeout`` seconds; never raises."""

    binary: str = "nvidia-smi"
    timeout: float = 10.0

    def available(self) -> bool:
        return shutil.which(self.binary) is not None

    def run(self) -> tuple[str | None, str | None]:
        """(stdout, None) or (None, the reason it gave nothing)."""
        if not self.available():
            return None, f"{self.binary} not found"
        try:
            p = subprocess.run(
                [self.binary, "topo", "-m"], capture_output=True, text=True, timeout=self.timeout, check=False
            )
        except subprocess.TimeoutExpired:
            return None, f"{self.binary} topo -m: timed out after {self.timeout:g} s"
        except OSError as e:
            return None, f"{self.binary} topo -m: {e}"
        if p.returncode != 0:
            msg = (p.stderr or p.stdout).strip().splitlines()
            return None, f"{self.binary} topo -m: exit {p.returncode}: {msg[0] if msg else ''}"
        return p.stdout, None


# -- sysfs --------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PciDevice:
    """One PCI function: its address, NUMA node (None: unknown), and the bridges above it."""

    bdf: str
    numa_node: int | None
    root: str | None  # the host bridge directory, ``pci0000:00``
    bridges: tuple[str, ...] = field(default=())  # BDFs from the root port down to the parent


def _read(path: Path) -> str | None:
    try:
        return path.read_text(errors="replace").strip()
    except (OSError, ValueError):
        return None


def read_numa_node(dev_dir: Path) -> int | None:
    """``numa_node`` of a device; -1 (no NUMA information), garbage or absent -> None."""
    text = _read(dev_dir / "numa_node")
    try:
        n = int(text or "", 10)
    except ValueError:
        return None
    return n if n >= 0 else None


def pci_device(root: Path, dev_dir: Path) -> PciDevice | None:
    """A PCI device directory (any link to it) as its place in the PCIe tree; None if not PCI."""
    try:
        real = Path(os.path.realpath(dev_dir))
        rel = real.relative_to(Path(os.path.realpath(root)) / "sys" / "devices")
    except (OSError, ValueError):
        return None
    parts = rel.parts
    if not parts or not parts[0].startswith("pci") or not _BDF.match(parts[-1]):
        return None
    chain = tuple(p for p in parts[1:-1] if _BDF.match(p))
    return PciDevice(parts[-1].lower(), read_numa_node(real), parts[0], chain)


def path_level(a: PciDevice, b: PciDevice) -> str | None:
    """The nvidia-smi level between two PCI devices from the tree and NUMA nodes; None if unknown."""
    if a.numa_node is not None and b.numa_node is not None and a.numa_node != b.numa_node:
        return "SYS"
    if a.root != b.root:
        # Different host bridges: on one known node NODE, otherwise nothing says which.
        return "NODE" if a.numa_node is not None and a.numa_node == b.numa_node else None
    common = 0
    for x, y in zip(a.bridges, b.bridges, strict=False):
        if x != y:
            break
        common += 1
    if common == 0:
        return "PHB"
    return "PIX" if len(a.bridges) - common <= 1 and len(b.bridges) - common <= 1 else "PXB"


def read_gpus(root: Path) -> list[PciDevice]:
    """NVIDIA display/3D controllers under ``<root>/sys/bus/pci/devices``, in PCI address order
    (the order nvidia-smi numbers them in)."""
    bus = root / "sys" / "bus" / "pci" / "devices"
    try:
        names = sorted(p.name for p in bus.iterdir())
    except OSError:
        return []
    out = []
    for name in names:
        d = bus / name
        if (_read(d / "vendor") or "").lower() != NVIDIA_VENDOR:
            continue
        if not (_read(d / "class") or "").lower().startswith(DISPLAY_CLASS):
            continue  # the NVSwitch and audio functions of a GPU board are not GPUs
        dev = pci_device(root, d)
        if dev is not None:
            out.append(dev)
    return out


def read_nics(root: Path) -> dict[str, PciDevice | None]:
    """Each RDMA device under ``<root>/sys/class/infiniband`` -> its PCI device (None: no link)."""
    ib = root / "sys" / "class" / "infiniband"
    try:
        names = sorted(p.name for p in ib.iterdir())
    except OSError:
        return {}
    return {n: pci_device(root, ib / n / "device") for n in names}


# -- the record ---------------------------------------------------------------------------------


@dataclass(slots=True)
class GpuNicReading:
    """What one read of the host found: rows of the record, where they came from, and why not."""

    source: str | None  # "nvidia-smi", "sysfs", or None (no GPU found)
    gpus: int
    rows: list[dict[str, object]]
    errors: list[str] = field(default_factory=list)


def read_gpu_nic_paths(
    root: Path, topo_text: str | None = None, command: TopoCommand | None = None
) -> GpuNicReading:
    """Every GPU x RDMA NIC path of the host: from ``topo_text`` (pre-captured), else ``command``,
    else the sysfs tree. NUMA nodes always come from sysfs (the NIC's) and the matrix (the GPU's)."""
    errors: list[str] = []
    nics = read_nics(root)
    text = topo_text
    if text is None and command is not None and command.available():
        text, err = command.run()
        if err:
            errors.append(err)
    if text is not None:
        try:
            m = parse_topo_matrix(text)
        except TopoParseError as e:
            errors.append(f"nvidia-smi topo -m: {e}")
        else:
            rows = []
            for g in m.gpus:
                for nic in m.nics:
                    dev = nics.get(nic)
                    rows.append({"gpu": g, "gpu_bus_id": None, "gpu_numa": m.numa.get(g), "nic": nic,
                                 "nic_numa": dev.numa_node if dev else None,
                                 "path": m.levels[g].get(nic)})  # fmt: skip
            return GpuNicReading("nvidia-smi", len(m.gpus), rows, errors)
    gpus = read_gpus(root)
    if not gpus:
        return GpuNicReading(None, 0, [], errors)
    rows = []
    for g, gpu in enumerate(gpus):
        for nic, dev in nics.items():
            rows.append({"gpu": g, "gpu_bus_id": gpu.bdf, "gpu_numa": gpu.numa_node, "nic": nic,
                         "nic_numa": dev.numa_node if dev else None,
                         "path": path_level(gpu, dev) if dev else None})  # fmt: skip
    return GpuNicReading("sysfs", len(gpus), rows, errors)


def paths_to_batch(reading: GpuNicReading, hostname: str, time: datetime) -> pa.RecordBatch:
    """One ``gpu_nic_path`` batch: the host's whole view (zero rows when it has no GPU)."""
    if time.tzinfo is None:
        raise ValueError("time must be timezone-aware")
    n = len(reading.rows)
    rows = reading.rows
    cols = {
        "time": pa.array([time.astimezone(UTC)] * n, type=TS),
        "host": pa.array([hostname] * n, type=pa.string()).dictionary_encode(),
        "gpu": pa.array([r["gpu"] for r in rows], type=pa.int16()),
        "gpu_bus_id": pa.array([r["gpu_bus_id"] for r in rows], type=pa.string()),
        "gpu_numa": pa.array([r["gpu_numa"] for r in rows], type=pa.int16()),
        "nic": pa.array([r["nic"] for r in rows], type=pa.string()),
        "nic_numa": pa.array([r["nic_numa"] for r in rows], type=pa.int16()),
        "path": pa.array([r["path"] for r in rows], type=pa.string()).dictionary_encode(),
        "source": pa.array([reading.source] * n, type=pa.string()).dictionary_encode(),
    }
    return make_batch(GPU_NIC_PATH, n, cols)
