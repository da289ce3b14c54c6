"""The slim agent image's requirement set (deploy/agent-requirements.txt): core requirements
only, and enough to serve the agent with nothing else installed.

No container engine runs here: the image's install (the wheel without dependencies, then that
set) is repeated offline with the distributions of the test environment (tests/installs.py).
"""

from __future__ import annotations

import tomllib
from pathlib import Path

import httpx
import pyarrow as pa
import pytest

from graywire.fabricsim.hostfs import HostTreeWriter
from graywire.fabricsim.sim import FabricSim, SimConfig
from graywire.fabricsim.topology import TopologySpec
from tests import installs

#: What the service needs and the agent must not carry (its database, metrics, config file
#: parsing), besides every extra.
SERVICE_ONLY = {"sqlalchemy", "alembic", "prometheus-client", "pydantic-settings", "clustershell"}
EXTRAS = {"scikit-learn", "scipy", "kubernetes", "pysnmp", "cryptography", "psycopg", "snmpsim"}


def agent_requirements(deploy_dir: Path) -> list[str]:
    return [str(r) for r in installs.read_requirements(deploy_dir / "agent-requirements.txt")]


def test_agent_requirements_are_core_requirements_letter_for_letter(deploy_dir: Path) -> None:
    """So a bound raised in pyproject.toml cannot be left behind in the agent's set."""
    core = tomllib.loads((deploy_dir.parent / "pyproject.toml").read_text())["project"]["dependencies"]
    reqs = agent_requirements(deploy_dir)
    assert reqs and set(reqs) <= set(core), sorted(set(reqs) - set(core))
    assert len(set(reqs)) == len(reqs)


@pytest.mark.slow
def test_the_agent_serves_from_its_requirement_set_alone(
    deploy_dir: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    wheel = installs.build_wheel(tmp_path_factory.mktemp("wheel"))
    tmp = tmp_path_factory.mktemp("agent")
    site = installs.install_wheel(wheel, tmp / "site")
    dists = installs.closure(installs.read_requirements(deploy_dir / "agent-requirements.txt"))
    assert not set(dists) & (SERVICE_ONLY | EXTRAS), sorted(dists)
    deps = installs.link_distributions(dists.values(), tmp / "deps")
    # One simulated host's sysfs tree and ethtool output, as the agent reads a real one.
    sim = FabricSim(
        SimConfig(topology=TopologySpec(hosts=2), duration_s=20.0, seed=3, job_hosts=2, faults="none")
    )
    writer = HostTreeWriter(tmp / "hosts", sim.fabric)
    writer.write(next(iter(sim.run())).port_sample)
    host = "gpu-0001"
    port = installs.free_port()
    args = ["agent", "--sysfs-root", str(writer.host_root(host)), "--hostname", host]
    args += ["--ethtool-dir", str(writer.ethtool_dir(host)), "--listen", "127.0.0.1", "--port", str(port)]
    argv = installs.isolated([site, deps], f"from graywire.service.cli import main\nsys.exit(main({args!r}))")
    proc = installs.serve_until_healthy(argv, f"http://127.0.0.1:{port}/healthz", cwd=tmp)
    try:
        r = httpx.get(f"http://127.0.0.1:{port}/v1/port_sample", timeout=10)
    finally:
        installs.stop(proc)
    assert r.status_code == 200, r.text
    batch = pa.ipc.open_stream(r.content).read_all()
    assert batch.num_rows == 8
    assert {p.partition("/")[0] for p in batch.column("port").to_pylist()} == {host}
