"""NCCL_DEBUG init lines -> ``nccl_init`` rows: per rank, how far its communicator's init got.

Start-up is where a 10,000-GPU job loses minutes before its first step: bootstrap, topology
probing and connection set-up take longer with size, and one rank that never arrives holds
every other rank in bootstrap (gang semantics). The lines say which ranks started, how far
each got and, from NCCL 2.22, how long each phase took; this module summarizes them per
(communicator, rank) for the start-up detector (detectors/nccl_bootstrap.py).

A view lists the communicators whose init lines changed since the previous view, and every
communicator still initializing, every time: a stalled init writes nothing, and the detector
judges it on the collector's clock, so it must keep seeing it.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from datetime import UTC, datetime

import pyarrow as pa

from graywire.collectors.nccl.debug_log import INIT_STAGES, NcclTopology
from graywire.collectors.schemas import NCCL_INIT, TS, make_batch


class InitViews:
    """Turns an :class:`NcclTopology` into ``nccl_init`` views, remembering what it last sent."""

    def __init__(self) -> None:
        self._sent: dict[tuple[str, int, str], int] = {}

    def batch(
        self,
        topo: NcclTopology,
        job: str | Mapping[tuple[str, int], str],
        time: datetime | None = None,
    ) -> pa.RecordBatch | None:
        """Rows of every communicator with a changed or unfinished rank; None when there are none.

        ``job`` names the job of every row, or maps each process (host, pid) to its job.
        Destroyed communicators are left out.
        """
        when = time or datetime.now(UTC)
        changed = {k for k, v in topo.init_changes.items() if self._sent.get(k) != v}
        self._sent.update((k, topo.init_changes[k]) for k in changed)
        by_comm: dict[str, list] = defaultdict(list)
        live: set[str] = set()
        for key, info in topo._ranks.items():
            if info.state == "destroyed":
                continue
            comm = topo._comm_name(key, (key[0], key[1]))
            by_comm[comm].append((key, info))
            if key in changed or info.state == "init":
                live.add(comm)
        rows = [r for c in sorted(live) for r in sorted(by_comm[c], key=lambda r: r[1].rank)]
        if not rows:
            return None
        cols: dict[str, list] = defaultdict(list)
        for (host, pid, ptr), info in rows:
            t = info.timings
            cols["communicator"].append(topo._comm_name((host, pid, ptr), (host, pid)))
            cols["rank"].append(info.rank)
            cols["nranks"].append(info.nranks)
            cols["nnodes"].append(info.nnodes)
            cols["host"].append(host)
            cols["pid"].append(pid)
            cols["device"].append(info.device)
            cols["stage"].append(INIT_STAGES[info.stage])
            cols["started_at"].append(info.started_at)
            cols["completed_at"].append(info.completed_at)
            cols["last_line_at"].append(topo.last_line_at.get((host, pid)))
            cols["init_seconds"].append(t.get("total"))
            cols["bootstrap_seconds"].append(t.get("bootstrap"))
            cols["topo_seconds"].append(t.get("topo"))
            cols["connect_seconds"].append(t.get("connections"))
            cols["job"].append(job if isinstance(job, str) else job.get((host, pid), "unknown"))
        n = len(rows)
        dict_cols = {"job", "communicator", "host", "stage"}
        present: dict[str, pa.Array] = {"time": pa.array([when] * n, type=TS)}
        for name, values in cols.items():
            typ = NCCL_INIT.field(name).type
            if name in dict_cols:
                present[name] = pa.array(values, pa.string()).dictionary_encode().cast(typ)
            else:
                present[name] = pa.array(values, typ)
        return make_batch(NCCL_INIT, n, present)
