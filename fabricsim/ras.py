"""The fault path as NCCL's RAS reports it: each job's ``STATUS`` in RAS's JSON form.

On when a fault spec names a fault-path kind (``FAULT_PATH_KINDS``, ``FAULT_PATH_BENIGN_KINDS``
in faults.py); ``default`` leaves it off. Every job then runs NCCL 2.28.9 with RAS, and each poll
asks it for ``STATUS`` (``ncclras -f json``): one world communicator per job, its ranks with
their status and collective counts, and its missing ranks. The document is printed as that
release's ``src/ras/client_support.cc`` prints it (its layout: the real captures in
tests/fixtures/corpus/nccl_ras), its bug included: a missing rank's ``"nvml_dev": N`` is not
followed by a comma, so the report is not JSON whenever a rank is missing (fixed in 2.29.2).
Nodes are named by bootstrap address, as RAS does, and :func:`read_back` parses the text with
graywire's own RAS parser (collectors/nccl/ras.py) and a ``host_names`` map, as a ``nccl_ras``
source would.

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
        """``0x%lx``: not zero-padded (a real one has 15 digits when its first is 0)."""
        return hex(
            int.from_bytes(hashlib.blake2b(f"{self.name}:world".encode(), digest_size=8).digest(), "big")
        )

    @property
    def secondary_hash(self) -> str:
        digest = hashlib.blake2b(f"{self.name}:secondary".encode(), digest_size=16).digest()
        return f"{hex(int.from_bytes(digest[:8], 'big'))}:{hex(int.from_bytes(digest[8:], 'big'))}"


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
    return _printed(job, n, now, ranks, missing)


def _printed(
    job: RasJob, n: int, now: datetime, ranks: list[dict[str, Any]], missing: list[dict[str, Any]]
) -> str:
    """The report as NCCL 2.28.9 prints it (``rasOutAppend`` lines, two-space steps, ``%.3f``,
    an empty list over two lines), without the comma after a missing rank's ``nvml_dev``."""
    out = ["{", '  "nccl_version": "2.28.9",', '  "cuda_runtime_version": 13000,',
           '  "cuda_driver_version": 13000,', f'  "timestamp": "{now.strftime("%Y-%m-%d %H:%M:%S")}",',
           '  "communicators_count": 1,', '  "communicators": [', "    {",
           f'      "hash": "{job.comm_hash}",', f'      "secondary_hash": "{job.secondary_hash}",',
           f'      "size": {n},', f'      "ranks_count": {len(ranks)},',
           f'      "missing_ranks_count": {len(missing)},', '      "ranks": [']  # fmt: skip
    for i, r in enumerate(ranks):
        st = r["status"]
        out += ["        {", f'          "rank": {r["rank"]},', f'          "host": "{r["host"]}",',
                f'          "pid": {r["pid"]},', f'          "cuda_dev": {r["cuda_dev"]},',
                f'          "nvml_dev": {r["nvml_dev"]},', '          "status": {',
                f'            "init_state": {st["init_state"]},',
                f'            "async_error": {st["async_error"]},',
                f'            "finalize_called": {_b(st["finalize_called"])},',
                f'            "destroy_flag": {_b(st["destroy_flag"])},',
                f'            "abort_flag": {_b(st["abort_flag"])}', "          },",
                '          "collective_counts": {']  # fmt: skip
        counts = list(r["collective_counts"].items())
        out += [
            f'            "{c}": {v}' + ("," if k < len(counts) - 1 else "")
            for k, (c, v) in enumerate(counts)
        ]
        out += ["          }", "        }" + ("," if i < len(ranks) - 1 else "")]
    if not ranks:
        out.append("")  # an empty list is printed over two lines
    out += ["      ],", '      "missing_ranks": [']
    for i, r in enumerate(missing):
        st = r["status"]
        out += ["        {", f'          "rank": {r["rank"]},', f'          "host": "{r["host"]}",',
                f'          "pid": {r["pid"]},', f'          "cuda_dev": {r["cuda_dev"]},',
                f'          "nvml_dev": {r["nvml_dev"]}',  # 2.28.7-2.28.9: no comma (jsonWriteMissingRank)
                '          "status": {', f'            "unresponsive": {_b(st["unresponsive"])},',
                f'            "considered_dead": {_b(st["considered_dead"])}', "          }",
                "        }" + ("," if i < len(missing) - 1 else "")]  # fmt: skip
    if not missing:
        out.append("")
    out += ["      ]", "    }", "  ],", '  "ras": {', '    "collection_time_sec": 0.000,',
            '    "timeouts_count": 0', "  }", "}"]  # fmt: skip
    return "\n".join(out) + "\n"


def _b(v: bool) -> str:
    return "true" if v else "false"


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
