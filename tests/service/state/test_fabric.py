"""The published fabric state: immutable once out, whole per step, last reading wins."""

from __future__ import annotations

import numpy as np
import pytest

from graywire.collectors.model import Fabric, PortSpec
from graywire.service.state.fabric import StateBoard, TargetStatus


def _fabric() -> Fabric:
    return Fabric.from_specs(
        {"h": "host", "sw": "leaf"}, [PortSpec("h", "p1"), PortSpec("h", "p2"), PortSpec("sw", "p1")], []
    )


def _record(board: StateBoard, idx: list[int], speed: list[float]) -> None:
    n = len(idx)
    board.record_ports(
        np.array(idx),
        np.array(speed, dtype=np.float64),
        np.full(n, 4, np.int16),
        np.full(n, 5, np.uint8),
        np.full(n, 4, np.uint8),
        np.full(n, 1.0e9),
    )


def test_a_reader_keeps_the_state_it_took_while_the_runner_publishes() -> None:
    board = StateBoard(_fabric())
    _record(board, [0], [400e9])
    before = board.current
    _record(board, [0, 1], [200e9, 400e9])
    after = board.current
    assert before.port_speed_bps is not None and after.port_speed_bps is not None
    assert before.port_speed_bps[0] == 400e9 and np.isnan(before.port_speed_bps[1])
    assert list(after.port_speed_bps[:2]) == [200e9, 400e9]


def test_nothing_published_can_be_written() -> None:
    board = StateBoard(_fabric())
    _record(board, [0], [400e9])
    board.set_targets([TargetStatus("ufm", "a")], np.zeros(3, dtype=bool), {("ufm", "malformed_line"): 2})
    s = board.current
    assert s.port_speed_bps is not None and s.port_stale is not None
    with pytest.raises(ValueError, match="read-only"):
        s.port_speed_bps[0] = 0.0
    with pytest.raises(ValueError, match="read-only"):
        s.port_stale[0] = True
    with pytest.raises(TypeError):
        s.parse_skipped[("ufm", "x")] = 1  # type: ignore[index]
    with pytest.raises(AttributeError):
        s.polls = 3  # type: ignore[misc]
    with pytest.raises(AttributeError):
        s.targets[0].ok = True  # type: ignore[misc]


def test_a_port_read_twice_in_a_poll_keeps_its_last_reading_and_unknown_ports_are_ignored() -> None:
    board = StateBoard(_fabric())
    _record(board, [1, -1, 1, 0], [100e9, 7.0, 200e9, 400e9])
    speed = board.current.port_speed_bps
    assert speed is not None
    assert speed[0] == 400e9 and speed[1] == 200e9 and np.isnan(speed[2])


def test_counts_add_up_across_publications() -> None:
    board = StateBoard(_fabric())
    board.count_rejected("nccl_timing", "unknown_host", 3)
    board.count_rejected("nccl_timing", "unknown_host", 2)
    board.poll_failed()
    assert dict(board.current.rows_rejected) == {("nccl_timing", "unknown_host"): 5}
    assert board.current.poll_errors == 1


def test_each_jobs_hosts_come_from_its_timings_and_age_out(monkeypatch: pytest.MonkeyPatch) -> None:
    """The (job, host) pairs of fabricsim's NCCL timings, kept for JOB_HOSTS_TTL_S."""
    from graywire.fabricsim.sim import FabricSim, SimConfig
    from graywire.fabricsim.topology import TopologySpec
    from graywire.service.state import fabric as fabric_state

    sim = FabricSim(SimConfig(topology=TopologySpec(hosts=4), duration_s=20.0, seed=1, faults="none"))
    steps = [s for s in sim.run() if s.nccl_timing is not None]
    timing = steps[0].nccl_timing
    expected: dict[str, set[str]] = {}
    for row in timing.select(["job", "host"]).to_pylist():
        expected.setdefault(row["job"], set()).add(row["host"])
    board = StateBoard(sim.fabric)
    clock = [1000.0]
    monkeypatch.setattr(fabric_state.time, "monotonic", lambda: clock[0])
    board.observe_poll([timing], None, {}, {}, {})
    assert {j: set(h) for j, h in board.current.job_hosts.items()} == expected
    clock[0] += fabric_state.JOB_HOSTS_TTL_S + 1
    board.observe_poll([], None, {}, {}, {})  # no timings for longer than the TTL: gone
    assert dict(board.current.job_hosts) == {}
