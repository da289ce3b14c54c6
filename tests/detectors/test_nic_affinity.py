"""GPU<->NIC affinity judged against peers: layouts rendered as ``nvidia-smi topo -m`` and read back."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from graywire.collectors.schemas import GPU_NIC_PATH
from graywire.detectors.nic_affinity import NicAffinityConfig, NicAffinityDetector
from graywire.fabricsim.gpu_layout import base_layout, cross_numa, layout_batch
from graywire.fabricsim.topology import TopologySpec, build_fabric

T0 = datetime(2025, 1, 1, tzinfo=UTC)
HOSTS = [f"gpu-{i:04d}" for i in range(8)]


@pytest.fixture
def det() -> NicAffinityDetector:
    return NicAffinityDetector(build_fabric(TopologySpec(hosts=8)))


def test_a_fleet_wired_alike_raises_nothing_whatever_the_layout(det: NicAffinityDetector) -> None:
    for shared in (None, 0.0, 1.0):  # the PIX board, NICs off the CPU (NODE), NICs across sockets (SYS)
        d = NicAffinityDetector(det.fabric)
        assert d.observe(layout_batch(dict.fromkeys(HOSTS, base_layout(8, shared)), T0)) == []


def test_a_nic_on_the_other_socket_is_a_host_finding_naming_the_nic(det: NicAffinityDetector) -> None:
    layouts = dict.fromkeys(HOSTS, base_layout(8))
    layouts["gpu-0003"] = cross_numa(base_layout(8), 5)
    (f,) = det.observe(layout_batch(layouts, T0))
    assert (f.kind, f.status, f.node, f.port, f.entity) == (
        "gpu_nic_affinity", "firing", "gpu-0003", "gpu-0003/mlx5_5", "gpu-0003/GPU5",
    )  # fmt: skip
    ev = f.evidence
    assert (ev["path"], ev["expected_path"], ev["expected_nic"], ev["peer_hosts"]) == (
        "SYS",
        "PIX",
        "mlx5_5",
        7,
    )
    assert (ev["gpu_numa"], ev["nic_numa"]) == (1, 0)
    # The same view again: nothing new. Put back: cleared.
    assert det.observe(layout_batch(layouts, T0 + timedelta(seconds=10))) == []
    (c,) = det.observe(layout_batch({"gpu-0003": base_layout(8)}, T0 + timedelta(seconds=20)))
    assert (c.status, c.entity, c.evidence["path"]) == ("cleared", "gpu-0003/GPU5", "PIX")


def test_on_a_node_layout_fleet_the_moved_nic_still_stands_out(det: NicAffinityDetector) -> None:
    node = base_layout(8, 0.0)
    layouts = dict.fromkeys(HOSTS, node)
    layouts["gpu-0001"] = cross_numa(node, 0)
    (f,) = det.observe(layout_batch(layouts, T0))
    assert (f.node, f.evidence["path"], f.evidence["expected_path"]) == ("gpu-0001", "SYS", "NODE")


def test_unknown_paths_neither_open_nor_close(det: NicAffinityDetector) -> None:
    layouts = dict.fromkeys(HOSTS, base_layout(8))
    layouts["gpu-0002"] = cross_numa(base_layout(8), 1)
    assert len(det.observe(layout_batch(layouts, T0))) == 1
    view = layout_batch({"gpu-0002": base_layout(8)}, T0 + timedelta(seconds=10))
    blank = pa.nulls(view.num_rows, GPU_NIC_PATH.field("path").type)
    unknown = view.set_column(view.schema.get_field_index("path"), GPU_NIC_PATH.field("path"), blank)
    assert det.observe(unknown) == []
    assert list(det.open) == [(det.hosts["gpu-0002"], 1)]
    # A host with no GPU sends an empty view: it says nothing either.
    assert det.observe(view.slice(0, 0)) == []


def test_too_few_peers_judge_nothing() -> None:
    det = NicAffinityDetector(build_fabric(TopologySpec(hosts=8)), NicAffinityConfig(min_peers=3))
    layouts = {h: base_layout(8) for h in HOSTS[:3]}
    layouts[HOSTS[3]] = cross_numa(base_layout(8), 2)  # 3 peers: judged
    assert len(det.observe(layout_batch(layouts, T0))) == 1
    det = NicAffinityDetector(build_fabric(TopologySpec(hosts=8)))
    few = {HOSTS[0]: base_layout(8), HOSTS[1]: base_layout(8), HOSTS[2]: cross_numa(base_layout(8), 2)}
    assert det.observe(layout_batch(few, T0)) == []


def test_without_rails_in_the_model_the_nearest_nic_is_the_gpus() -> None:
    det = NicAffinityDetector(None)
    layouts = dict.fromkeys(HOSTS, base_layout(8))
    layouts["gpu-0004"] = cross_numa(base_layout(8), 6)
    (f,) = det.observe(layout_batch(layouts, T0))
    # GPU6 now reaches NIC 4 (its socket, NODE) first; the peers reach mlx5_6 at PIX.
    assert (f.entity, f.evidence["path"], f.evidence["nic"], f.port) == (
        "gpu-0004/GPU6", "NODE", "mlx5_4", "gpu-0004/mlx5_6",
    )  # fmt: skip


def test_hosts_of_another_shape_are_not_peers(det: NicAffinityDetector) -> None:
    big = dict.fromkeys(HOSTS[:4], base_layout(8))
    small = {h: base_layout(4) for h in HOSTS[4:]}
    small[HOSTS[7]] = cross_numa(base_layout(4), 1)
    found = det.observe(layout_batch({**big, **small}, T0))
    assert [(f.node, f.evidence["peer_hosts"]) for f in found] == [(HOSTS[7], 3)]
    assert pc.count_distinct(layout_batch(small, T0).column("host").cast(pa.string())).as_py() == 4
