"""A rail-optimized two-tier fat tree, as GPU clusters are cabled.

Each host has ``gpus`` GPUs with one NIC each; NIC ``g`` of every host goes to a leaf of rail
``g``. A leaf serves ``hosts_per_leaf`` hosts on one rail and has as many uplinks (non-blocking),
spread over the spines. 1,024 hosts give 256 leaves, 128 spines and 32,768 ports.

With ``storage_nics`` (off by default, so existing fabrics stay as they are) every host also has
that many storage NICs (``mlx5_{gpus}``, ...; inventory purpose ``storage``) on a storage network
of its own: one storage leaf per group of hosts and storage NIC, non-blocking, its uplinks over storage spines
(where the storage targets sit, unmodelled). The GPU NICs then carry purpose ``compute``. A DGX
H100 is built so: eight ConnectX-7 for the compute fabric, two dual-port ones for storage and
in-band management (NVIDIA DGX H100 user guide, "Network connections").
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from graywire.collectors.keys import split_port_key
from graywire.collectors.model import Fabric

GBPS = 10**9


@dataclass(frozen=True, slots=True)
class TopologySpec:
    hosts: int = 128
    gpus: int = 8
    hosts_per_leaf: int = 32
    spine_radix: int = 64
    nic_speed_bps: int = 800 * GBPS
    width: int = 4
    #: Storage NICs per host, on a storage network apart from the compute rails (0: none).
    storage_nics: int = 0
    storage_speed_bps: int = 400 * GBPS

    def __post_init__(self) -> None:
        if not 1 <= self.hosts <= 65_536:
            raise ValueError(f"hosts must be 1..65536, not {self.hosts}")
        if not 1 <= self.gpus <= 16:
            raise ValueError(f"gpus per host must be 1..16, not {self.gpus}")
        if not 0 <= self.storage_nics <= 4:
            raise ValueError(f"storage NICs per host must be 0..4, not {self.storage_nics}")


def host_name(i: int, hosts: int) -> str:
    return f"gpu-{i:0{max(4, len(str(hosts - 1)))}d}"


def pci_bus(dev: str) -> int:
    """The PCI bus a simulated NIC sits on (``mlx5_3`` -> 0x38): its sysfs path and netdev."""
    digits = "".join(ch for ch in dev.rsplit("_", 1)[-1] if ch.isdigit())
    return 0x20 + 8 * (int(digits) if digits else 0) % 0xD8


def nic_netdev(dev: str, link_layer: str = "Ethernet") -> str:
    """The netdev of an RDMA device as udev's predictable names give it: ``enp<bus>s0np0`` for
    RoCE, ``ibp<bus>s0`` for IPoIB. LLDP agents and ``ip link`` name the NIC so, never ``mlx5_N``."""
    bus = pci_bus(dev)
    return f"enp{bus}s0np0" if link_layer == "Ethernet" else f"ibp{bus}s0"


def mac_of_guid(guid: str) -> str:
    """A ConnectX port's MAC from its GUID: the GUID is the MAC with ``03:00`` (or ``ff:fe``)
    put in after the OUI, so ``0xb8cef60300000012`` is ``b8:ce:f6:00:00:12``."""
    h = guid.removeprefix("0x").rjust(16, "0")
    return ":".join(h[i : i + 2] for i in (0, 2, 4, 10, 12, 14))


def nic_aliases(keys: list[str], guids: list[str | None]) -> list[tuple[str, ...]]:
    """Each host NIC's other names (its netdev and MAC), as discovery with host agents records
    them: what a NIC's LLDP agent calls the port."""
    return [
        (nic_netdev(split_port_key(k)[1]), mac_of_guid(g)) if g else ()
        for k, g in zip(keys, guids, strict=True)
    ]


def build_fabric(spec: TopologySpec) -> Fabric:
    """Build the fabric model; port and node order is deterministic."""
    n, g = spec.hosts, spec.gpus
    hpl = min(spec.hosts_per_leaf, n)
    groups = math.ceil(n / hpl)
    n_leaves = groups * g
    uplinks = hpl
    n_spines = max(1, math.ceil(n_leaves * uplinks / spec.spine_radix))

    hosts = [host_name(i, n) for i in range(n)]
    leaves = [f"leaf-r{r}-{grp:03d}" for grp in range(groups) for r in range(g)]
    spines = [f"spine-{s:04d}" for s in range(n_spines)]
    node_names = hosts + leaves + spines
    node_roles = ["host"] * n + ["leaf"] * n_leaves + ["spine"] * n_spines

    # Host NIC ports: host-major, rail-minor.
    h_idx = np.repeat(np.arange(n), g)
    rail_of_nic = np.tile(np.arange(g), n)
    keys = [f"{hosts[h]}/mlx5_{r}" for h, r in zip(h_idx.tolist(), rail_of_nic.tolist(), strict=True)]
    node_of = [h_idx]
    rails = [rail_of_nic]

    # Leaf ports: p1..p{hpl} down to hosts, p{hpl+1}..p{2*hpl} up to spines.
    leaf_base = len(keys)
    leaf_of_port = np.repeat(np.arange(n_leaves), 2 * hpl)
    leaf_label = np.tile(np.arange(1, 2 * hpl + 1), n_leaves)
    keys += [f"{leaves[lf]}/p{p}" for lf, p in zip(leaf_of_port.tolist(), leaf_label.tolist(), strict=True)]
    node_of.append(n + leaf_of_port)
    rails.append(np.repeat(np.arange(n_leaves) % g, 2 * hpl))

    # Host NIC (h, r) -> leaf (group h // hpl, rail r), down port (h % hpl) + 1.
    nic = np.arange(n * g)
    leaf_of_nic = (h_idx // hpl) * g + rail_of_nic
    down_port = leaf_base + leaf_of_nic * 2 * hpl + (h_idx % hpl)
    link_a = [nic]
    link_b = [down_port]

    # Leaf uplinks -> spines, round-robin so each leaf spreads over as many spines as it can.
    up_leaf = np.repeat(np.arange(n_leaves), uplinks)
    up_u = np.tile(np.arange(uplinks), n_leaves)
    up_port = leaf_base + up_leaf * 2 * hpl + hpl + up_u
    spine_of_up = (up_leaf * uplinks + up_u) % n_spines
    order = np.lexsort((up_port, spine_of_up))
    spine_slot = np.empty_like(order)
    counts = np.bincount(spine_of_up, minlength=n_spines)
    starts = np.concatenate(([0], np.cumsum(counts)[:-1]))
    spine_slot[order] = np.arange(order.size) - np.repeat(starts, counts)
    spine_base = len(keys)
    # Spine ports are laid out spine-major in slot order.
    spine_port_index = spine_base + np.concatenate(([0], np.cumsum(counts)[:-1]))[spine_of_up] + spine_slot
    spine_keys = [None] * int(counts.sum())
    for s_i, slot, pos in zip(
        spine_of_up.tolist(), spine_slot.tolist(), (spine_port_index - spine_base).tolist(), strict=True
    ):
        spine_keys[pos] = f"{spines[s_i]}/p{slot + 1}"
    keys += spine_keys  # type: ignore[arg-type]
    node_of.append(n + n_leaves + np.repeat(np.arange(n_spines), counts))
    rails.append(np.full(int(counts.sum()), -1))
    link_a.append(up_port)
    link_b.append(spine_port_index)

    n_ports = len(keys)
    node_of_port = np.concatenate(node_of).astype(np.int32)
    # IB addressing: an HCA port has its own GUID; a switch's ports share the node GUID and are
    # told apart by port number.
    port_num = np.concatenate([np.ones(n * g), leaf_label, 1 + np.concatenate(([], spine_slot[order]))])
    guid_of_node = [0x1070FD0300000000 + i for i in range(len(node_names))]
    is_host_port = np.arange(n_ports) < n * g
    guids = [
        f"0x{0xB8CEF60300000000 + i:016x}" if is_host_port[i] else f"0x{guid_of_node[node_of_port[i]]:016x}"
        for i in range(n_ports)
    ]
    fabric = Fabric(
        keys=keys,
        node_of_port=node_of_port,
        node_names=node_names,
        node_roles=node_roles,
        expected_speed_bps=np.full(n_ports, spec.nic_speed_bps, dtype=np.int64),
        expected_width=np.full(n_ports, spec.width, dtype=np.int16),
        rail=np.concatenate(rails).astype(np.int16),
        link_a=np.concatenate(link_a).astype(np.int32),
        link_b=np.concatenate(link_b).astype(np.int32),
        guids=guids,
        media=["ACC"] * n_ports,
        port_num=port_num.astype(np.int16),
        aliases=[*nic_aliases(keys[: n * g], guids[: n * g]), *([()] * (n_ports - n * g))],
    )
    return _with_storage(fabric, spec, hpl, groups) if spec.storage_nics else fabric


def _with_storage(fabric: Fabric, spec: TopologySpec, hpl: int, groups: int) -> Fabric:
    """The fabric plus each host's storage NICs and the storage network they are cabled to.

    Appended after every compute port and node, so compute indices do not move. Storage NIC
    ``i`` of the hosts of group ``GGG`` goes to storage leaf ``sleaf-i-GGG`` (one leaf per NIC:
    a host's storage NICs are dual-homed), which has as many uplinks, round-robin over the
    storage spines.
    """
    n, g, s = spec.hosts, spec.gpus, spec.storage_nics
    f = fabric
    n_sleaves = groups * s
    n_sspines = max(1, math.ceil(n_sleaves * hpl / spec.spine_radix))
    sleaves = [f"sleaf-{i}-{grp:03d}" for grp in range(groups) for i in range(s)]
    sspines = [f"sspine-{k:02d}" for k in range(n_sspines)]
    node0 = len(f.node_names)
    keys: list[str] = []
    node: list[int] = []
    num: list[int] = []
    la: list[int] = []
    lb: list[int] = []
    base = f.n_ports
    nic_at = {}
    for h in range(n):
        for i in range(s):
            nic_at[(h, i)] = base + len(keys)
            keys.append(f"{f.node_names[h]}/mlx5_{g + i}")
            node.append(h)
            num.append(1)
    n_nics = len(keys)
    spine_slots = [0] * n_sspines
    spine_ports: list[tuple[int, int]] = []  # (leaf uplink port, spine) in cabling order
    for lf in range(n_sleaves):
        grp, i = divmod(lf, s)
        members = list(range(grp * hpl, min((grp + 1) * hpl, n)))
        for j in range(2 * hpl):
            port = base + len(keys)
            keys.append(f"{sleaves[lf]}/p{j + 1}")
            node.append(node0 + lf)
            num.append(j + 1)
            if j < hpl:
                if j < len(members):
                    la.append(nic_at[(members[j], i)])
                    lb.append(port)
            else:
                spine_ports.append((port, (lf * hpl + j - hpl) % n_sspines))
    for port, sp in spine_ports:
        spine_slots[sp] += 1
        la.append(port)
        lb.append(base + len(keys))
        keys.append(f"{sspines[sp]}/p{spine_slots[sp]}")
        node.append(node0 + n_sleaves + sp)
        num.append(spine_slots[sp])
    extra = len(keys)
    node_names = f.node_names + sleaves + sspines
    node_of_port = np.concatenate([f.node_of_port, np.asarray(node, dtype=np.int32)])
    guid_of_node = [0x1070FD0300000000 + i for i in range(len(node_names))]
    guids = f.guids + [
        f"0x{0xB8CEF60300000000 + base + i:016x}" if i < n_nics else f"0x{guid_of_node[node[i]]:016x}"
        for i in range(extra)
    ]
    speed = np.full(extra, spec.storage_speed_bps, dtype=np.int64)
    assert f.port_num is not None
    return Fabric(
        keys=f.keys + keys,
        node_of_port=node_of_port,
        node_names=node_names,
        node_roles=f.node_roles + ["leaf"] * n_sleaves + ["spine"] * n_sspines,
        expected_speed_bps=np.concatenate([f.expected_speed_bps, speed]),
        expected_width=np.concatenate([f.expected_width, np.full(extra, spec.width, dtype=np.int16)]),
        rail=np.concatenate([f.rail, np.full(extra, -1, dtype=np.int16)]),
        link_a=np.concatenate([f.link_a, np.asarray(la, dtype=np.int32)]),
        link_b=np.concatenate([f.link_b, np.asarray(lb, dtype=np.int32)]),
        guids=guids,
        media=f.media + ["ACC"] * extra,
        port_num=np.concatenate([f.port_num, np.asarray(num, dtype=np.int16)]),
        purpose=[*(["compute"] * (n * g)), *([None] * (base - n * g)), *(["storage"] * n_nics)]
        + [None] * (extra - n_nics),
        aliases=[
            *f.aliases,
            *nic_aliases(keys[:n_nics], guids[base : base + n_nics]),
            *([()] * (extra - n_nics)),
        ],
    )
