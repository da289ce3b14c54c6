"""Where fabricsim's GPUs and NICs sit in each host's PCIe tree, and ``nvidia-smi topo -m`` for it.

The healthy host is laid out like the DGX/HGX boards in the matrices users post from real hosts
(tests/fixtures/SOURCES.md): two sockets, GPUs 0..G/2-1 on socket 0 and the rest on socket 1,
GPU *g* and NIC ``mlx5_g`` under one PCIe switch (``PIX``), every switch under its own host
bridge (``NODE`` to the other devices of its socket, ``SYS`` across sockets), NVLink between GPUs.

Layout changes (all ground truth in the fault list):

- ``nic_cross_numa`` (a fault) moves one host's NIC of rail *r* into a slot on the other
  socket: GPU *r* finds no NIC nearer than ``NODE``, and the NIC is ``SYS`` from its GPU.
- ``nic_layout_shared`` (benign, every host alike) is a host model wired otherwise by design:
  magnitude 0 puts every NIC on a CPU root port of its GPU's socket (``NODE``), magnitude 1 on
  the other socket (``SYS``). Every peer agrees, so nothing is wrong.

The text is rendered the way nvidia-smi prints it (tabs, `` X `` on the diagonal, the legend and
the NIC legend), and read back by graywire's parser, so the simulator crosses the same code as a
real host.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

import pyarrow as pa

from graywire.collectors.host.gpu_topo import GpuNicReading, parse_topo_matrix, paths_to_batch
from graywire.collectors.schemas import GPU_NIC_PATH

LEGEND = """
Legend:

  X    = Self
  SYS  = Connection traversing PCIe as well as the SMP interconnect between NUMA nodes (e.g., QPI/UPI)
  NODE = Connection traversing PCIe as well as the interconnect between PCIe Host Bridges within a NUMA node
  PHB  = Connection traversing PCIe as well as a PCIe Host Bridge (typically the CPU)
  PXB  = Connection traversing multiple PCIe bridges (without traversing the PCIe Host Bridge)
  PIX  = Connection traversing at most a single PCIe bridge
  NV#  = Connection traversing a bonded set of # NVLinks
"""
#: Cores per socket of the simulated hosts (with SMT siblings), for the ``CPU Affinity`` column.
CORES = 56


@dataclass(frozen=True, slots=True)
class HostLayout:
    """Each device's socket and PCIe switch (devices on one switch are ``PIX``)."""

    gpu_socket: tuple[int, ...]
    gpu_switch: tuple[int, ...]
    nic_socket: tuple[int, ...]
    nic_switch: tuple[int, ...]

    @property
    def gpus(self) -> int:
        return len(self.gpu_socket)

    @property
    def nics(self) -> int:
        return len(self.nic_socket)

    def level(self, a: tuple[int, int], b: tuple[int, int]) -> str:
        """Between two devices given as (socket, switch)."""
        if a[1] == b[1]:
            return "PIX"
        return "NODE" if a[0] == b[0] else "SYS"

    def render(self, nvlinks: int = 18) -> str:
        """``nvidia-smi topo -m`` for this layout, as the real tool writes it even to a file
        (tests/fixtures/corpus/nvidia_smi_topo): the header underlined with ``ESC[4m … ESC[0m``,
        tab-separated cells, a NIC's row ending in the empty cells of the affinity columns."""
        gpus = [(s, w) for s, w in zip(self.gpu_socket, self.gpu_switch, strict=True)]
        nics = [(s, w) for s, w in zip(self.nic_socket, self.nic_switch, strict=True)]
        cols = [f"GPU{i}" for i in range(self.gpus)] + [f"NIC{i}" for i in range(self.nics)]
        lines = ["\t\x1b[4m" + "\t".join([*cols, "CPU Affinity", "NUMA Affinity", "GPU NUMA ID"]) + "\x1b[0m"]
        for g, dev in enumerate(gpus):
            cells = [" X " if g == h else f"NV{nvlinks}" for h in range(self.gpus)]
            cells += [self.level(dev, n) for n in nics]
            s = dev[0]
            cpus = f"{s * CORES}-{(s + 1) * CORES - 1},{(s + 2) * CORES}-{(s + 3) * CORES - 1}"
            lines.append(f"GPU{g}\t" + "\t".join([*cells, cpus, str(s), "\tN/A"]))
        for n, dev in enumerate(nics):
            cells = [self.level(g, dev) for g in gpus]
            cells += [" X " if n == m else self.level(dev, o) for m, o in enumerate(nics)]
            lines.append(f"NIC{n}\t" + "\t".join(cells) + "\t\t\t\t")
        lines.append(LEGEND)
        lines.append("NIC Legend:\n")
        lines += [f"  NIC{n}: mlx5_{n}" for n in range(self.nics)]
        return "\n".join(lines) + "\n\n"


def base_layout(gpus: int, shared: float | None = None) -> HostLayout:
    """The healthy host; ``shared`` is a ``nic_layout_shared`` magnitude (None: the PIX board)."""
    sockets = 2 if gpus > 1 else 1
    gpu_socket = tuple(g * sockets // gpus for g in range(gpus))
    if shared is None:
        return HostLayout(gpu_socket, tuple(range(gpus)), gpu_socket, tuple(range(gpus)))
    nic_socket = gpu_socket if shared < 0.5 else tuple((s + 1) % sockets for s in gpu_socket)
    return HostLayout(gpu_socket, tuple(range(gpus)), nic_socket, tuple(100 + r for r in range(gpus)))


def cross_numa(layout: HostLayout, rail: int) -> HostLayout:
    """NIC ``rail`` moved into a slot of its own on the other socket."""
    sockets = max(layout.gpu_socket) + 1
    nic_socket = list(layout.nic_socket)
    nic_switch = list(layout.nic_switch)
    nic_socket[rail] = (layout.gpu_socket[rail] + 1) % sockets
    nic_switch[rail] = 200 + rail
    return HostLayout(layout.gpu_socket, layout.gpu_switch, tuple(nic_socket), tuple(nic_switch))


def layout_batch(layouts: dict[str, HostLayout], time: datetime) -> pa.RecordBatch:
    """Every host's ``gpu_nic_path`` view, each read back from its rendered ``topo -m`` text."""
    parts = []
    read: dict[HostLayout, GpuNicReading] = {}  # hosts built alike print the same text: read it once
    for host, lay in layouts.items():
        if lay not in read:
            m = parse_topo_matrix(lay.render())
            rows: list[dict[str, object]] = [
                {"gpu": g, "gpu_bus_id": None, "gpu_numa": m.numa.get(g), "nic": nic,
                 "nic_numa": lay.nic_socket[i], "path": m.levels[g].get(nic)}
                for g in m.gpus for i, nic in enumerate(m.nics)
            ]  # fmt: skip
            read[lay] = GpuNicReading("nvidia-smi", len(m.gpus), rows)
        parts.append(paths_to_batch(read[lay], host, time))
    if not parts:
        return pa.RecordBatch.from_pylist([], schema=GPU_NIC_PATH)
    table = pa.Table.from_batches(parts).unify_dictionaries().combine_chunks()
    return table.to_batches()[0]
