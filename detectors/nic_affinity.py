"""GPU<->NIC affinity: a GPU whose rail NIC is farther away than on the host's peers.

The ideal data path is GPUDirect RDMA with the GPU and its rail NIC under one PCIe switch
(``PIX``/``PXB`` in ``nvidia-smi topo -m``). A NIC fitted in a slot on the other socket, or a
riser that puts it behind the CPU's host bridges, leaves the GPU at ``NODE`` or ``SYS``: NCCL then
turns GPUDirect RDMA off for that pair (``ncclTopoCheckGdr``: distance above ``PXB``) and stages
through host memory over the CPU interconnect, or hands the GPU to another GPU's NIC. The rail
runs at a fraction of its bandwidth from boot, and nothing fails.

Rules:

- Per (host, GPU index) the data path is the path to the GPU's *rail NIC*: the host's NIC the
  fabric model puts on rail *g* for GPU *g* (rail-optimized clusters cable GPU *g*'s NIC to rail
  *g*). Where the model names no rails for the host, it is the nearest of the host's compute NICs
  (the NICs the model lists for it; all of them when it lists none). A rail NIC whose path is
  unknown leaves the GPU unknown; it is not replaced by a nearer NIC of another GPU, since
  NCCL would then share that NIC between two GPUs.
- It is judged against peers: the same GPU index on hosts of the same shape (GPU count and
  compute-NIC count), so a whole fleet wired alike, ``NODE`` by design, raises nothing. A GPU is
  flagged when its path is farther than the peers' most common path (held by at least
  ``peer_share`` of at least ``min_peers`` other hosts) *and* farther than ``gdr_level``.
- Layout is deterministic state: one view is the verdict (no debounce). A host's view replaces
  its last one; a GPU whose paths are all unknown, or a host that stops reporting, neither
  opens nor closes anything.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from graywire.collectors.host.gpu_topo import GDR_DEFAULT_LEVEL, LEVEL_RANK, LEVELS
from graywire.collectors.keys import port_key
from graywire.collectors.model import Fabric
from graywire.collectors.schemas import RecordKind
from graywire.detectors.findings import Finding, Kind, Severity

UNKNOWN = -1


@dataclass(frozen=True, slots=True)
class NicAffinityConfig:
    #: A nearest path farther than this loses GPUDirect RDMA (NCCL's NCCL_NET_GDR_LEVEL default).
    gdr_level: str = GDR_DEFAULT_LEVEL
    #: Other hosts of the same shape that must report the same GPU index before it is judged.
    min_peers: int = 3
    #: Share of those hosts that must agree on the most common path.
    peer_share: float = 0.5


def _strings(arr: pa.Array) -> np.ndarray:
    if pa.types.is_dictionary(arr.type):
        arr = arr.cast(pa.string())
    return np.asarray(arr.to_pylist(), dtype=object)


class NicAffinityDetector:
    """Keeps every host's latest GPU->rail-NIC path and judges each GPU against its peers."""

    name = "nic_affinity"
    version = "1"
    consumes = RecordKind.GPU_NIC_PATH
    kinds = (Kind.GPU_NIC_AFFINITY,)

    def __init__(self, fabric: Fabric | None = None, cfg: NicAffinityConfig | None = None) -> None:
        self.fabric = fabric
        self.cfg = cfg or NicAffinityConfig()
        if self.cfg.gdr_level not in LEVEL_RANK:
            raise ValueError(f"gdr_level must be one of {', '.join(LEVELS)}, not {self.cfg.gdr_level!r}")
        self.hosts: dict[str, int] = {}
        self.names: list[str] = []
        self.shapes: dict[tuple[int, int], int] = {}
        self.shape = np.zeros(0, dtype=np.int64)
        self.rank = np.zeros((0, 0), dtype=np.int8)  # (host, GPU) -> nearest level rank, -1 unknown
        self.nic = np.zeros((0, 0), dtype=object)  # the rail (or nearest) NIC's name
        self.gpu_numa = np.zeros((0, 0), dtype=np.int16)
        self.nic_numa = np.zeros((0, 0), dtype=np.int16)
        self.source = np.zeros((0, 0), dtype=object)
        self.open: dict[tuple[int, int], dict[str, Any]] = {}

    # -- state ------------------------------------------------------------------------------------
    def _grow(self, hosts: int, gpus: int) -> None:
        h0, g0 = self.rank.shape
        if hosts <= h0 and gpus <= g0:
            return
        h, g = max(hosts, h0, 2 * h0), max(gpus, g0)

        def grown(a: np.ndarray, fill: Any) -> np.ndarray:
            out = np.full((h, g), fill, dtype=a.dtype)
            out[:h0, :g0] = a
            return out

        self.rank = grown(self.rank, UNKNOWN)
        self.nic = grown(self.nic, None)
        self.gpu_numa = grown(self.gpu_numa, -1)
        self.nic_numa = grown(self.nic_numa, -1)
        self.source = grown(self.source, None)
        shape = np.full(h, -1, dtype=np.int64)
        shape[:h0] = self.shape
        self.shape = shape

    def _host_index(self, name: str) -> int:
        i = self.hosts.get(name)
        if i is None:
            i = self.hosts[name] = len(self.names)
            self.names.append(name)
        return i

    # -- one batch ----------------------------------------------------------------------------------
    def observe(self, batch: pa.RecordBatch) -> list[Finding]:
        if batch.num_rows == 0:
            return []
        now: datetime = batch.column("time")[0].as_py()
        host_col = batch.column("host")
        if pa.types.is_dictionary(host_col.type):
            codes = host_col.indices.to_numpy(zero_copy_only=False).astype(np.int64)
            h_of_code = np.array([self._host_index(str(v)) for v in host_col.dictionary.to_pylist()])
            h = h_of_code[codes]
        else:
            h = np.array([self._host_index(str(v)) for v in host_col.to_pylist()], dtype=np.int64)
        gpu = batch.column("gpu").to_numpy(zero_copy_only=False).astype(np.int64)
        nic = _strings(batch.column("nic"))
        path = _strings(batch.column("path"))
        rank = np.array(
            [LEVEL_RANK.get(p, UNKNOWN) if p is not None else UNKNOWN for p in path], dtype=np.int64
        )
        gnuma = batch.column("gpu_numa").fill_null(-1).to_numpy(zero_copy_only=False).astype(np.int16)
        nnuma = batch.column("nic_numa").fill_null(-1).to_numpy(zero_copy_only=False).astype(np.int16)
        source = _strings(batch.column("source"))
        if (gpu < 0).any():
            raise ValueError("gpu_nic_path: negative GPU index")
        keep, rail = self._compute_nics(h, nic)
        self._grow(len(self.names), int(gpu.max()) + 1)
        G = self.rank.shape[1]
        cell = h * G + gpu
        on_rail = rail == gpu
        has_rail = np.bincount(cell[on_rail], minlength=self.rank.size) > 0
        seen = np.unique(h)
        # A host's view replaces its last one.
        self.rank[seen] = UNKNOWN
        self.nic[seen] = None
        self.gpu_numa[seen] = -1
        self.nic_numa[seen] = -1
        self.source[seen] = None
        for host in seen.tolist():  # one entry per host of the batch, for its shape
            mine = h == host
            shape = (int(np.unique(gpu[mine]).size), int(np.unique(nic[mine & keep]).size))
            self.shape[host] = self.shapes.setdefault(shape, len(self.shapes))
        # Per (host, GPU) the rail NIC's path, else the nearest known one: sort by cell, then
        # rank (unknown last), take the first of each cell.
        use = keep & (rank >= 0) & (on_rail | ~has_rail[cell])
        order = np.lexsort((np.where(use, rank, 99), cell))
        first = order[np.unique(cell[order], return_index=True)[1]]
        first = first[use[first]]
        hh, gg = h[first], gpu[first]
        self.rank[hh, gg] = rank[first]
        self.nic[hh, gg] = nic[first]
        self.gpu_numa[hh, gg] = gnuma[first]
        self.nic_numa[hh, gg] = nnuma[first]
        self.source[hh, gg] = source[first]
        return self._judge(now)

    def _compute_nics(self, h: np.ndarray, nic: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Rows of NICs the fabric lists as the host's ports (every row of a host it lists none
        of), and each row's rail in the model (-1: none)."""
        if self.fabric is None or h.size == 0:
            return np.ones(h.size, dtype=bool), np.full(h.size, -1, dtype=np.int64)
        names = np.asarray(self.names, dtype=object)[h]
        keys = pc.binary_join_element_wise(pa.array(names, pa.string()), pa.array(nic, pa.string()), "/")
        idx = self.fabric.lookup(keys)
        known = idx >= 0
        host_known = np.bincount(h, weights=known, minlength=h.max() + 1) > 0
        rail = np.where(known, self.fabric.rail[np.maximum(idx, 0)], -1).astype(np.int64)
        return known | ~host_known[h], rail

    def _judge(self, now: datetime) -> list[Finding]:
        cfg = self.cfg
        G = self.rank.shape[1]
        n_levels = len(LEVELS)
        valid = (self.rank >= 0) & (self.shape[:, None] >= 0)
        group = np.where(valid, self.shape[:, None] * G + np.arange(G)[None, :], -1)
        n_groups = int(group.max()) + 1 if valid.any() else 0
        counts = np.zeros((max(n_groups, 1), n_levels), dtype=np.int64)
        np.add.at(counts, (group[valid], self.rank[valid].astype(np.int64)), 1)
        total = counts.sum(axis=1)
        mode = counts.argmax(axis=1)
        g_idx = np.maximum(group, 0)
        peers = total[g_idx] - 1  # the other hosts reporting this GPU index at this shape
        peer_mode = counts[g_idx, mode[g_idx]] - (self.rank == mode[g_idx])
        agree = peer_mode >= cfg.peer_share * np.maximum(peers, 1)
        bad = (
            valid
            & (peers >= cfg.min_peers)
            & agree
            & (self.rank > mode[g_idx])
            & (self.rank > LEVEL_RANK[cfg.gdr_level])
        )
        out: list[Finding] = []
        flagged = set(zip(*np.nonzero(bad), strict=True))
        for hg in sorted(flagged - set(self.open)):
            host, g = int(hg[0]), int(hg[1])
            ev = self._evidence(host, g, group, int(mode[g_idx[host, g]]), int(peers[host, g]))
            self.open[(host, g)] = ev
            out.append(self._finding("firing", host, g, now, ev))
        for host, g in sorted(set(self.open) - flagged):
            if not valid[host, g]:
                continue  # unknown now: neither closes nor confirms
            ev = self.open.pop((host, g))
            ev = {**ev, "path": LEVELS[int(self.rank[host, g])], "nic": self.nic[host, g]}
            out.append(self._finding("cleared", host, g, now, ev))
        return out

    def _evidence(self, host: int, g: int, group: np.ndarray, mode: int, peers: int) -> dict[str, Any]:
        """What a person needs: this GPU's nearest NIC and path, the peers' path and usual NIC."""
        same = (group[:, g] == group[host, g]) & (self.rank[:, g] == mode)
        same[host] = False
        names, n = np.unique(self.nic[same, g].astype(str), return_counts=True)
        expected_nic = str(names[n.argmax()]) if names.size else None
        numa = int(self.gpu_numa[host, g])
        nic_numa = int(self.nic_numa[host, g])
        return {
            "gpu": g,
            "nic": self.nic[host, g],
            "path": LEVELS[int(self.rank[host, g])],
            "expected_path": LEVELS[mode],
            "expected_nic": expected_nic,
            "peer_hosts": peers,
            "peer_hosts_at_expected": int(same.sum()),
            "gpu_numa": numa if numa >= 0 else None,
            "nic_numa": nic_numa if nic_numa >= 0 else None,
            "gdr_level": self.cfg.gdr_level,
            "source": self.source[host, g],
        }

    def _finding(self, status: str, host: int, g: int, now: datetime, ev: dict[str, Any]) -> Finding:
        name = self.names[host]
        nic = ev.get("expected_nic") or ev.get("nic")
        if status == "firing":
            where = "the CPU interconnect" if ev["path"] == "SYS" else "the CPU's host bridges"
            summary = (
                f"{name} GPU{g}: its RDMA NIC {ev['nic']} is {ev['path']}, its peers have "
                f"{ev['expected_path']} ({ev['expected_nic']}): no GPUDirect RDMA, traffic crosses {where}"
            )
        else:
            summary = f"{name} GPU{g}: its RDMA NIC {ev['nic']} is {ev['path']} again"
        return Finding(
            kind=Kind.GPU_NIC_AFFINITY,
            entity=f"{name}/GPU{g}",
            status=status,  # type: ignore[arg-type]
            time=now,
            severity=Severity.WARNING,
            summary=summary,
            detector=self.name,
            node=name,
            port=port_key(name, nic) if nic else None,
            score=float(LEVEL_RANK[ev["path"]] - LEVEL_RANK[ev["expected_path"]]),
            evidence=ev,
        )
