"""``graywire check``: the data-path checks once on a node, as an exit code and a table."""

from __future__ import annotations

from pathlib import Path

import pytest

from graywire.fabricsim.gpu_layout import base_layout, cross_numa
from graywire.service.cli import main

TOPO = Path(__file__).resolve().parents[1] / "fixtures" / "topo"


def test_this_machine_without_a_gpu_is_skipped_not_a_crash(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check"]) == 0  # this host: no nvidia-smi, no NVIDIA PCI function
    assert capsys.readouterr().out.strip().splitlines()[-1] == "skipped: no GPU"


def test_an_empty_tree_is_skipped_too(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check", "--sysfs-root", str(tmp_path), "--nvidia-smi", "none"]) == 0
    assert capsys.readouterr().out == "skipped: no GPU\n"


def test_a_real_pix_board_passes_with_a_table(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    topo = str(TOPO / "nccl_933_nv8.txt")
    assert main(["check", "--sysfs-root", str(tmp_path), "--topo-file", topo]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].split() == ["GPU", "NUMA", "NIC", "NIC", "NUMA", "PATH", "RESULT"]
    assert out[1].split() == ["0", "0", "mlx5_2", "-", "PIX", "ok"]
    assert out[-1] == "ok: 8 GPUs, each with an RDMA NIC at most PXB away"


def test_a_nic_on_the_other_socket_is_a_finding(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    topo = tmp_path / "topo.txt"
    topo.write_text(cross_numa(base_layout(8), 2).render())
    assert main(["check", "--sysfs-root", str(tmp_path), "--topo-file", str(topo)]) == 1
    out = capsys.readouterr().out.splitlines()
    assert out[3].split() == ["2", "0", "mlx5_0", "-", "NODE", "farther", "than", "PXB"]
    assert out[-1] == "finding: 1 of 8 GPUs without a near RDMA NIC"
    # A host model wired NODE by design passes when the acceptance says so.
    topo.write_text(base_layout(8, 0.0).render())
    assert (
        main(["check", "--sysfs-root", str(tmp_path), "--topo-file", str(topo), "--max-level", "NODE"]) == 0
    )


def test_unreadable_input_is_an_error_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "topo.txt"
    bad.write_text("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.\n")
    assert main(["check", "--sysfs-root", str(tmp_path), "--topo-file", str(bad)]) == 2
    assert capsys.readouterr().out.startswith("error: nvidia-smi topo -m: no matrix header")
    assert main(["check", "--topo-file", str(tmp_path / "absent")]) == 2
    assert main(["check", "--topo-file", str(TOPO / "deepep_128_pix.txt"), "--max-level", "FAR"]) == 2
