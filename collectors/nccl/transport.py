"""NCCL_DEBUG wiring -> ``nccl_transport`` rows: per rank, what its connections run over.

A transport regression (NET/Socket where the fabric gives NET/IB, NET/IB without GPUDirect
RDMA, fewer channels than the rest of the job) makes a job slower from its first step, and
the timings alone cannot say why. The debug lines can: this module summarizes them per
(communicator, rank) so a detector can compare each rank with its communicator's peers.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from datetime import UTC, datetime

import pyarrow as pa

from graywire.collectors.nccl.debug_log import ChannelLink, NcclTopology
from graywire.collectors.schemas import NCCL_TRANSPORT, TS, make_batch

#: Network transports from best to worst: a rank with one Socket connection is a Socket rank.
_NET_ORDER = ("NET/IB", "NET/Socket")


def _worst(transports: set[str]) -> str | None:
    for t in reversed(_NET_ORDER):
        if t in transports:
            return t
    return min(transports) if transports else None


def transport_batch(
    topo: NcclTopology,
    job: str | Mapping[tuple[str, int], str],
    time: datetime | None = None,
) -> pa.RecordBatch | None:
    """One row per live (communicator, rank) the debug lines describe; None when they describe none.

    ``job`` names the job of every row, or maps each process (host, pid) to its job (one
    directory of debug files per job). Ranks come from Init lines and from channel lines (a
    process whose Init lines were not captured still shows its connections). Destroyed
    communicators are left out.
    """
    when = time or datetime.now(UTC)
    ranks = {(r.communicator, r.host, r.pid, r.rank): r for r in topo.ranks if r.state != "destroyed"}
    dead = {(r.communicator, r.host, r.pid) for r in topo.ranks if r.state == "destroyed"}
    links: dict[tuple[str, str, int, int], list[ChannelLink]] = defaultdict(list)
    for lk in topo.links:
        if (lk.communicator, lk.host, lk.pid) not in dead:
            links[(lk.communicator, lk.host, lk.pid, lk.rank)].append(lk)
    keys = sorted(set(ranks) | set(links))
    if not keys:
        return None
    cols: dict[str, list] = defaultdict(list)
    for key in keys:
        comm, host, pid, rank = key
        info = ranks.get(key)
        own = links.get(key, [])
        net = [lk for lk in own if lk.transport.startswith("NET/")]
        ports = sorted({lk.port for lk in net if lk.port})
        cols["communicator"].append(comm)
        cols["rank"].append(rank)
        cols["nranks"].append(info.nranks if info else None)
        cols["host"].append(host)
        cols["pid"].append(pid)
        cols["device"].append(info.device if info else topo.device_of(host, pid, rank))
        cols["port"].append(ports[0] if ports else None)
        cols["network"].append(topo.network.get((host, pid)))
        cols["net_transport"].append(_worst({lk.transport for lk in net}))
        cols["net_connections"].append(len(net))
        cols["gdrdma_connections"].append(sum(lk.gdrdma for lk in net))
        cols["channels"].append(len({lk.channel for lk in own}) if own else None)
    n = len(keys)
    present = {
        "time": pa.array([when] * n, type=TS),
        "job": pa.array(
            [job if isinstance(job, str) else job.get((k[1], k[2]), "unknown") for k in keys], pa.string()
        ).dictionary_encode(),
        "communicator": pa.array(cols["communicator"], pa.string()).dictionary_encode(),
        "rank": pa.array(cols["rank"], pa.int32()),
        "nranks": pa.array(cols["nranks"], pa.int32()),
        "host": pa.array(cols["host"], pa.string()).dictionary_encode(),
        "pid": pa.array(cols["pid"], pa.int64()),
        "device": pa.array(cols["device"], pa.int16()),
        "port": pa.array(cols["port"], pa.string()),
        "network": pa.array(cols["network"], pa.string()).dictionary_encode(),
        "net_transport": pa.array(cols["net_transport"], pa.string()).dictionary_encode(),
        "net_connections": pa.array(cols["net_connections"], pa.int32()),
        "gdrdma_connections": pa.array(cols["gdrdma_connections"], pa.int32()),
        "channels": pa.array(cols["channels"], pa.int16()),
    }
    return make_batch(NCCL_TRANSPORT, n, present)
