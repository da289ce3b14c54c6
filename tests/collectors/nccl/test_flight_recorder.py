"""Flight Recorder dumps (the tutorial's dict, pickled as PyTorch writes it) and watchdog lines."""

from __future__ import annotations

import json
import pickle

import pytest

from graywire.collectors.nccl.flight_recorder import parse_dump, parse_watchdog_lines, rank_of_file
from graywire.collectors.nccl.ras import RankStateRows

T0 = 1724779239936775119


def dump(states: list[str], enqueued: int) -> dict:
    """The tutorial's example dump (pytorch/tutorials flight_recorder_tutorial.rst), one entry a state."""
    entries = [
        {
            "record_id": i,
            "pg_id": 0,
            "process_group": ("0", "default_pg"),
            "collective_seq_id": i + 1,
            "p2p_seq_id": 0,
            "op_id": i + 1,
            "profiling_name": "nccl:all_reduce",
            "time_created_ns": T0 + i,
            "input_sizes": [[3, 4]],
            "state": s,
            "retired": s == "completed",
            "timeout_ms": 600000,
            "is_p2p": False,
        }
        for i, s in enumerate(states)
    ]
    return {
        "version": "2.5",
        "pg_config": {"0": {"name": "0", "desc": "default_pg", "ranks": "[0, 1]"}},
        "pg_status": {
            "0": {
                "last_enqueued_collective": enqueued,
                "last_started_collective": -1,
                "last_completed_collective": 2,
            }
        },
        "entries": entries,
    }


def test_a_collective_older_than_its_timeout_is_the_rank_timeout() -> None:
    rows = RankStateRows()
    late = T0 + 601_000 * 1_000_000
    parse_dump(
        pickle.dumps(dump(["completed", "completed", "scheduled"], 3)),
        "j",
        rows,
        rank=0,
        host="gpu-1",
        dumped_at_ns=late,
    )
    (r,) = rows.rows
    assert (
        r[2] == 0 and r[7] == "timeout" and r[8] == "all_reduce" and r[9] == 3 and r[1] == "pg:0(default_pg)"
    )


def test_a_rank_that_completed_all_it_enqueued_is_running_at_its_last_seq_json_too() -> None:
    rows = RankStateRows()
    parse_dump(
        json.dumps(dump(["completed", "completed"], 2)).encode(),
        "j",
        rows,
        rank=1,
        host="gpu-2",
        dumped_at_ns=T0 + 10**15,
    )
    assert [(r[2], r[7], r[9]) for r in rows.rows] == [(1, "running", 2)]


def test_a_young_unfinished_collective_is_not_a_timeout() -> None:
    rows = RankStateRows()
    parse_dump(pickle.dumps(dump(["started"], 1)), "j", rows, rank=0, host=None, dumped_at_ns=T0 + 10**9)
    assert [r[7] for r in rows.rows] == ["running"]


def test_a_pickle_with_a_class_in_it_is_refused_unrun() -> None:
    with pytest.raises(ValueError, match="only plain values"):
        parse_dump(pickle.dumps(ValueError("x")), "j", RankStateRows(), rank=0, host=None, dumped_at_ns=0)
    with pytest.raises(ValueError, match="version"):
        parse_dump(pickle.dumps({"a": 1}), "j", RankStateRows(), rank=0, host=None, dumped_at_ns=0)


def test_rank_from_the_default_file_name() -> None:
    assert rank_of_file("nccl_trace_rank_17") == 17 and rank_of_file("trace_") is None


def test_watchdog_lines_old_and_new_prefix() -> None:
    lines = [
        "[rank1]:[E1218 20:27:21.433063423 ProcessGroupNCCL.cpp:629] [Rank 1] Watchdog caught collective "
        "operation timeout: WorkNCCL(SeqNum=1, OpType=BROADCAST, NumelIn=131072000, NumelOut=131072000, "
        "Timeout(ms)=600000) ran for 600088 milliseconds before timing out.",
        "[PG ID 0 PG GUID 0(default_pg) Rank 3] Watchdog caught collective operation timeout: "
        "WorkNCCL(SeqNum=64214, OpType=ALLGATHER, NumelIn=1, NumelOut=32, Timeout(ms)=600000)",
        "an unrelated line",
    ]
    rows = RankStateRows()
    parse_watchdog_lines(lines, "j", rows, host="gpu-1")
    assert [(r[1], r[2], r[7], r[8], r[9]) for r in rows.rows] == [
        (None, 1, "timeout", "broadcast", 1),
        ("pg:0(default_pg)", 3, "timeout", "allgather", 64214),
    ]
