"""The real procfs sysfs fixture (a ttar archive), extracted once per session."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.collectors.host.ttar import extract

TTAR = "host/procfs_sysfs_fixtures.ttar"
NETDEV_DOWN = "sys/devices/pci0000:a2/0000:a2:00.0/net/enp162s0f0np0"


@pytest.fixture(scope="session")
def real_sysfs(real_fixtures: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A sysfs root holding the archive's sys/class/{infiniband,net} and one real down netdev."""
    dest = tmp_path_factory.mktemp("procfs")
    keep = ["fixtures/sys/class/infiniband", "fixtures/sys/class/net", f"fixtures/{NETDEV_DOWN}"]
    assert extract(real_fixtures / TTAR, dest, only=keep) > 200
    return dest / "fixtures"
