"""The fault path as NCCL's RAS reports it: each job's ``STATUS`` in RAS's JSON form.

On when a fault spec names a fault-path kind (``FAULT_PATH_KINDS``, ``FAULT_PATH_BENIGN_KINDS``
in faults.py); ``default`` leaves it off. Every job then runs NCCL 2.29 with RAS, and each poll
asks it for ``STATUS`` (``ncclras -f json``): one world communicator per job, its ranks with
their status and collective counts, and its missing ranks. The document has the keys and
layout of the guide's "JSON Output" sample (NVIDIA/nccl docs/userguide/source/troubleshooting/
ras.rst, tests/collectors/nccl/ras_reports/status_doc.json); nodes are named by bootstrap
address, as RAS does, and :func:`read_back` parses the text with graywire's own RAS parser
(collectors/nccl/ras.py) and a ``host_names`` map, as a ``nccl_ras`` source would.

``rank_dead`` (the model, an assumption of fabricsim stated in docs/phases/fault-path.md):
the rank's NIC link goes down for good at the fault's start. Its job's collectives stop at once
(every rank waits in the ring the NIC is on): no timings, counts frozen one past the last
completed. The rank's IB transport retries ``NCCL_IB_RETRY_CNT`` (7) times, each after the ACK
timeout ``4.096 us * 2^NCCL_IB_TIMEOUT`` (20: 4.3 s), then the work request fails ("transport
retry counter exceeded"): about 34 s. The communicator shows the error and aborts
(``abort_flag``); PyTorch's watchdog tears the process down about a second later. RAS then
lists the rank as missing and unresponsive, and 60 s after last contact as dead
(``RAS_PEER_DEAD_TIMEOUT``, src/ras/rasnet.cc). The job stays stuck, RAS answering from the
other hosts, until the fault ends (the scheduler kills it); then no RAS answers.

``job_end`` (benign): the job's ranks call ``ncclCommFinalize``/``ncclCommDestroy`` over a few
seconds (``finalize``), leave the communicator (missing, neither unresponsive nor dead: NCCL's
``NOCOMM``) for 10 s, during the first 4 of which one process already gone shows unresponsive
(the guide: a rank missing from one collection during a tear-down resolves itself; polls 5 s or
more apart see it once at most), and then RAS is gone with the job: the socket refuses, no
report.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import pyarrow as pa

from graywire.collectors.nccl.ras import RankStateRows, parse_status

#: IB ACK timeout (NCCL_IB_TIMEOUT=20) times retries plus the first try (NCCL_IB_RETRY_CNT=7).
IB_RETRY_S = 4.096e-6 * 2**20 * (7 + 1)
#: From the failed work request to the process gone (watchdog abort and tear-down).
ABORT_S = 1.0
#: RAS declares a peer dead after this long without contact (src/ras/rasnet.cc).
PEER_DEAD_S = 60.0
#: A job's ranks finalize over this long, then leave; the view after that, RAS is gone.
FINALIZE_S = 5.0
LEAVE_S = 10.0
#: The first seconds of the leaving, one process that already exited shows unresponsive.
EXITED_S = 4.0
COLLECTIVES = ("Broadcast", "Reduce", "AllGather", "ReduceScatter", "AllReduce")


def bootstrap_addr(host_index: int) -> str:
    """The address a host's NCCL bootstraps on (its out-of-band interface): what RAS prints."""
    return f"172.16.{64 + host_index // 250}.{host_index % 250 + 1}"


def host_names(node_names: list[str], hosts: list[int]) -> dict[str, str]:
    """The ``host_names:`` map a ``nccl_ras`` source would be configured with."""
    return {bootstrap_addr(h): node_names[h] for h in hosts}


@dataclass(frozen=True, slots=True)
class RasJob:
    """One job as RAS sees it: its hosts (fabric node indices) and GPUs per host."""

    name: str
    hosts: list[int]
    gpus: int

    @property
    def comm_hash(self) -> str:
        return "0x" + hashlib.blake2b(f"{self.name}:world".encode(), digest_size=8).hexdigest()


def _rank(job: RasJob, r: int) -> dict[str, Any]:
    h, gpu = job.hosts[r // job.gpus], r % job.gpus
    return {
        "rank": r,
        "host": bootstrap_addr(h),
        "pid": 200_000 + 97 * h + gpu,
        "cuda_dev": gpu,
        "nvml_dev": gpu,
    }


def status_document(
    job: RasJob, now: datetime, count: int, states: Mapping[int, str], finalize: bool = False
) -> str:
    """One ``STATUS`` JSON report: every rank running at ``count`` collectives, except those in
    ``states`` (``abort``, ``unresponsive``, ``dead``, ``nocomm``); ``finalize`` marks the
    present ranks as finalizing."""
    n = len(job.hosts) * job.gpus
    ranks, missing = [], []
    for r in range(n):
        st = states.get(r)
        entry = _rank(job, r)
        if st in ("unresponsive", "dead", "nocomm"):
            entry["status"] = {"unresponsive": st == "unresponsive", "considered_dead": st == "dead"}
            missing.append(entry)
            continue
        entry["status"] = {
            "init_state": 0,
            "async_error": 6 if st == "abort" else 0,  # ncclRemoteError: the peer's network failed
            "finalize_called": finalize,
            "destroy_flag": False,
            "abort_flag": st == "abort",
        }
        entry["collective_counts"] = {c: (count if c == "AllReduce" else 0) for c in COLLECTIVES}
        ranks.append(entry)
    timeouts = sum(bool(e["status"]["unresponsive"]) for e in missing)
    doc = {
        "nccl_version": "2.29.1",
        "cuda_runtime_version": 13000,
        "cuda_driver_version": 13000,
        "timestamp": now.strftime("%Y-%m-%d %H:%M:%S"),
        "communicators_count": 1,
        "communicators": [
            {
                "hash": job.comm_hash,
                "size": n,
                "ranks_count": len(ranks),
                "missing_ranks_count": len(missing),
                "ranks": ranks,
                "missing_ranks": missing,
            }
        ],
        "ras": {
            "collection_time_sec": 0.0,
            "timeouts_count": timeouts,
        },
    }
    return json.dumps(doc, indent=2)


def rank_dead_states(fault: Any, t: float) -> dict[int, str] | None:
    """The dead rank's RAS state at ``t`` (None: running, the job already stuck)."""
    gone = fault.start_s + IB_RETRY_S + ABORT_S
    if t < fault.start_s + IB_RETRY_S:
        return None
    if t < gone:
        return {int(fault.rank): "abort"}
    return {int(fault.rank): "unresponsive" if t < gone + PEER_DEAD_S else "dead"}


def job_end_view(fault: Any, job: RasJob, t: float) -> tuple[dict[int, str], bool] | None:
    """A job's tear-down at ``t``: (rank states, finalizing), or None once RAS is gone."""
    dt = t - fault.start_s
    n = len(job.hosts) * job.gpus
    if dt < FINALIZE_S:
        return {}, True
    if dt < FINALIZE_S + LEAVE_S:
        states = dict.fromkeys(range(n), "nocomm")
        if dt < FINALIZE_S + EXITED_S:
            states[n - 1] = "unresponsive"  # its process already exited: one view at most
        return states, False
    return None


def read_back(reports: Mapping[str, str], names: Mapping[str, str], now: datetime) -> pa.RecordBatch | None:
    """The poll's ``nccl_rank_state`` rows, parsed from each job's report as a source would."""
    rows = RankStateRows()
    for job, text in reports.items():
        parse_status(text, job, rows, names)
    if rows.skipped:
        raise ValueError(f"fabricsim wrote RAS reports its parser skips: {rows.problems}")
    return rows.to_batch(now) if len(rows) else None
