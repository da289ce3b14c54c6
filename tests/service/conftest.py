"""Fixtures shared by the service tests: a real single-node Slurm, and slurmrestd in front of it.

Both are skipped only locally and only when their binaries are missing; under CI a missing
binary fails the run, so a pipeline without Slurm cannot pass by testing nothing.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from sqlalchemy.engine import make_url

from tests.conftest import _in_ci, postgres_url, reset_postgres
from tests.relay import Relay
from tests.service.schedsync.slurm_cluster import (
    RESTD_USER,
    SlurmCluster,
    missing_binaries,
    remove_cluster,
    start_cluster,
)


def _skip_or_fail(reason: str) -> None:
    if _in_ci():
        pytest.fail(f"CI is set but {reason}", pytrace=False)
    pytest.skip(reason)


@pytest.fixture(scope="session")
def slurm_cluster() -> Iterator[SlurmCluster]:
    """slurmctld + slurmd on localhost."""
    missing = missing_binaries()
    if missing:
        _skip_or_fail(f"Slurm/munge binaries not found: {', '.join(missing)} (Debian: apt install slurm-wlm)")
    cluster = start_cluster()
    try:
        yield cluster
    finally:
        remove_cluster(cluster)


@pytest.fixture
def slurm(slurm_cluster: SlurmCluster) -> Iterator[SlurmCluster]:
    """The cluster with its node back to IDLE and no reason after each test."""
    yield slurm_cluster
    fields = slurm_cluster.node_fields()
    if "DRAIN" in fields.get("State", "") or fields.get("State", "").startswith("DOWN"):
        slurm_cluster.scontrol("update", f"NodeName={slurm_cluster.node}", "State=RESUME")
        slurm_cluster.wait_for_state(lambda f: f.get("State") == "IDLE")


@dataclass(frozen=True)
class SlurmRestd:
    url: str
    api_version: str
    user: str
    token: str


@pytest.fixture(scope="session")
def slurmrestd(slurm_cluster: SlurmCluster) -> SlurmRestd:
    """slurmrestd (JWT auth) in front of the session's cluster; it stops with the cluster."""
    path = os.pathsep.join([os.environ.get("PATH", ""), "/usr/sbin", "/sbin"])
    if shutil.which("slurmrestd", path=path) is None:
        _skip_or_fail("slurmrestd not found (Debian: apt install slurmrestd)")
    url, version = slurm_cluster.start_restd()
    return SlurmRestd(url, version, RESTD_USER, slurm_cluster.token(RESTD_USER))


@pytest.fixture
def relay() -> Iterator[tuple[Relay, str]]:
    """A cuttable relay to the PostgreSQL test database (wiped before and after), and its URL."""
    url = make_url(postgres_url())
    reset_postgres(url.render_as_string(hide_password=False))
    r = Relay((url.host or "127.0.0.1", url.port or 5432))
    r.start()
    yield r, url.set(host="127.0.0.1", port=r.port).render_as_string(hide_password=False)
    r.cut()
    reset_postgres(url.render_as_string(hide_password=False))
