"""The rail-optimized fat tree: sizes, rails and cabling."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from graywire.collectors.model import Fabric
from graywire.fabricsim.topology import TopologySpec, build_fabric, host_name

G = 10**9


def roles(f: Fabric) -> Counter[str]:
    return Counter(f.node_roles)


def check_cabling(f: Fabric) -> None:
    ends = np.concatenate([f.link_a, f.link_b])
    assert len(np.unique(ends)) == ends.size  # every port on at most one link
    role = f.port_role
    hosts = np.flatnonzero(f.host_port)
    # Every host NIC g is cabled to a leaf serving rail g.
    peers = f.peer[hosts]
    assert (peers >= 0).all()
    assert (role[peers] == "leaf").all()
    assert (f.rail[peers] == f.rail[hosts]).all()
    for h in hosts:
        g = int(f.rail[h])
        assert f.keys[h].endswith(f"/mlx5_{g}")
        assert f.node_of(int(f.peer[h])).startswith(f"leaf-r{g}-")
    # Leaves reach spines only through their uplinks; spines talk only to leaves.
    spine_ports = np.flatnonzero(role == "spine")
    assert (role[f.peer[spine_ports]] == "leaf").all()
    assert (f.rail[spine_ports] == -1).all()


def test_eight_hosts() -> None:
    f = build_fabric(TopologySpec(hosts=8))
    assert int(f.host_port.sum()) == 64
    assert roles(f) == {"host": 8, "leaf": 8, "spine": 1}
    # 64 NIC ports + 8 leaves x (8 down + 8 up) + 64 spine ports.
    assert f.n_ports == 64 + 128 + 64
    assert len(f.link_a) == 128
    assert (f.peer >= 0).all()
    assert f.keys[:3] == ["gpu-0000/mlx5_0", "gpu-0000/mlx5_1", "gpu-0000/mlx5_2"]
    assert f.node_names[8:10] == ["leaf-r0-000", "leaf-r1-000"]
    assert f.node_names[-1] == "spine-0000"
    assert f.link_label(f.keys.index("gpu-0003/mlx5_5")) == "gpu-0003/mlx5_5<->leaf-r5-000/p4"
    assert f.expected_speed_bps.tolist() == [800 * G] * f.n_ports
    assert f.expected_width.tolist() == [4] * f.n_ports
    # HCA ports have their own GUIDs; a switch's ports share its node GUID, told apart by number.
    assert f.guids[0] == "0xb8cef60300000000"
    assert f.port_num is not None and f.port_num[0] == 1
    assert len(set(zip(f.guids, f.port_num.tolist(), strict=True))) == f.n_ports
    leaf = [i for i, k in enumerate(f.keys) if k.startswith("leaf-r0-000/")]
    assert len({f.guids[i] for i in leaf}) == 1
    assert sorted(int(f.port_num[i]) for i in leaf) == list(range(1, 17))
    check_cabling(f)


def test_1024_hosts() -> None:
    f = build_fabric(TopologySpec(hosts=1024))
    assert f.n_ports == 32_768
    assert int(f.host_port.sum()) == 8192
    assert roles(f) == {"host": 1024, "leaf": 256, "spine": 128}
    assert len(f.link_a) == 16_384
    assert (f.peer >= 0).all()
    check_cabling(f)
    # Each spine has 64 ports; each leaf's 32 uplinks reach 32 different spines.
    port_node = np.array(f.node_names, dtype=object)[f.node_of_port]
    spine_ports = np.flatnonzero(f.port_role == "spine")
    assert set(Counter(port_node[spine_ports]).values()) == {64}
    leaf_up = [i for i in np.flatnonzero(f.port_role == "leaf") if f.port_role[f.peer[i]] == "spine"]
    spines_of_leaf: dict[str, set[str]] = {}
    for i in leaf_up:
        spines_of_leaf.setdefault(port_node[i], set()).add(port_node[f.peer[i]])
    assert len(spines_of_leaf) == 256
    assert {len(s) for s in spines_of_leaf.values()} == {32}


def test_partial_leaf_group_leaves_down_ports_unlinked() -> None:
    # 40 hosts at 32 per leaf: a second leaf group with only 8 of 32 down ports used.
    f = build_fabric(TopologySpec(hosts=40, gpus=2))
    assert roles(f) == {"host": 40, "leaf": 4, "spine": 2}
    assert f.n_ports == 80 + 4 * 64 + 128
    assert int((f.peer < 0).sum()) == 2 * 24
    assert f.peer[f.keys.index("leaf-r1-001/p9")] == -1
    assert f.node_of(int(f.peer[f.keys.index("gpu-0039/mlx5_1")])) == "leaf-r1-001"
    check_cabling(f)


def test_host_names_and_spec_validation() -> None:
    assert host_name(3, 8) == "gpu-0003"
    assert host_name(12345, 20_000) == "gpu-12345"
    assert host_name(7, 20_000) == "gpu-00007"
    with pytest.raises(ValueError, match=r"hosts must be 1\.\.65536"):
        TopologySpec(hosts=0)
    with pytest.raises(ValueError, match=r"gpus per host must be 1\.\.16"):
        TopologySpec(gpus=17)


def test_custom_speed_and_width() -> None:
    f = build_fabric(TopologySpec(hosts=2, gpus=1, nic_speed_bps=400 * G, width=2))
    assert roles(f) == {"host": 2, "leaf": 1, "spine": 1}
    assert set(f.expected_speed_bps.tolist()) == {400 * G}
    assert set(f.expected_width.tolist()) == {2}


def test_storage_nics_sit_on_a_storage_network_of_their_own_and_leave_the_compute_fabric_as_it_was() -> None:
    plain = build_fabric(TopologySpec(hosts=64))
    f = build_fabric(TopologySpec(hosts=64, storage_nics=2))
    # Compute ports, nodes and cables keep their indices; the storage network is appended.
    assert f.keys[: plain.n_ports] == plain.keys and f.node_names[: len(plain.node_names)] == plain.node_names
    assert (f.link_a[: len(plain.link_a)] == plain.link_a).all() and not plain.purpose
    storage = np.flatnonzero(np.array([p == "storage" for p in f.purpose]))
    compute = np.flatnonzero(np.array([p == "compute" for p in f.purpose]))
    assert storage.size == 64 * 2 and compute.size == 64 * 8
    assert f.keys[int(storage[0])] == "gpu-0000/mlx5_8" and f.keys[int(storage[1])] == "gpu-0000/mlx5_9"
    assert (f.rail[storage] == -1).all() and (f.expected_speed_bps[storage] == 400 * G).all()
    # Each storage NIC of a host on its own storage leaf (dual-homed), the leaves up to storage spines.
    leaves = [f.node_of(int(f.peer[i])) for i in storage[:2]]
    assert leaves == ["sleaf-0-000", "sleaf-1-000"]
    sw = np.flatnonzero(np.char.startswith(np.array(f.node_names)[f.node_of_port].astype(str), "sleaf-"))
    up = sw[f.port_role[f.peer[sw]] == "spine"]
    assert up.size == 64 * 2 and all(f.node_of(int(f.peer[i])).startswith("sspine-") for i in up)
    assert (f.peer >= 0).all()
