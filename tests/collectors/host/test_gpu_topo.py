"""``nvidia-smi topo -m`` and the sysfs PCIe/NUMA facts, read into ``gpu_nic_path``."""

from __future__ import annotations

import os
import stat
from datetime import UTC, datetime
from pathlib import Path

import pytest

from graywire.collectors.host.gpu_topo import (
    PciDevice,
    TopoCommand,
    TopoParseError,
    cell_level,
    parse_topo_matrix,
    path_level,
    paths_to_batch,
    read_gpu_nic_paths,
    read_numa_node,
)
from graywire.collectors.schemas import GPU_NIC_PATH
from tests.collectors.host.ttar import extract

TOPO = Path(__file__).resolve().parents[2] / "fixtures" / "topo"
T0 = datetime(2025, 1, 1, tzinfo=UTC)


def test_reads_a_matrix_with_the_nic_legend_and_gpu_numa_id_column() -> None:
    m = parse_topo_matrix((TOPO / "deepep_128_pix.txt").read_text())
    assert m.gpus == tuple(range(8))
    assert m.nics == tuple(f"mlx5_{i}" for i in range(10))
    assert [m.levels[g][f"mlx5_{g}"] for g in m.gpus] == ["PIX"] * 8
    assert m.levels[0]["mlx5_8"] == "SYS" and m.levels[7]["mlx5_0"] == "SYS"
    assert m.numa == {g: 0 if g < 4 else 1 for g in range(8)}
    assert m.cpu_affinity[5] == "56-111,168-223"
    assert parse_topo_matrix((TOPO / "deepep_128_pix.txt").read_text().strip()) == m  # a stripped copy


def test_reads_a_matrix_whose_pix_partner_is_not_the_same_index_and_no_gpu_numa_id() -> None:
    m = parse_topo_matrix((TOPO / "nccl_933_nv8.txt").read_text())
    pix = {g: [n for n, lv in m.levels[g].items() if lv == "PIX"] for g in m.gpus}
    assert pix == {0: ["mlx5_2"], 1: ["mlx5_4"], 2: ["mlx5_6"], 3: ["mlx5_8"],
                   4: ["mlx5_1"], 5: ["mlx5_3"], 6: ["mlx5_5"], 7: ["mlx5_7"]}  # fmt: skip
    assert m.levels[0]["mlx5_0"] == "NODE" and m.levels[4]["mlx5_0"] == "SYS"
    assert m.numa[7] == 1


def test_cells_old_names_nvlink_counts_and_unknown_tokens() -> None:
    assert [cell_level(t) for t in ("NV18", "NV4", "SOC", "SYS", " X ", "PHB", "??")] == [
        "NV", "NV", "SYS", "SYS", None, "PHB", None,
    ]  # fmt: skip


def test_an_old_driver_naming_nics_in_the_header_is_read() -> None:
    text = "\tGPU0\tGPU1\tmlx5_0\tCPU Affinity\nGPU0\t X \tSOC\tPIX\t0-19\nGPU1\tSOC\t X \tSOC\t20-39\n"
    m = parse_topo_matrix(text)
    assert m.nics == ("mlx5_0",) and m.levels == {0: {"mlx5_0": "PIX"}, 1: {"mlx5_0": "SYS"}}
    assert m.numa == {0: None, 1: None}


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "no matrix header"),
        ("No devices were found\n", "no matrix header"),
        ("\tGPU0\tNIC0\nGPU0\t X \n", "has 1 cells"),
        ("\tGPU0\tGPU1\tNIC0\nGPU0\t X \tNV4\tPIX\n", "no row for GPU1"),
    ],
)
def test_garbage_is_a_clear_error(text: str, message: str) -> None:
    with pytest.raises(TopoParseError, match=message):
        parse_topo_matrix(text)


def _dev(bdf: str, numa: int | None, root: str, *bridges: str) -> PciDevice:
    return PciDevice(bdf, numa, root, bridges)


def test_pcie_tree_levels() -> None:
    rp, usp = "0000:15:01.0", "0000:16:00.0"
    gpu = _dev("0000:18:00.0", 0, "pci0000:15", rp, usp, "0000:17:00.0")
    nic_same_switch = _dev("0000:19:00.0", 0, "pci0000:15", rp, usp, "0000:17:01.0")
    nic_deeper = _dev("0000:1b:00.0", 0, "pci0000:15", rp, usp, "0000:17:02.0", "0000:1a:00.0")
    nic_other_rp = _dev("0000:20:00.0", 0, "pci0000:15", "0000:15:02.0")
    nic_other_hb = _dev("0000:40:00.0", 0, "pci0000:3f", "0000:3f:01.0")
    nic_other_socket = _dev("0000:9a:00.0", 1, "pci0000:97", "0000:97:01.0")
    unknown_numa = _dev("0000:9a:00.0", None, "pci0000:97", "0000:97:01.0")
    levels = [path_level(gpu, n) for n in (nic_same_switch, nic_deeper, nic_other_rp, nic_other_hb,
                                             nic_other_socket, unknown_numa)]  # fmt: skip
    assert levels == ["PIX", "PXB", "PHB", "NODE", "SYS", None]


def test_the_real_sysfs_tree_numa_nodes_and_no_gpu(real_fixtures: Path, tmp_path: Path) -> None:
    extract(real_fixtures / "host" / "procfs_sysfs_fixtures.ttar", tmp_path, only=["fixtures/sys"])
    root = tmp_path / "fixtures"
    assert read_numa_node(root / "sys/bus/pci/devices/0000:a2:00.0") == 1
    assert read_numa_node(root / "sys/bus/pci/devices/0000:01:00.0") is None  # -1: none reported
    reading = read_gpu_nic_paths(root, None, None)
    assert (reading.source, reading.gpus, reading.rows) == (None, 0, [])
    assert paths_to_batch(reading, "h1", T0).num_rows == 0


def _fake_gpu_tree(root: Path) -> None:
    """An NVIDIA 3D controller and a ConnectX under one switch on node 0 (the layout of a DGX tray)."""
    sw = root / "sys/devices/pci0000:15/0000:15:01.0/0000:16:00.0"
    for bdf, sub, vendor, cls in (("0000:18:00.0", "0000:17:00.0", "0x10de", "0x030200"),
                                  ("0000:19:00.0", "0000:17:01.0", "0x15b3", "0x020700")):  # fmt: skip
        d = sw / sub / bdf
        d.mkdir(parents=True)
        (d / "vendor").write_text(vendor + "\n")
        (d / "class").write_text(cls + "\n")
        (d / "numa_node").write_text("0\n")
        bus = root / "sys/bus/pci/devices"
        bus.mkdir(parents=True, exist_ok=True)
        (bus / bdf).symlink_to(os.path.relpath(d, bus))
    ib = root / "sys/class/infiniband/mlx5_0"
    ib.mkdir(parents=True)
    (ib / "device").symlink_to(os.path.relpath(sw / "0000:17:01.0/0000:19:00.0", ib))


def test_without_nvidia_smi_the_sysfs_tree_gives_the_levels(tmp_path: Path) -> None:
    _fake_gpu_tree(tmp_path)
    reading = read_gpu_nic_paths(tmp_path, None, TopoCommand(str(tmp_path / "no-such-nvidia-smi")))
    assert reading.source == "sysfs"
    assert reading.rows == [{"gpu": 0, "gpu_bus_id": "0000:18:00.0", "gpu_numa": 0, "nic": "mlx5_0",
                             "nic_numa": 0, "path": "PIX"}]  # fmt: skip
    batch = paths_to_batch(reading, "gpu-1", T0)
    assert batch.schema.equals(GPU_NIC_PATH) and batch.column("path").to_pylist() == ["PIX"]


def _script(tmp_path: Path, body: str) -> str:
    p = tmp_path / "nvidia-smi"
    p.write_text("#!/bin/sh\n" + body + "\n")
    p.chmod(p.stat().st_mode | stat.S_IXUSR)
    return str(p)


def test_the_command_is_bounded_and_never_raises(tmp_path: Path) -> None:
    assert TopoCommand(str(tmp_path / "absent")).run() == (None, f"{tmp_path / 'absent'} not found")
    slow = TopoCommand(_script(tmp_path, "sleep 5"), timeout=0.2)
    assert slow.run() == (None, f"{slow.binary} topo -m: timed out after 0.2 s")
    failing = TopoCommand(_script(tmp_path, "echo 'NVIDIA-SMI has failed' >&2; exit 9"))
    assert failing.run() == (None, f"{failing.binary} topo -m: exit 9: NVIDIA-SMI has failed")


def test_nvidia_smi_wins_over_sysfs_and_a_bad_matrix_falls_back(tmp_path: Path) -> None:
    _fake_gpu_tree(tmp_path)
    good = TopoCommand(_script(tmp_path, f"cat '{TOPO / 'deepep_128_pix.txt'}'"))
    reading = read_gpu_nic_paths(tmp_path, None, good)
    assert reading.source == "nvidia-smi" and len(reading.rows) == 80
    assert next(r for r in reading.rows if r["nic"] == "mlx5_0" and r["gpu"] == 0)["nic_numa"] == 0
    bad = read_gpu_nic_paths(tmp_path, "No devices were found\n", None)
    assert bad.source == "sysfs" and bad.errors == ["nvidia-smi topo -m: no matrix header (a line naming "
                                                    "GPU0 and the other devices)"]  # fmt: skip
