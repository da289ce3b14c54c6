"""NCCL_DEBUG wiring -> ``nccl_transport`` rows: per rank, what its connections run over.

A transport regression (NET/Socket where the fabric gives NET/IB, NET/IB without GPUDirect
RDMA, fewer channels than the rest of the job) makes a job slower from its first step, and
the timings alone cannot say why. The debug lines can: this module summarizes them per
(communicator, rank) so a detector can compare each rank with its communicator's peers
(``nccl_transport``), and per (communicator, host), what that host's topology probe found, so
a detector can compare hosts of the same shape across the fleet (``nccl_layout``).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Mapping
from datetime import UTC, datetime

import pyarrow as pa

from graywire.collectors.nccl.debug_log import PATH_TYPES, ChannelLink, NcclTopology, RankInfo
from graywire.collectors.schemas import NCCL_LAYOUT, NCCL_TRANSPORT, TS, make_batch

#: Network transports from best to worst: a rank with one Socket connection is a Socket rank.
_NET_ORDER = ("NET/IB", "NET/Socket")


def settled_communicators(topo: NcclTopology, last_links: dict[str, int]) -> tuple[set[str], set[str]]:
    """(settled, unsettled) communicators: a communicator is judged only once every rank whose
    Init lines were read logged ``Init COMPLETE`` and its connection lines stopped arriving
    since the last view (``last_links``, updated here: communicator -> connection lines).

    A 256-rank init writes its channel lines for minutes, and NCCL 2.23+ connects some channels
    only at the first collective, after COMPLETE: judged mid-stream, a rank whose lines were not
    all in yet read as one with fewer channels (16 false ``nccl_channels_reduced`` that resolved
    two minutes later)."""
    incomplete: set[str] = set()
    named: set[str] = set()
    for r in topo.ranks:
        if r.state == "destroyed":
            continue
        named.add(r.communicator)
        if r.state != "complete":
            incomplete.add(r.communicator)
    counts = Counter(lk.communicator for lk in topo.links)
    moving = {c for c in named | set(counts) if counts.get(c, 0) != last_links.get(c, 0)}
    last_links.clear()
    last_links.update(counts)
    every = named | set(counts)
    unsettled = incomplete | moving
    return every - unsettled, unsettled & every


def _worst(transports: set[str]) -> str | None:
    for t in reversed(_NET_ORDER):
        if t in transports:
            return t
    return min(transports) if transports else None


def transport_batch(
    topo: NcclTopology,
    job: str | Mapping[tuple[str, int], str],
    time: datetime | None = None,
    only: set[str] | None = None,
) -> pa.RecordBatch | None:
    """One row per live (communicator, rank) the debug lines describe; None when they describe none.

    ``job`` names the job of every row, or maps each process (host, pid) to its job (one
    directory of debug files per job). Ranks come from Init lines and from channel lines (a
    process whose Init lines were not captured still shows its connections). Destroyed
    communicators are left out, and with ``only`` every communicator not in it
    (:func:`settled_communicators`).
    """
    when = time or datetime.now(UTC)
    ranks = {(r.communicator, r.host, r.pid, r.rank): r for r in topo.ranks if r.state != "destroyed"}
    dead = {(r.communicator, r.host, r.pid) for r in topo.ranks if r.state == "destroyed"}
    links: dict[tuple[str, str, int, int], list[ChannelLink]] = defaultdict(list)
    for lk in topo.links:
        if (lk.communicator, lk.host, lk.pid) not in dead:
            links[(lk.communicator, lk.host, lk.pid, lk.rank)].append(lk)
    keys = sorted(k for k in set(ranks) | set(links) if only is None or k[0] in only)
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


def _farthest(types: list[str]) -> str | None:
    return max(types, key=PATH_TYPES.index) if types else None


def _one(values: list, pick=min):  # type: ignore[no-untyped-def]
    known = [v for v in values if v is not None]
    return pick(known) if known else None


def layout_batch(
    topo: NcclTopology,
    job: str | Mapping[tuple[str, int], str],
    time: datetime | None = None,
    only: set[str] | None = None,
) -> pa.RecordBatch | None:
    """One row per (communicator, host) whose ranks' topology probe the lines describe.

    A host's row sums its ranks: intra-node connections by transport (P2P in every form, which
    NCCL picks over NVLink or PCIe peer access, against SHM, host memory, which it falls back
    to when its probe says P2P is not possible), network connections with GPUDirect RDMA or
    through a PXN proxy (``NET/IB/3(7)``), and the worst of its ranks' own ring graphs. Only
    ranks whose Init lines were read are summed (the host and communicator must be known);
    destroyed communicators are left out, and with ``only`` every communicator not in it. None
    when no communicator is described.
    """
    when = time or datetime.now(UTC)
    ranks: dict[tuple[str, str], list[RankInfo]] = defaultdict(list)
    procs: dict[tuple[str, str], set[int]] = defaultdict(set)
    for r in topo.ranks:
        if r.state != "destroyed" and (only is None or r.communicator in only):
            ranks[(r.communicator, r.host)].append(r)
            procs[(r.communicator, r.host)].add(r.pid)
    if not ranks:
        return None
    intra: dict[tuple[str, str], Counter[str]] = defaultdict(Counter)
    for lk in topo.links:
        key = (lk.communicator, lk.host)
        if key in ranks and lk.pid in procs[key]:
            if lk.transport.startswith("NET/"):
                c = intra[key]
                c["net"] += 1
                c["gdr"] += lk.gdrdma
                c["pxn"] += lk.proxy_rank is not None
            else:
                intra[key][lk.transport] += 1
    keys = sorted(ranks)
    cols: dict[str, list] = defaultdict(list)
    for key in keys:
        rs, c = ranks[key], intra.get(key, Counter())
        graphs = [r.graph for r in rs if r.graph is not None]
        nvls = [r.nvls_support for r in rs if r.nvls_support is not None]
        collnet = {r.collnet for r in rs if r.collnet is not None}
        cols["communicator"].append(key[0])
        cols["host"].append(key[1])
        cols["started_at"].append(_one([r.started_at for r in rs]))
        cols["nranks"].append(_one([r.nranks for r in rs], max))
        cols["nnodes"].append(_one([r.nnodes for r in rs], max))
        cols["local_ranks"].append(_one([r.local_ranks for r in rs], max))
        cols["net_devices"].append(_one([r.net_devices for r in rs], max))
        has_links = bool(c)
        cols["intra_p2p"].append(c["P2P"] if has_links else None)
        cols["intra_shm"].append(c["SHM"] if has_links else None)
        cols["net_connections"].append(c["net"] if has_links else None)
        cols["gdrdma_connections"].append(c["gdr"] if has_links else None)
        cols["pxn_connections"].append(c["pxn"] if has_links else None)
        cols["graph_channels"].append(min(g[0] for g in graphs) if graphs else None)
        cols["graph_cross_nic"].append(max(g[1] for g in graphs) if graphs else None)
        cols["graph_type_intra"].append(_farthest([g[2] for g in graphs]))
        cols["graph_type_inter"].append(_farthest([g[3] for g in graphs]))
        cols["coll_channels"].append(_one([r.coll_channels for r in rs]))
        cols["nvls"].append(all(nvls) if nvls else None)
        cols["nvls_channels"].append(_one([r.nvls_channels for r in rs]))
        # One rank that could not set CollNet up is the host's state: NCCL then runs without it.
        cols["collnet"].append(next((s for s in ("fallback", "disabled", "connected") if s in collnet), None))
    n = len(keys)
    jobs = [
        job
        if isinstance(job, str)
        else next((job[(k[1], p)] for p in sorted(procs[k]) if (k[1], p) in job), "unknown")
        for k in keys
    ]
    present = {
        "time": pa.array([when] * n, type=TS),
        "job": pa.array(jobs, pa.string()).dictionary_encode(),
        "communicator": pa.array(cols["communicator"], pa.string()).dictionary_encode(),
        "host": pa.array(cols["host"], pa.string()).dictionary_encode(),
        "started_at": pa.array(cols["started_at"], TS),
        "nranks": pa.array(cols["nranks"], pa.int32()),
        "nnodes": pa.array(cols["nnodes"], pa.int32()),
        "local_ranks": pa.array(cols["local_ranks"], pa.int16()),
        "net_devices": pa.array(cols["net_devices"], pa.int16()),
        **{k: pa.array(cols[k], pa.int32()) for k in
           ("intra_p2p", "intra_shm", "net_connections", "gdrdma_connections", "pxn_connections")},
        "graph_channels": pa.array(cols["graph_channels"], pa.int16()),
        "graph_cross_nic": pa.array(cols["graph_cross_nic"], pa.int8()),
        "graph_type_intra": pa.array(cols["graph_type_intra"], pa.string()).dictionary_encode(),
        "graph_type_inter": pa.array(cols["graph_type_inter"], pa.string()).dictionary_encode(),
        "coll_channels": pa.array(cols["coll_channels"], pa.int16()),
        "nvls": pa.array(cols["nvls"], pa.bool_()),
        "nvls_channels": pa.array(cols["nvls_channels"], pa.int16()),
        "collnet": pa.array(cols["collnet"], pa.string()).dictionary_encode(),
    }  # fmt: skip
    return make_batch(NCCL_LAYOUT, n, present)
