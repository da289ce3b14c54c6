"""Which requests a follower relays to the leader."""

from __future__ import annotations

import pytest

from graywire.service.cluster.forward import needs_leader


@pytest.mark.parametrize(
    ("method", "path", "relayed"),
    [
        ("POST", "/api/v1/incidents/3/ack", True),
        ("POST", "/api/v1/ingest/nccl", True),
        ("DELETE", "/api/v1/nodes/gpu-0001/exclude", True),
        ("GET", "/api/v1/ports", True),
        ("GET", "/api/v1/ports/gpu-0001/mlx5_0", True),
        ("GET", "/api/v1/links", True),
        ("GET", "/api/v1/fabric/grid", True),
        ("GET", "/api/v1/sources", True),
        ("GET", "/api/v1/jobs/123", True),
        ("GET", "/api/v1/incidents", False),
        ("GET", "/api/v1/drain", False),
        ("GET", "/api/v1/nodes/gpu-0001", False),
        ("GET", "/api/v1/audit", False),
        ("GET", "/api/v1/cluster", False),
        ("GET", "/api/v1/portsx", False),
        ("HEAD", "/api/v1/drain", False),
        ("GET", "/metrics", False),
        ("GET", "/healthz", False),
        ("GET", "/", False),
    ],
)
def test_changes_and_reads_of_the_detectors_state_go_to_the_leader(
    method: str, path: str, relayed: bool
) -> None:
    assert needs_leader(method, path) is relayed
