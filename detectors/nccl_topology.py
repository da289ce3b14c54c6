"""NCCL start-up: a host whose topology probe found a worse layout than its peers of the same shape.

NCCL probes each host's NVLink/PCIe/NIC layout at communicator init and searches its channel
graphs over it. A probe that gets the layout wrong (an NCCL release that does not know the
NVSwitch generation, a GPU without peer access, a NIC seen on the wrong socket) leaves the job
running, over a slow path, from its first step. Rules (docs/detectors.md, NCCL start-up;
docs/phases/start-up.md); the norm is what hosts of the same shape (GPUs per host, NET devices,
single- or multi-node communicator) found across the fleet, held by ``agree_share`` of at least
``min_hosts`` of them; a host differs when its newest layout is, against that norm:

- **SHM where peers use P2P**: intra-node connections over host memory (``via SHM/direct``)
  where the peers' run none (NCCL took P2P to be impossible on this host);
- **fewer channels**: its own ring graph (``Pattern 4, ... nChannels N``) has fewer channels;
- **a farther intra-node path**: the graph's intra type (``NVL``) is farther (``PHB``, ``SYS``);
- **a cross-NUMA network path**: the graph's network type is farther (``SYS`` where ``PIX``),
  or it uses ``crossNic`` or PXN proxies (``NET/IB/0(2)``) where the peers do not;
- **NVLS missing**: ``NVLS multicast support is not available`` where the peers have it;
  **CollNet fallback**: ``Cannot initialize CollNet`` where the peers connected it.

Why not in detectors/nccl_transport.py: that detector judges ranks against their own
communicator in one view. This cannot: NCCL makes every rank agree on the minimum channel
count and the farthest path types (``src/init.cc``, after AllGather3), so one bad host cuts
the whole communicator's channels and its peers in the job are no norm. Only what each host
printed before the agreement (its own ``Pattern`` line) and its own intra-node transports name
it, and only hosts outside the job show what it should have been. The communicator's agreed
channels (``coll channels``) are evidence, never a rule: every host of the job shows them.
GPUDirect RDMA missing stays nccl_transport's finding; here it is evidence of the path.

Unknown is not healthy: a field the lines did not give (no ``Pattern`` line without
NCCL_GRAPH in NCCL_DEBUG_SUBSYS, no connection lines yet) is not judged, and a shape whose hosts
do not agree has no norm. One finding per host; it fires again when what differs changes, and
clears when the host's next layout matches, or when no layout of it was read for ``expire_s``.
A host's newest init (``started_at``) is its layout: views that still describe its earlier
communicators do not bring an old layout back.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

import numpy as np
import pyarrow as pa

from graywire.collectors.nccl.debug_log import PATH_TYPES
from graywire.collectors.schemas import RecordKind
from graywire.detectors.findings import Finding, Kind, Severity

KINDS = (Kind.NCCL_TOPOLOGY_MISMATCH,)
_PATH_RANK = {t: i for i, t in enumerate(PATH_TYPES)}
_COLLNET = {"connected": 0, "disabled": 1, "fallback": 2}


@dataclass(frozen=True, slots=True)
class NcclTopologyConfig:
    #: Hosts of a shape (the judged one included) with a value known, before it has a norm.
    min_hosts: int = 4
    #: Share of those hosts that must agree on the value for it to be the norm.
    agree_share: float = 0.7
    #: A host's layout not read again for this long is forgotten (and its finding cleared).
    expire_s: float = 3600.0


def _col(batch: pa.RecordBatch, name: str) -> list[Any]:
    arr = batch.column(name)
    return (arr.cast(arr.type.value_type) if pa.types.is_dictionary(arr.type) else arr).to_pylist()


def _older(r: dict[str, Any], than: dict[str, Any]) -> bool:
    a, b = r.get("started_at"), than.get("started_at")
    return a is not None and b is not None and a < b


#: Per aspect: how to read it from a layout row (a number, larger is worse; None unknown).
_ASPECTS: dict[str, Any] = {
    "shm_not_p2p": lambda r: None if r["intra_shm"] is None else float(r["intra_shm"] > 0),
    "fewer_channels": lambda r: None if r["graph_channels"] is None else -float(r["graph_channels"]),
    "intra_path": lambda r: _PATH_RANK.get(r["graph_type_intra"]),
    "net_path": lambda r: _PATH_RANK.get(r["graph_type_inter"]) if r["nnodes"] != 1 else None,
    "cross_nic": lambda r: None if r["graph_cross_nic"] is None else float(r["graph_cross_nic"] > 0),
    "pxn": lambda r: None if not r["net_connections"] else float((r["pxn_connections"] or 0) > 0),
    "nvls_missing": lambda r: None if r["nvls"] is None else float(not r["nvls"]),
    "collnet_fallback": lambda r: _COLLNET.get(r["collnet"]),
}
_WHAT = {
    "shm_not_p2p": "SHM where its peers use P2P",
    "fewer_channels": "fewer channels in its own ring graph",
    "intra_path": "a farther intra-node path",
    "net_path": "a farther (cross-NUMA) network path",
    "cross_nic": "crossNic where its peers have none",
    "pxn": "network traffic through PXN proxies where its peers have none",
    "nvls_missing": "no NVLS multicast where its peers have it",
    "collnet_fallback": "CollNet fell back where its peers connected it",
}


class NcclTopologyDetector:
    """Each host's newest NCCL layout against the layout its shape's hosts agree on."""

    name = "nccl_topology"
    version = "1"
    consumes = RecordKind.NCCL_LAYOUT
    kinds = KINDS

    def __init__(self, cfg: NcclTopologyConfig | None = None) -> None:
        self.cfg = cfg or NcclTopologyConfig()
        self.latest: dict[str, dict[str, Any]] = {}  # host -> its newest layout row
        self.open: dict[str, dict[str, Any]] = {}  # host -> evidence of its open finding

    def observe(self, batch: pa.RecordBatch) -> list[Finding]:
        if batch.num_rows == 0:
            return []
        now = batch.column("time")[0].as_py()
        rows = [dict(zip(batch.schema.names, vals, strict=True))
                for vals in zip(*(_col(batch, n) for n in batch.schema.names), strict=True)]  # fmt: skip
        judged: list[str] = []
        for r in rows:
            if r["host"] is None or r["local_ranks"] is None:
                continue  # no shape to compare: unknown, not healthy
            held = self.latest.get(r["host"])
            if held is not None and held["communicator"] != r["communicator"] and _older(r, held):
                continue  # an earlier init of the host, still described: its newest one wins
            self.latest[r["host"]] = {**r, "shape": self._shape(r)}
            judged.append(r["host"])
        out: list[Finding] = []
        for host, r in list(self.latest.items()):
            if (now - r["time"]).total_seconds() > self.cfg.expire_s:
                del self.latest[host]
                if host in self.open:
                    why = f"{host}: no NCCL layout read for {self.cfg.expire_s:g} s"
                    out.append(self._finding(host, "cleared", now, self.open.pop(host), why))
        hosts = sorted(h for h in set(judged) if h in self.latest)
        norms = {shape: self._norms(shape) for shape in {self.latest[h]["shape"] for h in hosts}}
        for host in hosts:
            me = self.latest[host]
            out += self._decide(host, self._judge(me, norms[me["shape"]]), now)
        return out

    @staticmethod
    def _shape(r: dict[str, Any]) -> tuple[Any, ...]:
        return (r["local_ranks"], r["net_devices"], (r["nnodes"] or 0) > 1)

    def _norms(self, shape: tuple[Any, ...]) -> dict[str, tuple[float, float, int]]:
        """Per aspect, the value the shape's hosts agree on: (value, share holding it, hosts known);
        an aspect without ``min_hosts`` known values or without agreement has none."""
        cfg = self.cfg
        peers = [r for r in self.latest.values() if r["shape"] == shape]
        out: dict[str, tuple[float, float, int]] = {}
        for aspect, read in _ASPECTS.items():
            vals = np.array([v for v in map(read, peers) if v is not None], dtype=float)
            if vals.size < cfg.min_hosts:
                continue
            uniq, counts = np.unique(vals, return_counts=True)
            share = float(counts.max() / vals.size)
            if share >= cfg.agree_share:
                out[aspect] = (float(uniq[np.argmax(counts)]), share, int(vals.size))
        return out

    def _judge(self, me: dict[str, Any], norms: dict[str, tuple[float, float, int]]) -> dict[str, Any]:
        """What is worse on a host than the norm of its shape: aspect -> its value and the norm."""
        diff: dict[str, Any] = {}
        for aspect, (norm, share, known) in norms.items():
            mine = _ASPECTS[aspect](me)
            if mine is not None and mine > norm:
                diff[aspect] = {"host": self._show(aspect, mine), "peers": self._show(aspect, norm),
                                "peer_share": round(share, 3), "hosts_judged": known}  # fmt: skip
        return diff

    @staticmethod
    def _show(aspect: str, v: float) -> Any:
        if aspect == "fewer_channels":
            return int(-v)
        if aspect in ("intra_path", "net_path"):
            return PATH_TYPES[int(v)]
        if aspect == "collnet_fallback":
            return next(k for k, i in _COLLNET.items() if i == int(v))
        return bool(v)

    def _decide(self, host: str, diff: dict[str, Any], now: datetime) -> list[Finding]:
        prev = self.open.get(host)
        if not diff:
            if prev is None:
                return []
            del self.open[host]
            return [
                self._finding(host, "cleared", now, prev, f"{host}: its NCCL layout now matches its peers'")
            ]
        r = self.latest[host]
        ev = {
            "host": host, "job": r["job"], "communicator": r["communicator"], "differs": diff,
            "shape": {"local_ranks": r["local_ranks"], "net_devices": r["net_devices"],
                      "multi_node": r["shape"][2]},
            "layout": {k: r[k] for k in ("intra_p2p", "intra_shm", "graph_channels", "graph_type_intra",
                                         "graph_type_inter", "graph_cross_nic", "net_connections",
                                         "gdrdma_connections", "pxn_connections", "coll_channels", "nvls",
                                         "nvls_channels", "collnet")},
            "side": "host",
        }  # fmt: skip
        if prev is not None and prev["differs"] == diff:
            self.open[host] = ev
            return []
        self.open[host] = ev
        what = "; ".join(
            f"{_WHAT[a]} ({d['host']} vs {d['peers']})" if a in ("fewer_channels", "intra_path", "net_path")
            else _WHAT[a] for a, d in diff.items()
        )  # fmt: skip
        return [
            self._finding(
                host, "firing", now, ev, f"{host}: NCCL probed a worse layout than its peers: {what}"
            )
        ]

    def _finding(self, host: str, status: str, now: datetime, ev: dict[str, Any], summary: str) -> Finding:
        return Finding(
            kind=Kind.NCCL_TOPOLOGY_MISMATCH,
            entity=host,
            status=status,  # type: ignore[arg-type]
            time=now,
            severity=Severity.WARNING,
            summary=summary,
            detector=f"{self.name}/{self.version}",
            node=host,
            score=float(len(ev.get("differs", {}))),
            confidence=min(1.0, min((d["peer_share"] for d in ev.get("differs", {}).values()), default=1.0)),
            evidence=ev,
        )
