"""The static-rule baseline's NCCL rules: what an alert-rule user writes, without persistence."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import numpy as np
import pyarrow as pa

from graywire.collectors.schemas import NCCL_TIMING, TS, make_batch
from graywire.evaluation.baseline import StaticRules
from graywire.fabricsim.topology import TopologySpec, build_fabric

T0 = datetime(2026, 2, 1, tzinfo=UTC)


def poll(i: int, step_s: float, socket_host: str | None = None) -> pa.RecordBatch:
    n = 16
    hosts = [f"gpu-{r // 8:04d}" for r in range(n)]
    return make_batch(
        NCCL_TIMING,
        n,
        {
            "time": pa.array([T0 + timedelta(seconds=10 * i)] * n, type=TS),
            "job": pa.array(["job-a"] * n).dictionary_encode(),
            "communicator": pa.array(["job-a:world"] * n).dictionary_encode(),
            "rank": pa.array(np.arange(n), pa.int32()),
            "host": pa.array(hosts).dictionary_encode(),
            "device": pa.array(np.arange(n) % 8, pa.int16()),
            "collective": pa.array(["AllReduce"] * n).dictionary_encode(),
            "channel": pa.array(np.zeros(n), pa.int16()),
            "duration_seconds": pa.array(np.full(n, step_s)),
            "transport": pa.array(
                ["NET/Socket" if h == socket_host else "NET/IB" for h in hosts]
            ).dictionary_encode(),
        },
    )


def test_step_rule_pages_on_every_slow_poll_and_the_socket_rule_on_sight() -> None:
    rules = StaticRules(build_fabric(TopologySpec(hosts=2)))
    out = []
    for i in range(10):
        out += rules.observe(poll(i, 0.01))
    assert out == []
    out = rules.observe(poll(10, 0.02))  # one checkpoint step: the rule has no persistence
    assert [(f.kind, f.status, f.entity, f.evidence) for f in out] == [
        ("nccl_job_slowdown", "firing", "job-a", {"job": "job-a"})
    ]
    out = rules.observe(poll(11, 0.01, socket_host="gpu-0001"))
    assert {(f.kind, f.status, f.node) for f in out} == {
        ("nccl_job_slowdown", "cleared", None),
        ("nccl_transport_fallback", "firing", "gpu-0001"),
    }
    assert [(f.kind, f.status) for f in rules.observe(poll(12, 0.01))] == [
        ("nccl_transport_fallback", "cleared")
    ]
